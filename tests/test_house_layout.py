"""House rule: the run layout is declared once, in :mod:`pipeline.core.layout`.

No Python file of ``pipeline``, ``sft``, ``dags`` or ``bench`` other than the layout module
spells a manifest file name (``_manifest.json``, ``skillpipe_sft_manifest.json``,
``grpo_manifest.json``, ``checkpoint.json``) as a string literal, alone or at the end of a path;
docstrings, comments and prose inside a longer string (help texts) may still mention them.
The scanner has a self-test on small sources so the rule cannot pass vacuously.
"""
from __future__ import annotations

import ast
import os

from pipeline.core import layout
from tests.helpers.paths import REPO
from tests.test_house import CODE_DIRS, imported_modules, python_files

LAYOUT_MODULE = os.path.join(REPO, "pipeline", "core", "layout.py")


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """``id`` of every string constant that is a module, class or function docstring."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def names_a_manifest(text: str, names: tuple[str, ...] = layout.MANIFEST_NAMES) -> str | None:
    """The manifest name ``text`` spells as a file name (the whole string, or its last path
    component), else ``None``."""
    last = text.replace("\\", "/").rsplit("/", 1)[-1]
    return last if last in names else None


def manifest_literals(source: str, where: str) -> list[str]:
    """``"where:line 'literal'"`` for every string constant of ``source`` (f-string parts
    included, docstrings excluded) that spells a manifest file name."""
    tree = ast.parse(source)
    docs = _docstring_nodes(tree)
    hits = [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs and names_a_manifest(node.value)]
    return [f"{where}:{n.lineno} {n.value!r}" for n in sorted(hits, key=lambda n: (n.lineno, n.col_offset))]


def test_scanner_finds_literals_and_skips_prose():
    src = ('"""Reads ``_manifest.json``."""\n'
           'import os\n'
           'A = "_manifest.json"\n'
           'def f(d, run_id):\n'
           '    """Opens grpo_manifest.json."""\n'
           '    # skillpipe_sft_manifest.json in a comment\n'
           '    os.path.join(d, "checkpoint.json")\n'
           '    g = f"{d}/runs/{run_id}/**/_manifest.json"\n'
           '    return ("export folder (with _manifest.json) or a Parquet file",\n'
           '            "runs/r/sft_fit/skillpipe_sft_manifest.json")\n')
    assert manifest_literals(src, "x.py") == [
        "x.py:3 '_manifest.json'", "x.py:7 'checkpoint.json'", "x.py:8 '/**/_manifest.json'",
        "x.py:10 'runs/r/sft_fit/skillpipe_sft_manifest.json'"]
    uses = 'from pipeline.core.layout import ARTIFACT_MANIFEST\nB = ARTIFACT_MANIFEST\n'
    assert manifest_literals(uses, "y.py") == []
    assert names_a_manifest("grpo_manifest.json.bak") is None
    assert names_a_manifest("C:\\run\\grpo_manifest.json") == "grpo_manifest.json"


def test_manifest_names_are_literals_only_in_the_layout_module():
    found = []
    for path in python_files(*CODE_DIRS):
        if os.path.abspath(path) == LAYOUT_MODULE:
            continue
        with open(path, encoding="utf-8") as f:
            found += manifest_literals(f.read(), os.path.relpath(path, REPO))
    assert not found, "use the names of pipeline.core.layout instead of these literals:\n" + "\n".join(found)


def test_the_layout_module_declares_every_name_and_stands_alone():
    with open(LAYOUT_MODULE, encoding="utf-8") as f:
        source = f.read()
    assert imported_modules(source) <= {"__future__", "os"}
    assert sorted(m.split("'")[1] for m in manifest_literals(source, "layout.py")) == sorted(
        ["_manifest.json", "skillpipe_sft_manifest.json", "grpo_manifest.json", "checkpoint.json"])


def test_old_names_are_the_one_declaration():
    from pipeline.core import artifacts
    from pipeline.engine import remote
    from pipeline import inspect
    from pipeline.report import training
    from sft import manifest, run_step
    from sft.rl import checkpoint, rollout_io, step
    assert artifacts.MANIFEST == remote.MANIFEST == layout.ARTIFACT_MANIFEST == "_manifest.json"
    assert manifest.MANIFEST_NAME == training.SFT_MANIFEST == layout.SFT_MANIFEST == "skillpipe_sft_manifest.json"
    assert step.MANIFEST_NAME == step.GRPO.manifest_name == layout.GRPO_MANIFEST == "grpo_manifest.json"
    assert run_step.SFT_FIT.manifest_name == manifest.MANIFEST_NAME
    assert rollout_io.RolloutStep.manifest_name == layout.ARTIFACT_MANIFEST
    assert checkpoint.MANIFEST == layout.CHECKPOINT_MANIFEST == "checkpoint.json"
    assert inspect.STEP_MANIFESTS == ("skillpipe_sft_manifest.json", "grpo_manifest.json")
    assert (run_step.SFT_FIT.name, step.GRPO.name, rollout_io.RolloutStep.name) == ("sft_fit", "grpo", "rollout")


def test_paths_follow_the_declared_tree(tmp_path):
    from pipeline.core.artifacts import ArtifactStore
    root = str(tmp_path)
    assert layout.run_dir(root, "r1") == os.path.join(root, "runs", "r1")
    assert ArtifactStore(root, "r1").run_dir == layout.run_dir(root, "r1")
    assert layout.stage_manifest_path(root, "r1", "export") == os.path.join(root, "runs", "r1", "export",
                                                                           "_manifest.json")
    assert layout.stage_manifest_path(root, "r1", "distill", "shard-00002") == os.path.join(
        root, "runs", "r1", "distill", "shard-00002", "_manifest.json")
    assert layout.eval_stage(layout.SFT_STEP) == "eval_sft_fit"
    assert list(layout.STEP_MANIFESTS.items()) == [("sft_fit", "skillpipe_sft_manifest.json"),
                                                   ("grpo", "grpo_manifest.json")]


#: The steps of the fingerprint recipe of a step after the data stages (pipeline.core.manifest):
#: only the one step runner (pipeline.engine.steps.run_step) may call them. Its manifest is written
#: by the recorder (tests/test_house_manifests.py).
RECIPE = {"reusable", "step_fingerprint", "upstream_facts"}
STEP_RUNNER = os.path.join(REPO, "pipeline", "engine", "steps.py")


def recipe_calls(source: str, where: str) -> list[str]:
    """``"where:line name"`` for each call of a :data:`RECIPE` function through the
    ``pipeline.core.manifest`` module or a name imported from it."""
    tree = ast.parse(source)
    aliases, direct = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "pipeline.core":
            aliases |= {a.asname or a.name for a in node.names if a.name == "manifest"}
        elif isinstance(node, ast.ImportFrom) and node.module == "pipeline.core.manifest":
            direct |= {a.asname or a.name for a in node.names if a.name in RECIPE}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == "pipeline.core.manifest" and a.asname}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in RECIPE and isinstance(f.value, ast.Name) \
                    and f.value.id in aliases:
                hits.append(f"{where}:{node.lineno} {f.attr}")
            elif isinstance(f, ast.Name) and f.id in direct:
                hits.append(f"{where}:{node.lineno} {f.id}")
    return hits


def test_recipe_scanner_sees_both_import_forms():
    src = ("from pipeline.core import manifest as m\nfrom pipeline.core.manifest import upstream_facts\n"
           "m.reusable('p', 'f')\nupstream_facts(s, [])\nother.upstream_facts(1)\n")
    assert recipe_calls(src, "x.py") == ["x.py:3 reusable", "x.py:4 upstream_facts"]


def test_one_step_runner_fingerprints_reuses_and_records():
    found = []
    for path in python_files(*CODE_DIRS):
        if os.path.abspath(path) != STEP_RUNNER:
            with open(path, encoding="utf-8") as f:
                found += recipe_calls(f.read(), os.path.relpath(path, REPO))
    assert not found, "declare a pipeline.stage.step.TrainingStep and run it with run_step:\n" + "\n".join(found)

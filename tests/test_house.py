"""House rules that keep the tree readable, checked on the source with ``ast`` and regexes:

- no function or method is longer than :data:`MAX_FUNCTION_LINES` lines (def line to last line);
- ``pipeline`` imports neither ``sft`` nor Airflow (``sft`` builds on ``pipeline``, the DAG wires both);
- code, schemas and docs cite no document that is not in the repository (a reader of the clone
  must be able to follow every reference).

Each rule has a self-test on a small snippet so that it cannot pass vacuously.
"""
from __future__ import annotations

import ast
import os
import re

import pytest

from tests.helpers.paths import REPO

MAX_FUNCTION_LINES = 60
CODE_DIRS = ("pipeline", "sft", "dags", "bench")
# Citations of documents outside the clone: the SkillRL pipeline spec, the team's design notes,
# and the issue tracker. Defect ids of the reference (D-P1...) are fine: docs/reference_defects.md
# defines them (test_cited_defects_are_documented).
# Words that name who found something or when (a tryer, a helper, a session, an issue and its
# holes) instead of the behaviour: the reader of the clone cannot follow them either.
OUTSIDE_REFERENCE = re.compile(r"spec §|DESIGN(\.md)? ?§|DESIGN\.md|STYLE\.md|\bissue\s*#?\d+|by the lead|reference spec"
                               r"|\btryers?\b|\bthe issue'?s\b|\bholes? \d+\b|\bhelper [A-Z]\b|\bsession \d+\b", re.I)
TEXT_SUFFIXES = (".py", ".md", ".txt", ".json", ".yaml", ".yml", ".sh", ".j2", ".css", ".js", ".toml", ".cfg", ".ini")
SKIPPED_DIRS = {".git", ".venv", "runs", "banks", "__pycache__", ".pytest_cache", "airflow_home", "node_modules",
                "fixtures", "data"}  # fixtures and data hold third-party text as it was published
DEFECT_ID = re.compile(r"\bD-[A-Z]{1,2}\d+\b")


def python_files(*dirs: str) -> list[str]:
    out = []
    for d in dirs:
        for folder, subdirs, files in os.walk(os.path.join(REPO, d)):
            subdirs[:] = [s for s in subdirs if s != "__pycache__"]
            out += [os.path.join(folder, f) for f in files if f.endswith(".py")]
    return sorted(out)


def long_functions(source: str, where: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``"where:line name (N lines)"`` for every function in ``source`` longer than ``limit``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > limit:
                found.append(f"{where}:{node.lineno} {node.name} ({n} lines)")
    return found


def imported_modules(source: str) -> set[str]:
    """Top-level package names imported anywhere in ``source`` (absolute imports only)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_long_function_rule_catches_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    assert long_functions(f"def f():\n{body}\n", "a.py") == ["a.py:1 f (62 lines)"]
    assert long_functions("def g():\n    return 1\n", "a.py") == []


def test_no_function_is_longer_than_the_limit():
    found = []
    for path in python_files(*CODE_DIRS):
        with open(path, encoding="utf-8") as f:
            found += long_functions(f.read(), os.path.relpath(path, REPO))
    assert not found, "split these into named steps:\n" + "\n".join(found)


def test_import_rule_sees_nested_imports():
    assert imported_modules("def f():\n    from sft.rl import grpo\n") == {"sft"}
    assert imported_modules("from . import x\nimport airflow.sdk\n") == {"airflow"}


def test_bench_imports_nothing_from_tests():
    """Benchmarks stand on their own: loopback stubs and servers they share with the tests live in
    ``bench/`` (chat_stub, cluster, s3_server, stub_*), and the tests import them from there."""
    bad = []
    for path in python_files("bench"):
        with open(path, encoding="utf-8") as f:
            if "tests" in imported_modules(f.read()):
                bad.append(os.path.relpath(path, REPO))
    assert not bad, "bench/ must not import tests/: " + ", ".join(bad)


def test_pipeline_imports_neither_sft_nor_airflow():
    bad = []
    for path in python_files("pipeline"):
        with open(path, encoding="utf-8") as f:
            hits = imported_modules(f.read()) & {"sft", "airflow", "dags"}
        if hits:
            bad.append(f"{os.path.relpath(path, REPO)}: {', '.join(sorted(hits))}")
    assert not bad, "pipeline must not depend on these:\n" + "\n".join(bad)


@pytest.mark.parametrize("text,hit", [("see spec §4.2", True), ("defect D-M1 of the reference", False),
                                      ("(issue 14, hole 3)", True), ("DESIGN §8: quantizer", True),
                                      ("the D-dimensional embedding", False), ("an issue with 3 rows", False),
                                      ("found by the Tryer", True), ("Issue 14 hole 8", True), ("helper E found", True),
                                      ("the issue's example", True), ("a WebShop session fixed_1", False)])
def test_outside_reference_pattern(text, hit):
    assert bool(OUTSIDE_REFERENCE.search(text)) is hit


def test_no_reference_to_documents_outside_the_repository():
    paths = _checked_paths()
    me = os.path.abspath(__file__)
    found = []
    for path in paths:
        if os.path.abspath(path) == me:
            continue
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                m = OUTSIDE_REFERENCE.search(line)
                if m:
                    found.append(f"{os.path.relpath(path, REPO)}:{i}: {m.group(0)!r}")
    assert not found, f"{len(found)} references to documents outside the repository:\n" + "\n".join(found[:50])


def _checked_paths() -> list[str]:
    """Every text file of the clone (case-insensitive rules), less third-party data and outputs."""
    out = []
    for folder, subdirs, files in os.walk(REPO):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        out += [os.path.join(folder, f) for f in sorted(files)
                if f.endswith(TEXT_SUFFIXES) or f in ("Makefile", "run") and not f.startswith(".")]
    return out


def test_file_names_name_behaviour():
    names = [os.path.relpath(p, REPO) for p in _checked_paths()]
    assert len(names) > 200
    assert [n for n in names if re.search(r"tryer|session\d|issue\d", n, re.I)] == []


def test_cited_defects_are_documented():
    with open(os.path.join(REPO, "docs", "reference_defects.md"), encoding="utf-8") as f:
        defined = set(re.findall(r"^\| (D-[A-Z]{1,2}\d+) \|", f.read(), re.M))
    assert len(defined) >= 30
    cited = {}
    for path in _checked_paths():
        with open(path, encoding="utf-8") as f:
            for d in DEFECT_ID.findall(f.read()):
                cited.setdefault(d, os.path.relpath(path, REPO))
    missing = {d: where for d, where in cited.items() if d not in defined}
    assert not missing, f"defect ids cited but not defined in docs/reference_defects.md: {missing}"

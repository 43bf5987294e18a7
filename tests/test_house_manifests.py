"""House rule: one recorder writes the manifest of finished work (:mod:`pipeline.core.recorder`).

A function of ``pipeline``, ``sft``, ``dags`` or ``bench`` *writes a manifest* when it calls a file
writer (``atomic_write_json``, ``atomic_write``, ``open`` in a writing mode, ``write_text``,
``write_bytes``, ``pipe_file``, ``pipe``, ``put_file``) on a path built from a manifest name: a
name of ``pipeline.core.layout.MANIFEST_NAMES`` (``ARTIFACT_MANIFEST``...), a module's alias of one
(``MANIFEST``, ``MANIFEST_NAME``, an ``import ... as``), a step's ``manifest_name``, or a variable
of the function assigned from such a path. Only the recorder may, and the few writers of
:data:`NOT_A_MANIFEST`, each with the reason what it writes is no manifest of finished work; that
list is exact (each still writes one), so it cannot rot. The scanner has a self-test.
"""
from __future__ import annotations

import ast
import os

from tests.helpers.paths import REPO
from tests.test_house import CODE_DIRS, python_files

RECORDER = "pipeline/core/recorder.py"
#: ``(module, function)`` -> why what it writes under a manifest name is no manifest of finished work.
NOT_A_MANIFEST = {
    ("sft/manifest.py", "write_checkpoint_manifest"):
        "an SFT checkpoint-N folder's own metadata, read by the resume check: a resumable state",
    ("sft/rl/checkpoint.py", "save"):
        "a GRPO checkpoint's own metadata (checkpoint.json: step, bank, policy hashes): a resumable state",
    ("pipeline/engine/remote.py", "pull_folder"):
        "a copy, in the local mirror, of a committed remote manifest the recorder wrote",
    ("pipeline/engine/remote.py", "RemoteRun.publish"):
        "the mirror of a local manifest the recorder wrote, published to object storage",
}
WRITERS = {"atomic_write_json", "atomic_write", "write_text", "write_bytes", "pipe_file", "pipe", "put_file"}
#: Names that stand for a manifest file name wherever they appear (aliases are added per module).
MANIFEST_WORDS = {"ARTIFACT_MANIFEST", "SFT_MANIFEST", "GRPO_MANIFEST", "CHECKPOINT_MANIFEST", "MANIFEST",
                  "MANIFEST_NAME", "MANIFEST_NAMES", "STEP_MANIFESTS", "manifest_name"}


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any((isinstance(n, ast.Name) and n.id in names) or (isinstance(n, ast.Attribute) and n.attr in names)
               for n in ast.walk(node))


def _targets(node: ast.AST) -> list[str]:
    """Names bound by an assignment-like node (``x = ...``, ``x: T = ...``, ``(x := ...)``)."""
    if isinstance(node, ast.Assign):
        return [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope`` outside the functions defined in it (those are scopes of their own)."""
    out, todo = [], list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            out.append(node)
            todo += ast.iter_child_nodes(node)
    return out


def _tainted(scope: ast.AST, names: set[str]) -> set[str]:
    """``names`` plus every variable of ``scope`` assigned (through any chain) from a manifest path,
    and every parameter whose default is one."""
    names = set(names)
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = scope.args
        pos = a.posonlyargs + a.args
        pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
        names |= {arg.arg for arg, default in pairs if default is not None and _mentions(default, names)}
    nodes = _own_nodes(scope)
    while True:
        more = {t for n in nodes if getattr(n, "value", None) is not None
                and _targets(n) and _mentions(n.value, names) for t in _targets(n)} - names
        if not more:
            return names
        names |= more


def _writes(call: ast.Call, names: set[str]) -> bool:
    f = call.func
    fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    if fname in ("write_text", "write_bytes") and isinstance(f, ast.Attribute):
        return _mentions(f.value, names)
    if fname == "open":
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        writing = isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+")
        return bool(writing and call.args and _mentions(call.args[0], names))
    return fname in WRITERS and bool(call.args) and _mentions(call.args[0], names)


def _scopes(node: ast.AST, names: set[str], prefix: str = "") -> list[tuple[str, ast.AST, set[str]]]:
    """``(qualified name, node, tainted names)`` of ``node`` and of every function inside it
    (methods as ``Class.method``); a function sees the manifest paths of the scopes around it."""
    names = _tainted(node, names)
    out = [(prefix.rstrip(".") or "<module>", node, names)]
    todo = [(child, prefix) for child in ast.iter_child_nodes(node)]
    while todo:
        n, where = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out += _scopes(n, names, f"{where}{n.name}.")
        elif not isinstance(n, ast.Lambda):
            inner = f"{where}{n.name}." if isinstance(n, ast.ClassDef) else where
            todo += [(child, inner) for child in ast.iter_child_nodes(n)]
    return out


def manifest_writers(source: str) -> list[tuple[str, int]]:
    """``(function, line)`` of every call in ``source`` that writes a manifest file (module docstring)."""
    tree = ast.parse(source)
    words = MANIFEST_WORDS | {a.asname for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                              for a in n.names if a.name in MANIFEST_WORDS and a.asname}
    found = [(name, n.lineno) for name, scope, names in _scopes(tree, words) for n in _own_nodes(scope)
             if isinstance(n, ast.Call) and _writes(n, names)]
    return sorted(found, key=lambda x: x[1])


TOY = '''
import json, os
from pipeline.core.layout import ARTIFACT_MANIFEST as AM, SFT_MANIFEST
from pipeline.core.fsutil import atomic_write_json
MANIFEST = AM

def direct(d, m):
    atomic_write_json(os.path.join(d, MANIFEST), m)

def through_a_variable(d, m):
    path = os.path.join(d, SFT_MANIFEST)
    final = path
    with open(final, "w") as f:
        json.dump(m, f)

class Step:
    def save(self, p, fs):
        (p / AM).write_text("{}")
        fs.pipe_file(f"{p}/{self.manifest_name}", b"{}")

def reads_and_other_files(d):
    with open(os.path.join(d, MANIFEST)) as f:
        json.load(f)
    path = os.path.join(d, "summary.json")
    atomic_write_json(path, {})
'''


def test_the_scanner_sees_aliases_variables_open_and_methods():
    assert manifest_writers(TOY) == [("direct", 8), ("through_a_variable", 13), ("Step.save", 18),
                                     ("Step.save", 19)]


def house_writers() -> dict[tuple[str, str], list[int]]:
    """``{(module, function): lines}`` of every manifest writer of the house, the recorder aside."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in python_files(*CODE_DIRS):
        rel = os.path.relpath(path, REPO).replace(os.sep, "/")
        if rel == RECORDER:
            continue
        with open(path, encoding="utf-8") as f:
            for name, line in manifest_writers(f.read()):
                found.setdefault((rel, name), []).append(line)
    return found


def test_only_the_recorder_writes_a_manifest():
    with open(os.path.join(REPO, RECORDER), encoding="utf-8") as f:
        assert [n for n, _ in manifest_writers(f.read())] == ["record"]  # the scanner sees the recorder
    found = house_writers()
    others = sorted(f"{m}:{lines[0]} {fn}" for (m, fn), lines in found.items() if (m, fn) not in NOT_A_MANIFEST)
    assert not others, ("return what the work produced and let pipeline.core.recorder.record write its "
                        "manifest:\n" + "\n".join(others))
    assert sorted(found) == sorted(NOT_A_MANIFEST), "NOT_A_MANIFEST names a writer that no longer writes"

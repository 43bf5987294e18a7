"""Nothing in the repository reaches outside it (acceptance: "no test, fixture or product
module opens a path outside the repository; a test enforces it").

Every ``.py`` under ``tests/``, ``pipeline/``, ``sft/``, ``dags/`` and ``bench/`` is parsed with
:mod:`ast` (comments with :mod:`tokenize`) and these are offences:

- an absolute filesystem path in a string literal, an f-string part or a comment: a token that
  starts with a slash and one of :data:`ROOTS` (work, home, usr, ...), or a tilde (home) path;
- a ``..`` path component in a string literal (``"../x"``, ``os.path.join(d, "..")``), unless it
  sits in an expression anchored at ``__file__`` that provably stays inside the repository
  (then that expression is judged instead), or it is an operand of a comparison (``".." in
  p.parts`` is a check, not a path);
- a ``Path(__file__).parents[N]`` / ``.parent.parent...`` / ``os.path.dirname(...)`` chain,
  possibly joined with ``..``, that climbs above the repository root;
- a symlink under ``tests/fixtures/`` or ``data/`` that resolves outside the repository.

:data:`ALLOWED` lists the few literals that are fine, each with its reason. The checker is tested
on crafted offending sources first, so a checker that finds nothing cannot pass silently.
"""
from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "pipeline", "sft", "dags", "bench")
LINK_ROOTS = ("tests/fixtures", "data")
SELF = "tests/test_self_contained.py"

#: Top-level folders of a Linux or macOS filesystem, plus the host folders seen on this project's
#: machines (work, data, scratch, workspace): a string naming one is a path outside the clone.
#: Only these, so that HTTP routes (v1/chat/completions) are not mistaken for paths.
ROOTS = ("bin", "boot", "data", "dev", "etc", "home", "lib", "lib64", "media", "mnt", "nfs", "opt",
         "proc", "root", "run", "sbin", "scratch", "srv", "sys", "tmp", "usr", "var", "work",
         "workspace", "Users", "Volumes")
_ABS = re.compile(r"(?<![\w./~-])(/(?:%s)(?:/[^\s'\"`()\[\]{},;]*)?|~[/][^\s'\"`()\[\]{},;]*)(?![\w-])"
                  % "|".join(ROOTS))

#: Files that build Kubernetes Jobs: the paths they name are inside the container, not on this machine.
K8S = ("sft/submit.py", "sft/cli.py", "tests/sft/test_submit.py")

#: (files: one path relative to the repo, a tuple of them, or "*"; a path token, matched with
#: everything below it; reason). Kept small on purpose. This file itself may name these tokens.
ALLOWED: tuple[tuple[str | tuple[str, ...], str, str], ...] = (
    ("*", "/proc", "Linux procfs: state of our own processes (server pid checks, memory figures of a "
                   "benchmark, an unreadable-file case); the kernel provides it, nothing is written"),
    ("*", "~/.cache/skillpipe", "the documented cache of the converted base model (sft/base_model.py, "
                                "README); $SKILLPIPE_CACHE overrides it"),
    ("sft/submit.py", "/bin/bash", "the shell line of a Slurm batch script (POSIX), run on the cluster"),
    ("tests/sft/test_submit.py", "/bin/true", "a POSIX no-op program standing in for python in a local submit"),
    ("bench/parse_dedupe.py", "/tmp", "usage text: '--tmp /tmp' shows where a user may put a 1.8 GB tree"),
    (K8S, "/data", "the pod's PVC mount point (default --mount) and pod paths under it"),
    (K8S, "/workspace", "the working directory inside the container image (default --workdir)"),
    (K8S[::2], "/etc/skillpipe", "where the pod mounts the ConfigMap with the accelerate config"),
    ("tests/sft/test_submit.py", "/opt/venv/bin/python", "a custom image's python (--python), in a pod spec"),
    ("tests/sft/test_submit.py", "/home/me/e", "a pod path outside the mount that the test asserts is refused"),
    ("tests/pipeline/core/test_artifacts.py", "../evil", "a bad artifact file name the test asserts is rejected"),
    ("tests/pipeline/core/test_artifacts.py", "../x", "a bad stage name the test asserts is rejected"),
    ("tests/pipeline/engine/test_run_guard.py", "../escape", "a bad run id the test asserts is rejected"),
    # the reliability suite's escape attempts: run ids, stage names and artifact paths it asserts are refused
    ("bench/reliability_secrets.py", "../../../escaped", "an escape attempt the suite asserts is refused"),
    ("bench/reliability_secrets.py", "/etc/escaped", "an escape attempt the suite asserts is refused"),
    ("bench/reliability_secrets.py", "../escape", "an escape attempt the suite asserts is refused"),
    ("bench/reliability_secrets.py", "/tmp/escape", "an escape attempt the suite asserts is refused"),
    ("bench/reliability_secrets.py", "../x", "an escape attempt the suite asserts is refused"),
    ("bench/reliability_secrets.py", "..", "an escape attempt the suite asserts is refused"),
    ("tests/bench/test_reliability_suite.py", "/tmp/escape", "an escape attempt the test asserts is refused"),
)


def _allowed(rel: str, token: str) -> bool:
    """True when ``token`` (a path token or a ``..`` literal) is covered by :data:`ALLOWED` for file ``rel``."""
    for where, what, _reason in ALLOWED:
        files = (where,) if isinstance(where, str) else where
        if (rel == SELF or "*" in files or rel in files) and \
                (token == what or token.startswith(what.rstrip("/") + "/")):
            return True
    return False


def _apply(level: int, low: int, text: str) -> tuple[int, int]:
    """Walk the components of ``text`` from ``level`` (folders below the repo root); return the new
    level and the lowest level reached (negative = above the root)."""
    for part in re.split(r"[/\\]", text):
        if part == "..":
            level -= 1
            low = min(low, level)
        elif part not in ("", "."):
            level += 1
    return level, low


def _call_name(func: ast.expr) -> str:
    """Dotted name of a call target (``os.path.join``, ``Path``, ``x.resolve`` -> ``.resolve``)."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        base = _call_name(func.value) if isinstance(func.value, (ast.Name, ast.Attribute)) else ""
        return f"{base}.{func.attr}" if base else f".{func.attr}"
    return ""


_SAME = {"Path", "PurePath", "pathlib.Path", "os.path.abspath", "os.path.realpath", "os.path.normpath",
         "str", "os.fspath"}
_SAME_METHODS = {".resolve", ".absolute"}
_JOIN = {"os.path.join", "Path", "PurePath", "pathlib.Path"}


def _anchored(node: ast.AST, depth: int, used: set[int]) -> tuple[int, int] | None:
    """Level (folders below the repo root) of a path expression built from ``__file__``, and the
    lowest level it passes through; ``None`` when ``node`` is not such an expression.

    ``depth`` is the number of components of the scanned file's path relative to the repo (file
    name included). ``id()`` of each string constant consumed is added to ``used``."""
    if isinstance(node, ast.Name) and node.id == "__file__":
        return depth, depth
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = _anchored(node.value, depth, used)
        return None if inner is None else (inner[0] - 1, min(inner[1], inner[0] - 1))
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents"
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
        inner = _anchored(node.value.value, depth, used)
        if inner is None:
            return None
        up = inner[0] - node.slice.value - 1  # parents[0] is the parent
        return up, min(inner[1], up)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _joined(_anchored(node.left, depth, used), [node.right], used)
    if isinstance(node, ast.Call) and node.args:
        name = _call_name(node.func)
        if name == "os.path.dirname":
            inner = _anchored(node.args[0], depth, used)
            return None if inner is None else (inner[0] - 1, min(inner[1], inner[0] - 1))
        if name in _SAME_METHODS or name == ".joinpath":
            return _joined(_anchored(node.func.value, depth, used), node.args, used)
        if name in _SAME | _JOIN:
            return _joined(_anchored(node.args[0], depth, used), node.args[1:], used)
    if isinstance(node, ast.Call) and _call_name(node.func) in _SAME_METHODS:  # .resolve() without args
        return _anchored(node.func.value, depth, used)
    return None


def _joined(base: tuple[int, int] | None, parts: list[ast.expr], used: set[int]) -> tuple[int, int] | None:
    """``base`` joined with string-constant ``parts`` (a non-constant part: unknown, no descent)."""
    if base is None:
        return None
    level, low = base
    for p in parts:
        if isinstance(p, ast.Constant) and isinstance(p.value, str):
            used.add(id(p))
            level, low = _apply(level, low, p.value)
        else:
            level += 1  # a variable component: assume one folder down (it cannot be checked here)
    return level, low


def _path_tokens(text: str) -> Iterator[str]:
    """Absolute-path tokens in ``text`` (see :data:`_ABS`)."""
    for m in _ABS.finditer(text):
        yield m.group(1).rstrip(".:")  # the end of a sentence is not part of the path


def _string_constants(tree: ast.AST) -> Iterator[tuple[ast.Constant, ast.AST | None]]:
    """Every string constant of ``tree`` (f-string parts included) with its parent node."""
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            if isinstance(child, ast.Constant) and isinstance(child.value, str):
                yield child, parent


def _dotdot(text: str) -> bool:
    """True when ``text`` has a ``..`` path component outside its absolute-path tokens (those are
    judged as paths: ``/data/../etc`` by its root)."""
    return ".." in re.split(r"[/\\]", _ABS.sub(" ", text))


def _fstring_text(node: ast.JoinedStr) -> str:
    """An f-string's text with each replacement field as one opaque character, so that
    ``f"seeds {a}..{b}"`` reads as one string, not as a lone ``".."`` part."""
    return "".join(v.value if isinstance(v, ast.Constant) else "\x00" for v in node.values)


def offences(source: str, rel: str) -> list[str]:
    """Offences of one Python source whose repo-relative path is ``rel``, as ``"rel:line: what"``.

    Raises ``SyntaxError`` if ``source`` does not parse."""
    tree = ast.parse(source, rel)
    depth = len(Path(rel).parts)
    found, used, lines = [], set(), set()
    for node in ast.walk(tree):  # breadth first: the outermost expression of a line is met first
        got = _anchored(node, depth, used) if isinstance(node, (ast.Attribute, ast.Subscript, ast.BinOp,
                                                                  ast.Call)) else None
        if got is not None and got[1] < 0 and node.lineno not in lines:
            lines.add(node.lineno)
            found.append(f"{rel}:{node.lineno}: path climbs {-got[1]} level(s) above the repo: "
                         f"{ast.unparse(node)}")
    for const, parent in _string_constants(tree):
        for tok in _path_tokens(const.value):
            if not _allowed(rel, tok):
                found.append(f"{rel}:{const.lineno}: absolute path outside the repo: {tok!r}")
        if isinstance(parent, ast.JoinedStr) or id(const) in used or isinstance(parent, ast.Compare):
            continue  # f-strings are judged whole (below); __file__ paths above; comparisons are checks
        if _dotdot(const.value) and not _allowed(rel, const.value):
            found.append(f"{rel}:{const.lineno}: '..' path component: {const.value!r}")
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and _dotdot(_fstring_text(node)):
            found.append(f"{rel}:{node.lineno}: '..' path component: {ast.unparse(node)}")
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and not (tok.start[0] == 1 and tok.string.startswith("#!")):
            found += [f"{rel}:{tok.start[0]}: absolute path in a comment: {p!r}"
                      for p in _path_tokens(tok.string) if not _allowed(rel, p)]
    return sorted(set(found))


def outside_links(root: Path, repo: Path) -> list[str]:
    """Symlinks under ``root`` whose target resolves outside ``repo`` (dangling ones included)."""
    bad = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder) / name
            if p.is_symlink() and not p.resolve().is_relative_to(repo.resolve()):
                bad.append(f"{p.relative_to(repo)} -> {os.readlink(p)}")
    return sorted(bad)


def scanned_files() -> list[Path]:
    """Every ``.py`` under :data:`SCANNED`, skipping caches."""
    out = []
    for top in SCANNED:
        out += [p for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(out)


# ---- the checker catches what it should (crafted sources) ----
# '@' stands for a slash, so that this file does not itself name the paths it must catch

@pytest.mark.parametrize("src, rel, expected", [
    ('DATA = "@work/shared/data/real/x.json"\n', "tests/test_a.py",
     "tests/test_a.py:1: absolute path outside the repo: '@work/shared/data/real/x.json'"),
    ('open(f"@home/{user}/notes.txt")\n', "pipeline/a.py",
     "pipeline/a.py:1: absolute path outside the repo: '@home/'"),
    ('CACHE = "~@.config/other"\n', "sft/a.py", "sft/a.py:1: absolute path outside the repo: '~@.config/other'"),
    ('x = 1  # see @work/shared/tools/gen.py\n', "pipeline/a.py",
     "pipeline/a.py:1: absolute path in a comment: '@work/shared/tools/gen.py'"),
    ('import os\np = os.path.join(d, "..", "shared")\n', "tests/test_a.py",
     "tests/test_a.py:2: '..' path component: '..'"),
    ('from pathlib import Path\nROOT = Path(__file__).resolve().parents[2]\n', "tests/test_a.py",
     "tests/test_a.py:2: path climbs 1 level(s) above the repo: Path(__file__).resolve().parents[2]"),
    ('from pathlib import Path\nR = Path(__file__).parent.parent.parent / "x"\n', "tests/test_a.py",
     "tests/test_a.py:2: path climbs 1 level(s) above the repo: Path(__file__).parent.parent.parent / 'x'"),
    ('import os\nR = os.path.join(os.path.dirname(__file__), "..", "..", "shared")\n', "tests/test_a.py",
     "tests/test_a.py:2: path climbs 1 level(s) above the repo: "
     "os.path.join(os.path.dirname(__file__), '..', '..', 'shared')"),
    ('p = f"{root}@..@shared@x.json"\n', "sft/a.py", "sft/a.py:1: '..' path component: f'{root}@..@shared@x.json'"),
    ('"""Module docstring naming @srv/data/file.json."""\n', "dags/a.py",
     "dags/a.py:1: absolute path outside the repo: '@srv/data/file.json'"),
])
def test_checker_catches_crafted_offences(src, rel, expected):
    assert offences(src.replace("@", "/"), rel) == [expected.replace("@", "/")]


def test_checker_lets_legitimate_code_pass():
    src = ('import os\nfrom pathlib import Path\n'
           'ROOT = Path(__file__).resolve().parents[1]\n'                          # tests/x.py -> repo root
           'DOCS = os.path.join(os.path.dirname(__file__), "..", "docs")\n'         # back into the repo
           'URL = "http://127.0.0.1:8080/v1/chat/completions"\n'                  # an HTTP route
           'ok = ".." not in name.split("/") and "a/b" != name\n'                 # a check, not a path
           'print(f"seeds {a}..{b}", "/".join(parts))\n')                          # a range, not a path
    assert offences(src, "tests/x.py") == []
    assert offences("from pathlib import Path\nP = Path(__file__).parents[1]\n", "pipeline/a.py") == []
    assert offences("from pathlib import Path\nP = Path(__file__).parents[1]\n", "a.py") != []  # at the root


def test_outside_links_found(tmp_path):
    repo, outside = tmp_path / "repo", tmp_path / "elsewhere"
    (repo / "tests" / "fixtures").mkdir(parents=True)
    outside.mkdir()
    (repo / "tests" / "fixtures" / "in.txt").write_text("x")
    (repo / "tests" / "fixtures" / "ok").symlink_to(repo / "tests" / "fixtures" / "in.txt")
    (repo / "tests" / "fixtures" / "bad").symlink_to(outside)
    assert outside_links(repo / "tests" / "fixtures", repo) == [f"tests/fixtures/bad -> {outside}"]


# ---- the repository itself ----

def test_no_module_or_test_reaches_outside_the_repo():
    files = scanned_files()
    assert len(files) > 50 and REPO / "tests" / "test_self_contained.py" in files
    found = []
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        found += offences(path.read_text(encoding="utf-8"), rel)
    # fix the path (a fixture under tests/fixtures, tmp_path, a path relative to __file__); only a
    # path that is never opened on this machine may go into ALLOWED, with its reason
    assert found == []


def test_no_fixture_symlink_leaves_the_repo():
    found = []
    for top in LINK_ROOTS:
        found += outside_links(REPO / top, REPO)
    assert found == []


def test_allow_list_entries_are_all_used():
    """A stale allow-list entry could hide a future offence in that file: every entry must match."""
    unused = []
    for where, what, _reason in ALLOWED:
        names = (where,) if isinstance(where, str) else where
        files = [p for p in scanned_files() if p != REPO / SELF] if names == ("*",) else [REPO / n for n in names]
        if not all(what in p.read_text(encoding="utf-8") for p in files if "*" not in names) or \
                not any(what in p.read_text(encoding="utf-8") for p in files):
            unused.append((where, what))
    assert unused == []

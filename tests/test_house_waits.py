"""House rule: no blocking wait without a deadline, checked on the source with ``ast``.

In ``pipeline``, ``dags`` and ``bench``:

- no process or thread pool is built directly (``Pool(``, ``ProcessPoolExecutor(``,
  ``ThreadPool(``, ``ThreadPoolExecutor(``): parallel work goes through
  :class:`pipeline.formats.workerpool.WorkerPool` (via ``ordered_map``), whose every wait has a
  deadline and names the pid;
- no ``.wait()``, ``.join()``, ``.communicate()``, ``.get()``, ``.result()`` or ``.acquire()``
  without a timeout, no ``subprocess.run``/``call``/``check_call``/``check_output`` without
  ``timeout=``, and no ``flock`` without ``LOCK_NB`` (a wait that can last forever: use
  :mod:`pipeline.core.waits`).

:data:`ALLOWED` lists the few places where the wait is bounded some other way, each with the
reason. The rule has a self-test on a snippet so that it cannot pass vacuously.
"""
from __future__ import annotations

import ast
import os

from tests.helpers.paths import REPO
from tests.test_house import python_files

CHECKED_DIRS = ("pipeline", "dags", "bench")
POOLS = {"Pool", "ProcessPoolExecutor", "ThreadPool", "ThreadPoolExecutor"}
WAIT_METHODS = {"wait", "join", "communicate", "get", "result", "acquire"}
SUBPROCESS_WAITS = {"run", "call", "check_call", "check_output"}
#: (file, enclosing function) -> why its wait has no deadline argument
ALLOWED = {
    ("pipeline/llm/server.py", "serve_foreground"):
        "`skillpipe serve-llm` in the foreground runs until the server exits or is stopped (Ctrl-C, "
        "SIGTERM); the server dies with this process (PR_SET_PDEATHSIG)",
    ("pipeline/llm/client.py", "complete_json_many"):
        "one thread running an event loop whose every request has the client's timeout and retry cap",
    ("pipeline/llm/client.py", "_watched"):
        "`work.result()` of an asyncio task that is done (after asyncio.wait), not a wait",
    ("pipeline/llm/ratelimit.py", "admit"):
        "waits for the limiter's condition, which release() and the hold-back timer notify; each call "
        "it admits has the client's request timeout",
    ("pipeline/engine/remote.py", "before"):
        "Lease.acquire() never waits: it takes the lease or raises LeaseHeld at once",
    ("pipeline/bank/files.py", "writing"):
        "Lease.acquire() never waits; the loop that retries it raises WaitTimeout past its deadline",
}


class _Finder(ast.NodeVisitor):
    """Collects :func:`_unbounded` calls with the name of the innermost enclosing function."""

    def __init__(self) -> None:
        self.where, self.found = ["<module>"], []

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self.where.append(node.name)
        self.generic_visit(node)
        self.where.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        what = _unbounded(node)
        if what:
            self.found.append((node.lineno, self.where[-1], what))
        self.generic_visit(node)


def unbounded_waits(source: str) -> list[tuple[int, str, str]]:
    """``(line, enclosing function, what)`` for every pool built directly and every wait
    without a deadline in ``source`` (module docstring)."""
    finder = _Finder()
    finder.visit(ast.parse(source))
    return finder.found


def _unbounded(call: ast.Call) -> str:
    """What makes ``call`` a wait without a deadline, or ``""``."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    keywords = {k.arg for k in call.keywords}
    if name in POOLS:
        return f"{name}() built directly"
    if isinstance(f, ast.Attribute) and name in WAIT_METHODS and not call.args and not keywords & {"timeout", "blocking"}:
        return f".{name}() without a timeout"
    if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "subprocess"
            and name in SUBPROCESS_WAITS and "timeout" not in keywords):
        return f"subprocess.{name}() without timeout="
    if name == "flock" and len(call.args) == 2 and not {"LOCK_NB", "LOCK_UN"} & set(ast.unparse(call.args[1]).replace(".", " ").replace("|", " ").split()):
        return "flock() without LOCK_NB"
    return ""


def test_the_rule_sees_unbounded_waits_and_accepts_deadlines():
    code = ("import subprocess, fcntl\n"
            "def f(p, q, lock, fd):\n"
            "    p.wait()\n    q.get()\n    lock.acquire()\n    subprocess.run(['x'])\n"
            "    fcntl.flock(fd, fcntl.LOCK_EX)\n    with mp.Pool(2) as pool:\n        pass\n"
            "def g(p, q, lock, fd, d):\n"
            "    p.wait(timeout=5)\n    q.get(timeout=1)\n    lock.acquire(blocking=False)\n"
            "    subprocess.run(['x'], timeout=9)\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "    d.get('key')\n    ', '.join(['a'])\n    p.join(2.0)\n")
    assert unbounded_waits(code) == [
        (3, "f", ".wait() without a timeout"), (4, "f", ".get() without a timeout"),
        (5, "f", ".acquire() without a timeout"), (6, "f", "subprocess.run() without timeout="),
        (7, "f", "flock() without LOCK_NB"), (8, "f", "Pool() built directly")]


def test_no_wait_without_a_deadline():
    found, used = [], set()
    for path in python_files(*CHECKED_DIRS):
        rel = os.path.relpath(path, REPO).replace(os.sep, "/")
        with open(path, encoding="utf-8") as f:
            for line, fn, what in unbounded_waits(f.read()):
                if (rel, fn) in ALLOWED:
                    used.add((rel, fn))
                else:
                    found.append(f"{rel}:{line} in {fn}: {what}")
    assert not found, "give these waits a deadline (pipeline.core.waits) or a reason in ALLOWED:\n" + "\n".join(found)
    assert used == set(ALLOWED), f"ALLOWED entries that match nothing any more: {set(ALLOWED) - used}"

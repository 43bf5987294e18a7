"""Deadlines for blocking waits: the one error type and the one way to read a deadline.

Every wait in skillpipe that blocks on another process, thread, lock or server has a deadline
(a pool worker's task, its exit, a subprocess's exit after SIGKILL, the mirror lock). When it
passes, the waiter raises :class:`WaitTimeout`, whose message names what it waited for and the
process id that holds it up, so a stuck run fails with a cause instead of sleeping at 0 % CPU
until someone notices.
"""
from __future__ import annotations

import math
import os
import subprocess


class WaitTimeout(TimeoutError):
    """A deadline passed. ``what``: the piece that did not answer (e.g. ``"parse worker"``),
    ``pid``: its process id (``None`` when there is no process), ``waited_s``: the deadline in
    seconds. The message starts with ``what`` and the pid."""

    def __init__(self, what: str, pid: int | None, waited_s: float, detail: str = ""):
        self.what, self.pid, self.waited_s = what, pid, waited_s
        who = f"{what} (pid {pid})" if pid is not None else what
        super().__init__(f"{who} did not finish within {waited_s:g} s{': ' + detail if detail else ''}")


def seconds_from_env(name: str, default: float) -> float:
    """``$name`` as a number of seconds > 0, else ``default``. Raises ``ValueError`` naming the
    variable when it is set to anything else (0, a negative number, ``inf``: a wait without a
    deadline is exactly what this module rules out)."""
    raw = (os.environ.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"${name} must be a number of seconds > 0 (default {default:g}), got {raw!r}")
    return value


def reap(proc: subprocess.Popen, what: str, timeout_s: float = 10.0) -> int:
    """Wait at most ``timeout_s`` for ``proc`` (already sent SIGKILL, or expected to exit) and
    return its exit status. Raises :class:`WaitTimeout` naming ``what`` and the pid when it is
    still there: a process that survives SIGKILL that long is stuck in the kernel (state D,
    e.g. on a dead network mount), and waiting longer would hang the caller with it."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise WaitTimeout(what, proc.pid, timeout_s, "still running after SIGKILL (uninterruptible "
                          "sleep in the kernel?)") from None

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
import signal
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


def wait_exit(proc: subprocess.Popen, what: str, timeout_s: float, killed: bool = False) -> int:
    """Wait at most ``timeout_s`` for ``proc`` to exit and return its exit status.

    Past the deadline it raises :class:`WaitTimeout` naming ``what`` and the pid: ``killed``
    (the caller already sent SIGKILL) means the process is stuck in the kernel (state D, e.g. on
    a dead network mount) and waiting longer would hang the caller with it; otherwise ``proc``
    (its whole process group when it leads one) gets SIGKILL first, so nothing is left behind."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    if killed:
        raise WaitTimeout(what, proc.pid, timeout_s, "still running after SIGKILL (uninterruptible sleep in the kernel?)")
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except ProcessLookupError:  # it ended just now
        pass
    try:
        proc.wait(timeout=10.0)
    except subprocess.TimeoutExpired:
        pass
    raise WaitTimeout(what, proc.pid, timeout_s, "killed")


def run_bounded(cmd: list[str], timeout_s: float, what: str = "", **popen_kw) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, **popen_kw)`` with a deadline: past ``timeout_s`` the process (and
    its process group, which it gets of its own) is killed and :class:`WaitTimeout` names
    ``what`` (default: the program) and the pid. ``popen_kw``: ``subprocess.run``'s
    (``capture_output``, ``text``, ``env``, ``cwd``, ``check``...)."""
    check = popen_kw.pop("check", False)
    if popen_kw.pop("capture_output", False):
        popen_kw.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with subprocess.Popen(cmd, start_new_session=True, **popen_kw) as proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10.0)
            raise WaitTimeout(what or os.path.basename(str(cmd[0])), proc.pid, timeout_s,
                              f"killed with its process group ({' '.join(map(str, cmd))[:300]})") from None
    done = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done

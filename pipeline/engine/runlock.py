"""One process at a time per run: an advisory file lock under the run folder.

Two ``skillpipe run`` processes on the same run id would both pay every LLM answer, and with
different inputs the last writer would win silently while the other printed a false summary. So
:func:`pipeline.engine.runner.run_pipeline` (the entry point of the CLI and of each Airflow stage task)
holds :func:`run_lock` while it runs. The second process **fails fast** with
:class:`RunLocked`, naming the holder's pid, host, start time and command; it does not wait
(a queued duplicate run would redo nothing useful, and a stuck one would hang a scheduler slot).

The lock is ``flock(2)`` on ``<run_dir>/.skillpipe.lock`` (``fcntl``, standard library): the kernel
releases it when the holder exits or is killed (``kill -9`` included), so a crash never leaves a
stale lock to clean by hand. The file's JSON content (pid, host, start time, argv) only names the
current or last holder. It is taken per call: one Airflow task (one stage) holds it for its own
duration, so the tasks of one DAG run, which run one after another, each take it in turn.

The tasks of an orchestrator run are finer: the mapped shard tasks of one stage run in parallel
on one run id. Each holds :func:`task_lock` instead: the run lock **shared** (so a whole-run CLI
process, which needs it exclusively, is refused while tasks run, and vice versa) plus an
exclusive lock of its own unit of work, ``.skillpipe.<stage>[.<shard>].lock``: a second task on
the same shard fails fast the same way.
``flock`` is reliable on local filesystems; on NFS, Linux emulates it with ``fcntl`` byte-range
locks, which work across hosts when the server supports them (NFSv4).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from typing import Any, Iterator

LOCK_FILE = ".skillpipe.lock"


class RunLocked(RuntimeError):
    """Another live process holds the run's lock; ``holder`` is its recorded identity (may be
    ``{}`` when it has not written it yet)."""

    def __init__(self, message: str, holder: dict[str, Any]):
        super().__init__(message)
        self.holder = holder


def _holder(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 65536, 0)
        value = json.loads(data.decode("utf-8")) if data.strip() else {}
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def _alive(pid: Any) -> bool:
    """True when process ``pid`` (an int) exists on this host."""
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError) as e:
        return isinstance(e, PermissionError)
    return True


@contextlib.contextmanager
def run_lock(run_dir: str, run_id: str = "") -> Iterator[dict[str, Any]]:
    """Hold the exclusive lock of ``run_dir`` (created if needed) for the ``with`` block.

    Yields this process's holder record ``{pid, host, started_at (UTC ISO 8601), argv}``.
    Raises :class:`RunLocked` at once when another process holds it (exclusively, or tasks
    shared), with its pid/host/start time in the message; ``OSError`` when the folder cannot be
    created or the file opened.
    """
    with _flock(run_dir, LOCK_FILE, run_id, shared=False) as me:
        yield me


@contextlib.contextmanager
def task_lock(run_dir: str, unit: str, run_id: str = "") -> Iterator[dict[str, Any]]:
    """Hold ``run_dir``'s run lock shared and the exclusive lock of ``unit`` (``<stage>`` or
    ``<stage>.<shard>``, file ``.skillpipe.<unit>.lock``) for the ``with`` block: the lock of one
    orchestrator task. Yields the holder record; raises :class:`RunLocked` when a whole-run
    process holds the run or another task holds ``unit``."""
    with _flock(run_dir, LOCK_FILE, run_id, shared=True), _flock(run_dir, f".skillpipe.{unit}.lock", run_id,
                                                                  shared=False, unit=unit) as me:
        yield me


@contextlib.contextmanager
def _flock(run_dir: str, name: str, run_id: str, shared: bool, unit: str = "") -> Iterator[dict[str, Any]]:
    """``flock`` ``run_dir/name`` without waiting; an exclusive holder writes its record into the file."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            h = _holder(fd)
            if h.get("host") == socket.gethostname() and not _alive(h.get("pid")):
                h = {}  # the record of a finished holder: the lock is held shared by tasks
            who = (f"pid {h.get('pid', '?')} on host {h.get('host', '?')} since {h.get('started_at', '?')} "
                   f"({' '.join(map(str, h.get('argv') or [])) or 'command unknown'})") if h else \
                "another process (or the tasks of an orchestrator run)"
            what = f"{unit} of run" if unit else "run"
            raise RunLocked(f"{what} {run_id or os.path.basename(run_dir)} is in use by {who}; wait for it to finish, "
                            f"or use another --run-id (lock: {path})", h) from None
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "argv": sys.argv[:8]}
        if not shared:  # shared holders are many: none of them owns the record
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode("utf-8"), 0)
        yield me
    finally:
        os.close(fd)  # releases the lock

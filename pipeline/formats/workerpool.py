"""Worker processes that share no lock, start with default signal handlers, and are never
waited for without a deadline (the engine of :func:`pipeline.formats.parallel.ordered_map`).

Why not ``multiprocessing.Pool``: its workers share one lock on the task queue, and
``Pool.terminate`` takes that lock and never gives it back (``_help_stuff_finish``), so a worker
left alive sleeps on it forever while the parent joins it without a deadline. A forked worker
also inherited the CLI's Python SIGTERM handler; such a handler only sets a flag that the main
thread acts on between bytecodes, so the SIGTERM that ``terminate`` sends was lost whenever it
came in while the worker was not in an interruptible system call, and the worker went back to
sleep in the lock's ``sem_wait`` (gdb on a stuck one-thread worker: ``Handlers[SIGTERM].tripped``
= 1, ``is_tripped`` = 1, main thread in ``sem_wait``). Measured with that handler: a hang within
2, 40 and 70 start/stop cycles in three trials; without it none in 600. ``Pool`` also waits forever for the result of a worker that the OOM
killer ended mid-task. ``concurrent.futures.ProcessPoolExecutor`` notices a dead worker
(``BrokenProcessPool``), but its shutdown joins the workers without a deadline and no error
names a pid. On the 3,000-env tree (parse + remove_loops, 8 alternating runs each, load average
3.6) the three took the same time: this pool 5.33 s, ``Pool`` 5.35 s, ``ProcessPoolExecutor``
5.19 s.

Here each worker has its own duplex pipe (nothing shared between workers, so no lock to be
left held), runs one chunk at a time and holds the next, and starts with SIGTERM at its default action (it dies at
once, whatever it is doing), SIGINT ignored (Ctrl-C reaches the whole process group; the parent
decides) and SIGUSR1 dumping its Python stack to stderr (``faulthandler``, which works even
while the main thread is blocked in C). Linux also SIGKILLs the workers when the parent dies
(``PR_SET_PDEATHSIG``). The parent waits with :func:`multiprocessing.connection.wait` on the
pipes and the process sentinels together, so a worker's death is seen at once and named.

Deadlines (seconds): a chunk gets :data:`CHUNK_TIMEOUT_S` (``$SKILLPIPE_CHUNK_TIMEOUT_S``) from
the moment its worker starts it; at teardown a worker gets :data:`EXIT_TIMEOUT_S` to exit, then
SIGKILL and :data:`KILL_TIMEOUT_S` more. A passed deadline raises
:class:`~pipeline.core.waits.WaitTimeout` naming the stage piece and the pid.
"""
from __future__ import annotations

import faulthandler
import gc
import multiprocessing as mp
import os
import pickle
import signal
import time
import traceback
from collections import deque
from multiprocessing.connection import wait
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable

from pipeline.core.waits import WaitTimeout, seconds_from_env

#: Seconds one chunk may run (parse: one task of <= 1,000 files; remove_loops: one row group;
#: each takes seconds on one core); the default leaves a wide margin for a slow disk.
CHUNK_TIMEOUT_S = 1800.0
#: Chunks a worker holds at once: the one it runs and the next, so it never waits for the
#: parent between chunks (neither did ``Pool`` workers: they took the next one from the shared queue).
QUEUED_PER_WORKER = 2
#: A chunk queued behind a running one must fit the pipe's buffer (Linux: >= 64 KiB), else
#: sending it would block the parent until that worker is done.
QUEUE_BYTES = 48 * 1024
EXIT_TIMEOUT_S = 30.0   # a worker told to stop exits in milliseconds; 30 s leaves room for a loaded machine
KILL_TIMEOUT_S = 5.0    # after SIGKILL: longer means the process is stuck in the kernel
START_METHOD_ENV = "SKILLPIPE_START_METHOD"


class WorkerDied(RuntimeError):
    """A worker process ended without being told to (killed by a signal, e.g. the OOM killer's
    SIGKILL, or exited); the message names the pid, how it ended and its task."""


class RemoteTraceback(Exception):
    """The formatted traceback of an exception raised in a worker (set as ``__cause__``)."""


def start_context():
    """The ``multiprocessing`` context: ``$SKILLPIPE_START_METHOD`` (``fork``, ``forkserver``,
    ``spawn``) when set, else ``fork`` where available (no re-import per worker; the parent's
    pages are shared copy-on-write), else the platform default. Raises ``ValueError`` for a
    method this platform lacks.

    ``forkserver`` and ``spawn`` start workers that inherit no lock held by another thread of
    this process, at a cost: on the 3,000-env tree, parse + remove_loops took 9.42 s and 10.53 s
    against 8.58 s with ``fork`` (medians of 6 alternating runs, load average 5.2; the workers
    import pyarrow and the stage modules again). ``fork`` stays the default: the hang this pool
    replaced was not an inherited lock (it came back with one-thread workers), and at fork time
    the CLI holds only its main thread and jemalloc's background thread (which blocks every
    signal and whose locks jemalloc resets around fork)."""
    method = (os.environ.get(START_METHOD_ENV) or "").strip()
    if method:
        if method not in mp.get_all_start_methods():
            raise ValueError(f"${START_METHOD_ENV} must be one of {', '.join(mp.get_all_start_methods())}, got {method!r}")
        return mp.get_context(method)
    return mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()


def _die_with_parent(parent: int | None) -> None:
    """Ask Linux to SIGKILL this worker when its parent dies; exit now if ``parent`` (the pid
    that started it; ``None`` under ``forkserver``, whose server is the parent) is already gone."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: the parent's teardown still stops the worker
        return
    if parent is not None and os.getppid() != parent:  # it died before prctl took effect
        os._exit(1)


def _worker_signals() -> None:
    """Default signal handlers in a worker, whatever the parent had installed."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})  # blocked by the parent around fork


def _worker_gc() -> None:
    """Garbage collection in a worker: everything it started with (the parent's heap under
    ``fork``, the imported modules otherwise) is frozen out of collection (``gc.freeze``), and
    automatic collection is off; :func:`_serve` collects once after each chunk instead.

    A chunk allocates about a million small objects (steps, lists, strings), nearly none in
    reference cycles; with the default thresholds the collector ran hundreds of times per chunk
    and every full pass walked the inherited heap too (pyarrow, pandas), which also un-shares
    its copy-on-write pages (the pattern the ``gc.freeze`` documentation describes for forked
    workers). Measured on the 12,000 files of the 3,000-env tree, the txt reader alone on one
    core: 2.0-2.1 s CPU with the default thresholds, 1.7 s without automatic collection."""
    gc.freeze()
    gc.disable()


def _failure(index: int, e: BaseException) -> tuple:
    """A task's exception as a picklable reply: the exception pickled when it can be, its type
    name, its text and the formatted traceback."""
    try:
        blob = pickle.dumps(e)
    except Exception:  # an exception with unpicklable attributes: the text still travels
        blob = None
    return index, False, (blob, type(e).__name__, str(e), "".join(traceback.format_exception(e)))


def _serve(conn, fn: Callable[[Any], Any], inherited: list[int], parent: int | None) -> None:
    """A worker's loop: receive ``(index, chunk)``, send back ``(index, True, [fn(x) ...])`` or
    :func:`_failure`; stop on ``None`` or when the parent's end closes."""
    _worker_signals()
    _die_with_parent(parent)
    _worker_gc()
    for fd in inherited:  # the other workers' pipes (fork copies them): keep their EOF exact
        try:
            os.close(fd)
        except OSError:
            pass
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        index, chunk = msg
        try:
            reply = (index, True, [fn(x) for x in chunk])
        except Exception as e:
            reply = _failure(index, e)
        try:
            conn.send(reply)
        except (BrokenPipeError, ConnectionResetError):  # the parent is gone
            return
        except Exception as e:  # a result that cannot be pickled (nothing was sent)
            conn.send(_failure(index, e))
        del reply
        gc.collect()  # the cycles of this chunk, if any (automatic collection is off: _worker_gc)


def _raise_remote(what: str, pid: int, info: tuple) -> None:
    blob, type_name, text, tb = info
    try:
        exc = pickle.loads(blob) if blob is not None else None
    except Exception:
        exc = None
    if not isinstance(exc, BaseException):
        exc = RuntimeError(f"{type_name}: {text} (in {what} pid {pid})")
    raise exc from RemoteTraceback(tb)


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"was killed by {signal.Signals(-exitcode).name}"
    return f"exited with code {exitcode}"


class WorkerPool:
    """``workers`` processes running ``fn`` on chunks, each holding at most
    :data:`QUEUED_PER_WORKER` chunks (one running).

    Use as a context manager; :meth:`submit` a chunk while :attr:`idle`, then
    :meth:`collect` the next finished chunk as ``(index, results)``. ``what`` names the workers
    in errors (``"parse worker"``). ``fn`` must be a module-level function (pickled by name
    under ``spawn``/``forkserver``). Leaving the block normally stops the workers and waits for
    them (deadlines above); leaving it by an exception kills them first.

    Raises (from :meth:`collect`): the exception of the task that failed (its worker traceback
    as ``__cause__``), :class:`WorkerDied`, :class:`~pipeline.core.waits.WaitTimeout`.
    """

    def __init__(self, fn: Callable[[Any], Any], workers: int, what: str, ctx=None,
                 chunk_timeout_s: float | None = None):
        self.what = what
        self.chunk_timeout_s = chunk_timeout_s or seconds_from_env("SKILLPIPE_CHUNK_TIMEOUT_S", CHUNK_TIMEOUT_S)
        self._procs: list = []
        self._pids: list[int] = []
        self._conns: list = []
        self._queues: list[deque] = []
        ctx = ctx or start_context()
        try:
            self._start(ctx, fn, workers)
        except BaseException:
            self.close(graceful=False)
            raise

    def _start(self, ctx, fn: Callable[[Any], Any], workers: int) -> None:
        method = ctx.get_start_method()
        fork = method == "fork"
        me = os.getpid() if method in ("fork", "spawn") else None  # the workers' parent (forkserver: its server)
        # a SIGTERM during fork would reach the child before it resets the handler: hold it until
        # the children are started (a forked child unblocks it in _worker_signals)
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT}) if fork else None
        try:
            for slot in range(workers):
                parent, child = ctx.Pipe(duplex=True)
                inherited = [c.fileno() for c in self._conns] + [parent.fileno()] if fork else []
                proc = ctx.Process(target=_serve, args=(child, fn, inherited, me), daemon=True,
                                   name=f"{self.what} {slot}")
                self._conns.append(parent)
                proc.start()
                self._procs.append(proc)
                self._pids.append(proc.pid)
                self._queues.append(deque())  # [chunk index, monotonic start once it runs]
                child.close()
        finally:
            if held is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers, in slot order (kept after :meth:`close`)."""
        return list(self._pids)

    @property
    def idle(self) -> bool:
        """Whether a worker can take a chunk now (:meth:`submit`)."""
        return any(len(q) < QUEUED_PER_WORKER for q in self._queues)

    @property
    def busy(self) -> int:
        """Chunks handed out and not yet collected."""
        return sum(len(q) for q in self._queues)

    def submit(self, index: int, chunk: list) -> bool:
        """Hand ``chunk`` (its position ``index``) to the least loaded worker; ``False`` (nothing
        sent) when every worker is full, or when only a worker that is still running a chunk has
        room and the pickled chunk is over :data:`QUEUE_BYTES` (sending it could block until that
        worker is done). Raises :class:`WorkerDied` when the chosen worker is gone."""
        slot = min(range(len(self._queues)), key=lambda s: len(self._queues[s]))
        queue = self._queues[slot]
        if len(queue) >= QUEUED_PER_WORKER:
            return False
        message = ForkingPickler.dumps((index, chunk))
        if queue and len(message) > QUEUE_BYTES:
            return False
        try:
            self._conns[slot].send_bytes(message)
        except (BrokenPipeError, ConnectionResetError):
            raise self._died(slot, index) from None
        queue.append([index, time.monotonic() if not queue else None])  # its clock starts when it runs
        return True

    def collect(self) -> tuple[int, list]:
        """The next finished chunk, ``(index, [fn(x) for x in chunk])``, whichever worker
        finishes first; at least one chunk must be handed out."""
        if not self.busy:
            raise RuntimeError(f"{self.what}: collect() with no chunk handed out")
        while True:
            running = [(q[0][1], s) for s, q in enumerate(self._queues) if q]
            started, slot = min(running)
            left = started + self.chunk_timeout_s - time.monotonic()
            ready = wait([self._conns[s] for _, s in running] + [p.sentinel for p in self._procs], timeout=max(left, 0))
            for _, s in running:
                if self._conns[s] in ready:
                    return self._reply(s)
            for s, proc in enumerate(self._procs):
                if proc.sentinel in ready:
                    raise self._died(s, self._queues[s][0][0] if self._queues[s] else None)
            if not ready and left <= 0:
                raise self._stuck(slot, self._queues[slot][0][0])

    def _reply(self, slot: int) -> tuple[int, list]:
        queue = self._queues[slot]
        chunk_index = queue.popleft()[0]
        if queue:
            queue[0][1] = time.monotonic()  # the worker went on to its next chunk
        try:
            index, ok, value = self._conns[slot].recv()
        except (EOFError, ConnectionResetError):
            raise self._died(slot, chunk_index) from None
        if not ok:
            _raise_remote(self.what, self._procs[slot].pid, value)
        return index, value

    def _died(self, slot: int, index: int | None) -> WorkerDied:
        proc = self._procs[slot]
        proc.join(KILL_TIMEOUT_S)  # its sentinel is ready or its pipe broke: it is exiting
        task = f" while running chunk {index}" if index is not None else " while idle"
        hint = " (a SIGKILL nobody sent is often the kernel's OOM killer: see dmesg)" \
            if proc.exitcode == -signal.SIGKILL else " (its traceback, if any, is on stderr above)"
        return WorkerDied(f"{self.what} (pid {proc.pid}) {_how_it_ended(proc.exitcode)}{task}; the stage fails{hint}")

    def _stuck(self, slot: int, index: int) -> WaitTimeout:
        pid = self._procs[slot].pid
        try:
            os.kill(pid, signal.SIGUSR1)  # faulthandler in the worker writes its stack to stderr
            time.sleep(0.5)
        except OSError:
            pass
        return WaitTimeout(self.what, pid, self.chunk_timeout_s,
                           f"no result for chunk {index} (its Python stack is on stderr above; "
                           "raise $SKILLPIPE_CHUNK_TIMEOUT_S if the chunk is just slow)")

    def close(self, graceful: bool = True) -> None:
        """Stop the workers: ``graceful`` tells idle workers to exit, else (or for a worker
        that does not exit within :data:`EXIT_TIMEOUT_S`) SIGTERM, then SIGKILL. Raises
        :class:`~pipeline.core.waits.WaitTimeout` naming each pid that is still there after
        SIGKILL and :data:`KILL_TIMEOUT_S`, or (graceful) that had to be killed."""
        if graceful:
            for conn in self._conns:
                try:
                    conn.send(None)
                except OSError:  # already gone: _wait_exit sees it
                    pass
        else:
            self._signal_all(signal.SIGTERM)
            self._signal_all(signal.SIGCONT)  # a stopped worker (SIGSTOP, a debugger) acts on it now
        late = self._wait_exit(EXIT_TIMEOUT_S if graceful else KILL_TIMEOUT_S)
        if late:
            self._signal_all(signal.SIGKILL)
        stuck = self._wait_exit(KILL_TIMEOUT_S)
        for conn in self._conns:
            conn.close()
        for p in self._procs:
            if p not in stuck:
                p.close()  # its sentinel fd
        if stuck or (graceful and late):
            p = (stuck or late)[0]
            raise WaitTimeout(self.what, p.pid, EXIT_TIMEOUT_S, "still running after SIGKILL" if stuck else
                              "did not exit when told to stop; killed")

    def _signal_all(self, sig: int) -> None:
        for p in self._procs:
            if p.exitcode is None:
                try:
                    os.kill(p.pid, sig)
                except ProcessLookupError:
                    pass

    def _wait_exit(self, timeout_s: float) -> list:
        """Workers still alive after waiting at most ``timeout_s`` for all of them."""
        end = time.monotonic() + timeout_s
        alive = [p for p in self._procs if p.exitcode is None]
        while alive and (left := end - time.monotonic()) > 0:
            wait([p.sentinel for p in alive], timeout=left)
            alive = [p for p in alive if p.exitcode is None]
        return alive

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(graceful=exc_type is None)

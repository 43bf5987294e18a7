"""Ordered, bounded parallel map over worker processes (used by the parse and remove_loops stages).

:func:`ordered_map` hands chunks of the input to :class:`~pipeline.formats.workerpool.WorkerPool`
workers (each runs one and holds the next) and keeps at most ``workers * window`` chunks
outstanding (running or finished but not yet consumed), so memory is bounded by that many
chunks whatever the input size; results come back in input order (outputs are identical to
``map``). The pool never waits without a deadline and its workers start with default signal
handlers (see :mod:`pipeline.formats.workerpool` for the hang this replaced).
"""
from __future__ import annotations

import os
from itertools import islice
from typing import Any, Callable, Iterable, Iterator

from pipeline.formats.workerpool import WorkerPool

WORKERS_ENV = "SKILLPIPE_WORKERS"


def _warm_lazy_imports() -> None:
    """Trigger pyarrow's lazy ``import pandas`` (done by its first ``pa.array`` call, ~0.2 s CPU
    and ~50 MB) in the parent before forking, so the workers share it instead of each importing
    it again."""
    import pyarrow as pa
    pa.array([], pa.int32())


def shrink_before_fork() -> None:
    """Give memory freed so far back to the OS before forking workers.

    A forked worker's RSS starts at the parent's, so freed-but-kept Arrow (mimalloc/jemalloc)
    and malloc pages would count in every worker (measured on the 3,000-env benchmark tree:
    largest remove_loops worker 167 -> 151 MB). Best effort: ``malloc_trim`` exists on glibc only."""
    import ctypes
    import gc

    import pyarrow as pa
    gc.collect()
    pa.default_memory_pool().release_unused()
    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # the C library already loaded
    except OSError:  # no dlopen of the running program (not POSIX)
        trim = None
    if trim is not None:
        trim(0)


def worker_count(requested: int = 0) -> int:
    """``requested`` if > 0, else ``$SKILLPIPE_WORKERS`` if set (an integer > 0; 1 = no pool,
    everything in this process), else one worker per CPU this process may use. Raises
    ``ValueError`` naming the variable for any other value."""
    if requested > 0:
        return requested
    raw = (os.environ.get(WORKERS_ENV) or "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"${WORKERS_ENV} must be a whole number of worker processes >= 1, got {raw!r}")
        return int(raw)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def ordered_map(fn: Callable[[Any], Any], items: Iterable[Any], workers: int, chunk: int = 8,
                window: int = 3, shrink: bool = False, what: str = "worker") -> Iterator[Any]:
    """``map(fn, items)`` on ``workers`` processes, in order, with bounded memory.

    ``fn`` must be a module-level function (it is pickled by name under ``spawn``). ``workers <= 1``
    runs in this process. The start method is ``fork`` where available
    (:func:`~pipeline.formats.workerpool.start_context`; ``$SKILLPIPE_START_METHOD`` overrides).
    ``what`` names the workers in errors (``"parse worker"``). An exception in ``fn`` is
    re-raised here, at the position of the failing item; a worker that dies or misses its
    deadline raises :class:`~pipeline.formats.workerpool.WorkerDied` or
    :class:`~pipeline.core.waits.WaitTimeout` naming its pid. ``shrink``: call
    :func:`shrink_before_fork` first (worth it after a stage that freed a lot; it costs a full
    ``gc.collect``).
    """
    if workers <= 1:
        yield from map(fn, items)
        return
    _warm_lazy_imports()
    if shrink:
        shrink_before_fork()
    it = iter(items)
    chunks = iter(lambda: list(islice(it, chunk)), [])
    with WorkerPool(fn, workers, what) as pool:
        yield from _in_order(pool, chunks, workers * window)


def _in_order(pool: WorkerPool, chunks: Iterator[list], limit: int) -> Iterator[Any]:
    """Items of ``chunks`` mapped by ``pool``, in order; at most ``limit`` chunks handed out or
    finished and not yet yielded."""
    done: dict[int, list] = {}
    handed = yielded = 0
    part = next(chunks, None)
    while True:
        while part is not None and pool.idle and handed - yielded < limit and pool.submit(handed, part):
            handed += 1
            part = next(chunks, None)
        if yielded in done:
            yield from done.pop(yielded)
            yielded += 1
        elif yielded == handed:
            return
        else:
            index, out = pool.collect()
            done[index] = out

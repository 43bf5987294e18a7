"""Ordered, bounded parallel map over a process pool (used by the parse and remove_loops stages).

``multiprocessing.Pool.imap`` keeps order but has no back-pressure: when the consumer (the
Parquet writer in the main process) is slower than the workers, finished results pile up in
memory. :func:`ordered_map` submits chunks through ``apply_async`` and keeps at most
``workers * window`` chunks in flight, so memory is bounded by that many chunks whatever the
input size, and results come back in input order (outputs are identical to ``map``).
"""
from __future__ import annotations

import multiprocessing as mp
import os
from collections import deque
from itertools import islice
from typing import Any, Callable, Iterable, Iterator


def _run_chunk(fn: Callable[[Any], Any], chunk: list[Any]) -> list[Any]:
    return [fn(x) for x in chunk]


def _context(fn: Callable[[Any], Any]):
    """``fork`` where available (no re-import per worker; the parent's pages are shared
    copy-on-write, though RSS counts them in each worker); else the platform default.
    ``forkserver`` was measured too: no smaller in total (every worker still imports pyarrow via
    ``pipeline.core.records``) and its workers escape ``RUSAGE_CHILDREN`` accounting."""
    if "fork" in mp.get_all_start_methods():
        return mp.get_context("fork")
    return mp.get_context()


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
    """``requested`` if > 0, else one worker per CPU this process may use."""
    if requested > 0:
        return requested
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def ordered_map(fn: Callable[[Any], Any], items: Iterable[Any], workers: int, chunk: int = 8,
                window: int = 3, shrink: bool = False) -> Iterator[Any]:
    """``map(fn, items)`` on ``workers`` processes, in order, with bounded memory.

    ``fn`` must be a module-level function (it is pickled by name). ``workers <= 1`` runs in this
    process. The pool uses ``fork`` where available (see :func:`_context`).
    An exception in ``fn`` is re-raised here, at the position of the failing item.
    ``shrink``: call :func:`shrink_before_fork` first (worth it after a stage that freed a lot;
    it costs a full ``gc.collect``).
    """
    if workers <= 1:
        yield from map(fn, items)
        return
    ctx = _context(fn)
    _warm_lazy_imports()
    if shrink:
        shrink_before_fork()
    it = iter(items)
    with ctx.Pool(workers) as pool:
        pending: deque = deque()

        def submit() -> bool:
            part = list(islice(it, chunk))
            if part:
                pending.append(pool.apply_async(_run_chunk, (fn, part)))
            return bool(part)

        for _ in range(workers * window):
            if not submit():
                break
        while pending:
            done = pending.popleft().get()
            submit()
            yield from done

"""ordered_map and its worker pool: order, errors, dead and stuck workers, signals, teardown.

Every test checks that no worker outlives the pool (:func:`gone`)."""
from __future__ import annotations

import gc
import os
import signal
import sys
import time

import psutil
import pytest

from pipeline.core.waits import WaitTimeout
from pipeline.formats.parallel import ordered_map, worker_count
from pipeline.formats.workerpool import RemoteTraceback, WorkerDied, WorkerPool, start_context


def square_after(x: tuple[int, float]) -> int:
    n, delay = x
    time.sleep(delay)
    return n * n


def fail_on_three(n: int) -> int:
    if n == 3:
        raise KeyError(f"no key {n}")
    return n


def sigkill_self_on_two(n: int) -> int:
    if n == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return n


def sleep_forever(n: int) -> int:
    time.sleep(3600)
    return n


def dispositions(_n: int) -> tuple:
    return os.getpid(), signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)


def gone(pids: list[int], within_s: float = 5.0) -> bool:
    """Every pid has exited (or is a zombie waiting to be reaped) within ``within_s``."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.05)
    return False


def test_results_come_back_in_input_order_whatever_finishes_first():
    items = [(n, 0.05 if n % 3 == 0 else 0.0) for n in range(40)]  # every third item is slow
    assert list(ordered_map(square_after, items, workers=3, chunk=2)) == [n * n for n in range(40)]
    assert list(ordered_map(square_after, [], workers=2)) == []
    assert list(ordered_map(square_after, [(5, 0.0)], workers=1)) == [25]  # in this process


def test_a_failing_item_raises_its_exception_with_the_worker_traceback():
    with pytest.raises(KeyError, match="no key 3") as info:
        list(ordered_map(fail_on_three, range(10), workers=2, chunk=1))
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert "fail_on_three" in str(info.value.__cause__)


def test_a_worker_killed_mid_task_fails_the_map_naming_its_pid():
    pool = WorkerPool(sigkill_self_on_two, 2, "test worker")
    pids = pool.pids
    t0 = time.monotonic()
    with pytest.raises(WorkerDied, match=r"test worker \(pid \d+\) was killed by SIGKILL while running chunk 2"):
        with pool:
            for i in range(4):
                while not pool.submit(i, [i]):
                    pool.collect()
            while pool.busy:
                pool.collect()
    assert time.monotonic() - t0 < 10
    assert gone(pids)


def test_a_task_past_its_deadline_fails_naming_the_worker_and_is_killed(capfd):
    pool = WorkerPool(sleep_forever, 2, "test worker", chunk_timeout_s=1.0)
    pids = pool.pids
    t0 = time.monotonic()
    with pytest.raises(WaitTimeout) as info:
        with pool:
            pool.submit(0, [0])
            pool.collect()
    assert time.monotonic() - t0 < 8
    assert info.value.pid in pids and info.value.what == "test worker"
    assert f"test worker (pid {info.value.pid}) did not finish within 1 s: no result for chunk 0" in str(info.value)
    assert "sleep_forever" in capfd.readouterr().err  # faulthandler's stack of the stuck worker
    assert gone(pids)


def test_workers_start_with_default_sigterm_and_ignored_sigint_whatever_the_parent_has():
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        seen = list(ordered_map(dispositions, range(8), workers=2, chunk=1))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert {(term, intr) for _, term, intr in seen} == {(signal.SIG_DFL, signal.SIG_IGN)}
    assert os.getpid() not in {pid for pid, _, _ in seen}


def test_a_consumer_that_stops_early_leaves_no_worker():
    it = ordered_map(square_after, [(n, 0.01) for n in range(100)], workers=2, chunk=1)
    assert next(it) == 0
    pids = [c.pid for c in psutil.Process().children()]
    it.close()
    assert pids and gone(pids)


def _pure(n: int) -> int:
    return sum(range(2000)) + n


def test_many_pool_cycles_with_a_python_sigterm_handler_never_hang():
    """The hang this pool replaced: with the CLI's SIGTERM handler inherited, one start/stop in
    2-70 of multiprocessing.Pool left a worker asleep on the task-queue lock (measured; ~1 in
    40 on average, so 150 cycles catch it with ~97 % probability)."""
    from pipeline.cli import exit_on_sigterm
    previous = signal.getsignal(signal.SIGTERM)
    exit_on_sigterm()
    t0 = time.monotonic()
    try:
        for _ in range(150):
            assert list(ordered_map(_pure, range(12), workers=2, chunk=2)) == [_pure(n) for n in range(12)]
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert time.monotonic() - t0 < 300  # ~15 s idle, 90 s seen on a loaded machine; a hang never ends
    assert not psutil.Process().children()


def test_pool_size_and_start_method_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("SKILLPIPE_WORKERS", "3")
    assert (worker_count(), worker_count(5)) == (3, 5)
    for bad in ("0", "two"):
        monkeypatch.setenv("SKILLPIPE_WORKERS", bad)
        with pytest.raises(ValueError, match=rf"\$SKILLPIPE_WORKERS must be a whole number of worker processes >= 1, got '{bad}'"):
            worker_count()
    monkeypatch.delenv("SKILLPIPE_START_METHOD", raising=False)
    assert start_context().get_start_method() == "fork"
    monkeypatch.setenv("SKILLPIPE_START_METHOD", "spawn")
    assert start_context().get_start_method() == "spawn"
    monkeypatch.setenv("SKILLPIPE_START_METHOD", "thread")
    with pytest.raises(ValueError, match=r"\$SKILLPIPE_START_METHOD must be one of fork, spawn, forkserver, got 'thread'"):
        start_context()


class _Cycle:
    """An object that refers to itself: only the cyclic garbage collector frees it."""

    def __init__(self) -> None:
        self.me = self


def gc_state(_n: int) -> tuple[int, bool, int, int]:
    """In a worker: ``(pid, automatic collection on, objects frozen, objects tracked now)``, then
    5,000 unreachable reference cycles left behind for the collector."""
    state = (os.getpid(), gc.isenabled(), gc.get_freeze_count(), len(gc.get_objects()))
    garbage = [_Cycle() for _ in range(5000)]
    del garbage
    return state


def test_workers_collect_cycles_between_chunks_with_their_start_heap_frozen():
    seen = list(ordered_map(gc_state, range(12), workers=2, chunk=1))
    assert {on for _, on, _, _ in seen} == {False} and gc.isenabled()  # the parent's collector is untouched
    assert min(frozen for _, _, frozen, _ in seen) > 10_000  # the inherited heap is out of every collection
    by_worker: dict[int, list[int]] = {}
    for pid, _, _, tracked in seen:
        by_worker.setdefault(pid, []).append(tracked)
    assert len(by_worker) == 2 and all(len(v) >= 3 for v in by_worker.values())
    # each chunk's 5,000 cycles are gone before the next chunk starts (else +5,000 per chunk)
    assert all(max(v) - min(v) < 2000 for v in by_worker.values()), by_worker

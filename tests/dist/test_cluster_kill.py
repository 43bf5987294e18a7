"""The machine-loss helper of the distributed test (:meth:`bench.cluster.Cluster.kill_worker`),
on a stand-in worker: a shell in its own session with a child in the session and a grandchild
that left it (``setsid``), as a Celery worker's pool and task processes may. Nothing is started
but these processes (no PostgreSQL, no Airflow), so this runs in a second."""
from __future__ import annotations

import os
import time

from bench.cluster import Cluster, process_tree

# a child in the worker's session, a grandchild in a session of its own; each writes its pid
WORKER = "sleep 300 & echo $! > child.pid; setsid sh -c 'echo $$ > grandchild.pid; exec sleep 300' & wait"


def _pid(path) -> int:
    deadline = time.monotonic() + 10
    while not (os.path.exists(path) and open(path).read().strip()):
        assert time.monotonic() < deadline, f"{path} not written"
        time.sleep(0.05)
    return int(open(path).read())


def test_kill_worker_takes_its_whole_process_tree(tmp_path):
    cluster = Cluster(str(tmp_path))
    other = cluster._spawn("worker1", ["sleep", "300"], cwd=str(tmp_path))  # a second worker: must survive
    worker = cluster._spawn("worker0", ["sh", "-c", WORKER], cwd=str(tmp_path))
    try:
        child, grandchild = _pid(tmp_path / "child.pid"), _pid(tmp_path / "grandchild.pid")
        tree = process_tree(worker.popen.pid)
        assert {worker.popen.pid, child, grandchild} <= tree and other.popen.pid not in tree
        assert cluster.worker_of(grandchild) == 0 and cluster.worker_of(other.popen.pid) == 1
        killed = cluster.kill_worker(0)
        assert {worker.popen.pid, child, grandchild} <= killed
        assert worker.popen.returncode == -9 and worker not in cluster.procs
        assert process_tree(worker.popen.pid) == set()
        assert other.popen.poll() is None and cluster.worker_of(grandchild) is None
    finally:
        cluster.stop(grace_s=5)
    assert cluster.remaining() == []

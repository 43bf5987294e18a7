"""The skillpipe DAG on a real CeleryExecutor deployment on loopback (bench/cluster.py):
PostgreSQL, Redis, api-server, scheduler, dag-processor and 2 Celery workers. The export rows
must equal those of ``skillpipe run`` (the CLI, one process) on the same input and config, and
nothing the cluster started may outlive it. Artifacts go to a real S3-protocol server on loopback
(moto, bench/s3_server.py); each worker has its own local cache, as on its own machine.

In the same run, a machine is lost: once the mapped task ``memory[KILL_SHARD]`` is running and
its shard has checkpointed LLM answers to S3, the whole Celery worker running it (main, pool and
task processes) gets SIGKILL and a replacement worker with an empty cache starts. Airflow must
find the lost task by itself (no heartbeat within the timeout), put it up for retry and run it
again; the export must still equal the CLI's, and no answer committed before the kill may be
asked again (the requests after the kill are classified by
``bench.reliability_common.classify_calls``). The timings are test-sized by environment
(:data:`KILL_ENV`); the production defaults are untouched.

A second trace batch is then registered as an asset event (dags/skillpipe_assets.py), which
must start its own skillpipe run whose export equals the CLI's on that batch.

The LLM is the schema stub (bench/reliability_stub.py: valid structured answers, a deterministic
function of the request), shared by all runs, so equal rows mean equal pipelines. The run stops
after export (DAG param ``train`` False): SFT/GRPO are tested in tests/dags and tests/sft.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest
import yaml

from bench.reliability_common import cache_keys, classify_calls, request_key
from bench.reliability_stub import SchemaStub
from bench.reliability_taskkill import remote_cache_keys
from pipeline.quality import QUALITY_RULES
from pipeline.llm.cache import CACHE_FILE
from pipeline.stages import STAGES
from bench.cluster import Cluster, tail
from tests.helpers.paths import REPO
from bench.s3_server import S3Server

pytestmark = [pytest.mark.slow, pytest.mark.dist]

SAMPLES = os.path.join(REPO, "data", "samples")
SKILLPIPE = os.path.join(os.path.dirname(sys.executable), "skillpipe")
RUN_ID = "dist"       # the artifact run id (CLI and DAG)
DAG_RUN = "dist-test"  # the Airflow DAG run id
SHARDS = 4
KILL_SHARD = 0  # map index: shard-00000 holds 9 of the sample's 17 memory requests (5 waves of 2 at concurrency 2)
MEMORY_LATENCY_S = 3.0  # the stub's latency per answer from the trigger until the kill: the shard lasts ~15 s
#: Test-sized timings (production defaults in brackets): Airflow fails a running task instance
#: whose heartbeat is 30 s old [300 s], checked every 5 s [10 s]; a stage task's retry waits 5 s
#: [150 s]; a worker's object-storage lease lives 20 s [120 s], less than the heartbeat timeout,
#: so the retry finds it expired; LLM answers go to a remote cache part every 2 answers [20].
KILL_ENV = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
    "SKILLPIPE_RETRY_DELAY_S": "5",
    "SKILLPIPE_LEASE_S": "20",
    "SKILLPIPE_LLM_CHECKPOINT_ANSWERS": "2",
}


def write_config(path: str, base_url: str) -> str:
    """The run config: the stub as LLM (json_schema dialect); content rules only count, because
    the stub's answers are valid in form, not in content."""
    cfg = {"llm": {"base_url": base_url, "model": "stub-model", "structured_output": "json_schema"},
           "quality": {"off_topic_threshold": -1, "flag_rules": list(QUALITY_RULES)}}
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(cfg, f)
    return path


def export_rows(root: str, run_id: str) -> list[str]:
    """The run's export rows (local folder or object-storage root) as sorted canonical JSON."""
    from pipeline.engine.remote import read_table
    rows = read_table(f"{root.rstrip('/')}/runs/{run_id}/export").to_pylist()
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def cli_run(root: str, run_id: str, config: str, input_path: str, shards: int) -> None:
    """``skillpipe run`` (one process, the LocalExecutor-equivalent entry point) to ``root``."""
    os.makedirs(root, exist_ok=True)
    cmd = [SKILLPIPE, "run", "--root", root, "--run-id", run_id, "-c", config, "--input", input_path]
    res = subprocess.run(cmd + (["--shards", str(shards)] if shards else []), capture_output=True, text=True,
                         timeout=600, cwd=REPO)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]


@dataclass
class Kill:
    """What the test saw at the kill of the worker running ``memory[KILL_SHARD]``."""
    worker: int              # number of the killed Celery worker
    pids: int                # processes killed (worker, pool, task processes)
    at: float                # time.monotonic() of the kill
    sent: int                # LLM requests the stub had received before the kill (both workers)
    stored: set[str]         # keys in the killed worker's local LLM cache at the kill
    visible: set[str]        # keys in the committed remote cache parts of memory at the kill
    timeline: list = field(default_factory=list)  # (s after the kill, state, try) of the killed task


def kill_memory_worker(cluster: Cluster, stub: SchemaStub, s3: S3Server, cache_dir, timeout_s: float = 600) -> Kill:
    """Wait until ``memory[KILL_SHARD]`` is running and its shard has a committed LLM cache part
    on S3, then kill -9 the whole Celery worker running it (:meth:`Cluster.kill_worker`), drop the
    stub's latency and start worker 2 (its own empty cache folder) as the replacement machine."""
    memory = f"{s3.bucket}/celery/runs/{RUN_ID}/memory"
    deadline = time.monotonic() + timeout_s
    while True:
        rows = cluster.query("SELECT state, pid FROM task_instance WHERE dag_id = 'skillpipe' AND run_id = %s "
                             "AND task_id = 'memory' AND map_index = %s", (DAG_RUN, KILL_SHARD))
        state, pid = rows[0] if rows else (None, None)
        if state == "running" and pid and remote_cache_keys(s3.fs(), f"{memory}/shard-{KILL_SHARD:05d}"):
            worker = cluster.worker_of(pid)
            if worker is not None:
                break
        if state in ("success", "failed", "up_for_retry") or time.monotonic() > deadline:
            raise AssertionError(f"memory[{KILL_SHARD}] {state} before a checkpoint was seen: nothing to kill\n"
                                 + cluster.diagnose("skillpipe", DAG_RUN))
        time.sleep(0.5)
    pids = cluster.kill_worker(worker)
    at, sent = time.monotonic(), len(stub.requests)
    stub.latency_s = 0.0
    local = glob.glob(os.path.join(cache_dir(worker), "**", "runs", RUN_ID, CACHE_FILE), recursive=True)
    stored = cache_keys(local[0]) if local else set()
    visible = remote_cache_keys(s3.fs(), memory, "*/_llm_cache/*.parquet")
    cluster.start_worker(2)
    return Kill(worker, len(pids), at, sent, stored, visible)


def follow_retry(cluster: Cluster, kill: Kill, timeout_s: float = 600) -> None:
    """Poll ``memory[KILL_SHARD]`` every second until it succeeds or fails, appending each new
    ``(seconds after the kill, state, try_number)`` to ``kill.timeline``."""
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        rows = cluster.query("SELECT state, try_number FROM task_instance WHERE dag_id = 'skillpipe' AND run_id = %s"
                             " AND task_id = 'memory' AND map_index = %s", (DAG_RUN, KILL_SHARD))
        if rows and rows[0] != last:
            last = rows[0]
            kill.timeline.append((round(time.monotonic() - kill.at, 1), *last))
            if last[0] in ("success", "failed"):
                return
        time.sleep(1)


def test_celery_workers_on_s3_worker_killed_export_equals_cli_run(tmp_path, monkeypatch):
    """shards=4 on S3, 2 workers, one killed mid-``memory`` shard and replaced; then an asset-triggered
    batch run. Exports equal the CLI's; Airflow retried the lost task itself; no committed answer
    asked again; nothing left running."""
    batch = tmp_path / "drop" / "batch-0002"  # a later trace batch, registered as an asset event
    shutil.copytree(os.path.join(SAMPLES, "skillrl-rollouts"), batch)
    with SchemaStub() as stub, S3Server() as s3:
        config = write_config(str(tmp_path / "run.yaml"), stub.base_url)
        cli_run(str(tmp_path / "cli"), RUN_ID, config, SAMPLES, SHARDS)
        cli_keys = [request_key(b) for b in stub.requests]
        cli_run(str(tmp_path / "cli"), "batch-0002", config, str(batch), 1)
        cli_calls = len(stub.requests)
        root = s3.uri("celery")

        def cache_dir(i: int) -> str:  # each worker has its own cache folder (mirror of the S3 root)
            return str(tmp_path / f"cache{i}")
        cluster = Cluster(str(tmp_path / "cluster"), workers=2, extra_env={**s3.env(), **KILL_ENV},
                          worker_env=lambda i: {"SKILLPIPE_CACHE_DIR": cache_dir(i)})
        llm = {"config": config, "llm_base_url": stub.base_url, "llm_model": "stub-model", "train": False}
        t0 = time.monotonic()
        try:
            cluster.start()
            started = time.monotonic() - t0
            stub.latency_s = MEMORY_LATENCY_S  # no LLM stage before memory: only memory is slowed down
            cluster.trigger("skillpipe", DAG_RUN, {"input_path": SAMPLES, "root": root, "run_id": RUN_ID,
                                                   "shards": SHARDS, **llm})
            kill = kill_memory_worker(cluster, stub, s3, cache_dir)
            follow_retry(cluster, kill)
            cluster.wait_run("skillpipe", DAG_RUN, timeout_s=900)
            ran, run_calls = time.monotonic() - t0, len(stub.requests)
            states = cluster.task_states("skillpipe", DAG_RUN)
            history = cluster.query("SELECT try_number, state FROM task_instance_history WHERE dag_id = 'skillpipe' "
                                    "AND run_id = %s AND task_id = 'memory' AND map_index = %s ORDER BY try_number",
                                    (DAG_RUN, KILL_SHARD))
            detected = "Detected a task instance without a heartbeat" in tail(
                next(p.log for p in cluster.procs if p.name == "scheduler"), 2_000_000)
            # data-aware scheduling: the asset event for the new batch starts its own skillpipe run
            cluster.trigger("skillpipe_register_batch", "register-0002",
                            {"batch_uri": str(batch), "root": root, "shards": 1, **llm})
            cluster.wait_run("skillpipe", "batch-0002", timeout_s=900)
        finally:
            stray = cluster.stop()
        served = _workers_that_ran_tasks(cluster)
        shard_keys = remote_cache_keys(s3.fs(), f"{s3.bucket}/celery/runs/{RUN_ID}/memory/shard-{KILL_SHARD:05d}")
        before = [request_key(b) for b in stub.requests[cli_calls:kill.sent]]
        calls = classify_calls([request_key(b) for b in stub.requests[kill.sent:run_calls]],
                               [k for k in before if k in shard_keys], kill.stored, kill.visible)
        print(f"cluster start {started:.0f} s, first run done at {ran:.0f} s, start+runs+stop "
              f"{time.monotonic() - t0:.0f} s; task instances {len(states)}; workers that ran tasks: {served}; "
              f"stray at stop: {stray}\nkilled worker{kill.worker} ({kill.pids} processes) running memory"
              f"[{KILL_SHARD}]; timeline (s after kill, state, try): {kill.timeline}; earlier tries {history}; "
              f"scheduler saw the missing heartbeat: {detected}\nrequests after the kill: {calls}; at the kill "
              f"{len(kill.stored)} answers in the killed worker's cache, {len(kill.visible)} in committed parts")
        assert cluster.remaining() == [], "processes outlived the cluster"
        monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "reader"))
        for k, v in s3.env().items():
            monkeypatch.setenv(k, v)
        by_task: dict[str, set] = {}
        for task_id, _, state, _ in states:
            by_task.setdefault(task_id, set()).add(state)
        for stage in STAGES:
            assert by_task.get(stage) == {"success"}, (stage, by_task)
        assert by_task["sft_fit"] == {"skipped"} and by_task["grpo"] == {"skipped"}
        assert len([s for s in states if s[0] == "memory"]) == SHARDS
        # Airflow itself found the lost task (heartbeat timeout) and retried it: no manual rerun
        assert detected and [tr for t, m, _, tr in states if (t, m) == ("memory", KILL_SHARD)][0] >= 2
        assert history and history[0][0] == 1 and history[0][1] in ("failed", "up_for_retry"), history
        assert export_rows(root, RUN_ID) == export_rows(str(tmp_path / "cli"), RUN_ID)
        assert export_rows(root, "batch-0002") == export_rows(str(tmp_path / "cli"), "batch-0002")
        assert len(export_rows(root, RUN_ID)) > 0 and len(export_rows(root, "batch-0002")) > 0
        assert {"worker0", "worker1"} <= set(served)
    # no answer committed before the kill was paid again; the DAG run asked what the CLI run asked,
    # plus, once more, only what the killed worker had in flight or not yet checkpointed
    assert len(kill.visible) > 0 and calls.repeated == 0
    dag_keys = [request_key(b) for b in stub.requests[cli_calls:run_calls]]
    assert set(dag_keys) == set(cli_keys) and len(cli_keys) == len(set(cli_keys))
    assert len(dag_keys) == len(cli_keys) + calls.in_flight + calls.uncheckpointed
    # the asset-triggered batch run asked exactly what the CLI run on that batch asked
    assert len(stub.requests) - run_calls == cli_calls - len(cli_keys)


def _workers_that_ran_tasks(cluster: Cluster) -> list[str]:
    """Names of the Celery workers whose log shows a task workload being executed."""
    names = []
    for log in sorted(glob.glob(os.path.join(cluster.logs, "worker*.log"))):  # killed workers' logs too
        with open(log, encoding="utf-8", errors="replace") as f:
            if "Executing workload in Celery" in f.read():
                names.append(os.path.basename(log)[:-len(".log")])
    return names

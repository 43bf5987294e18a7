"""The skillpipe DAG on a real CeleryExecutor deployment on loopback (tests/dist/cluster.py):
PostgreSQL, Redis, api-server, scheduler, dag-processor and 2 Celery workers. The export rows
must equal those of ``skillpipe run`` (the CLI, one process) on the same input and config, and
nothing the cluster started may outlive it. Artifacts go to a real S3-protocol server on loopback
(moto, tests/helpers/s3_server.py); each worker has its own local cache, as on its own machine.
A second trace batch is then registered as an asset event (dags/skillpipe_assets.py), which
must start its own skillpipe run whose export equals the CLI's on that batch.

The LLM is the schema stub (bench/reliability_stub.py: valid structured answers, a deterministic
function of the request), shared by both runs, so equal rows mean equal pipelines. The run stops
after export (DAG param ``train`` False): SFT/GRPO are tested in tests/dags and tests/sft.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from bench.reliability_stub import SchemaStub
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import QUALITY_RULES
from pipeline.stages import STAGES
from tests.dist.cluster import Cluster
from tests.helpers.paths import REPO
from tests.helpers.s3_server import S3Server

pytestmark = [pytest.mark.slow, pytest.mark.dist]

SAMPLES = os.path.join(REPO, "data", "samples")
SKILLPIPE = os.path.join(os.path.dirname(sys.executable), "skillpipe")
RUN_ID = "dist"


def dag_has_param(name: str) -> bool:
    """Whether the skillpipe DAG declares param ``name`` (parsed the way the dag-processor does)."""
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(os.path.join(REPO, "dags"))
    return name in bag.dags["skillpipe"].params


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
    from pipeline.core.remote import read_table
    rows = read_table(f"{root.rstrip('/')}/runs/{run_id}/export").to_pylist()
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def cli_run(root: str, run_id: str, config: str, input_path: str, shards: int) -> None:
    """``skillpipe run`` (one process, the LocalExecutor-equivalent entry point) to ``root``."""
    os.makedirs(root, exist_ok=True)
    cmd = [SKILLPIPE, "run", "--root", root, "--run-id", run_id, "-c", config, "--input", input_path]
    res = subprocess.run(cmd + (["--shards", str(shards)] if shards else []), capture_output=True, text=True,
                         timeout=600, cwd=REPO)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]


def test_two_celery_workers_on_s3_export_equals_cli_run(tmp_path, monkeypatch):
    shards = 4 if dag_has_param("shards") else 0
    batch = tmp_path / "drop" / "batch-0002"  # a later trace batch, registered as an asset event
    shutil.copytree(os.path.join(SAMPLES, "skillrl-rollouts"), batch)
    with SchemaStub() as stub, S3Server() as s3:
        config = write_config(str(tmp_path / "run.yaml"), stub.base_url)
        cli_run(str(tmp_path / "cli"), RUN_ID, config, SAMPLES, shards)
        cli_run(str(tmp_path / "cli"), "batch-0002", config, str(batch), 1)
        cli_calls = len(stub.requests)
        root = s3.uri("celery")
        # each worker has its own cache folder (mirror of the S3 root), as on its own machine
        cluster = Cluster(str(tmp_path / "cluster"), workers=2, extra_env=s3.env(),
                          worker_env=lambda i: {"SKILLPIPE_CACHE_DIR": str(tmp_path / f"cache{i}")})
        llm = {"config": config, "llm_base_url": stub.base_url, "llm_model": "stub-model", "train": False}
        t0 = time.monotonic()
        try:
            cluster.start()
            started = time.monotonic() - t0
            cluster.trigger("skillpipe", "dist-test", {"input_path": SAMPLES, "root": root, "run_id": RUN_ID,
                                                       **llm, **({"shards": shards} if shards else {})})
            cluster.wait_run("skillpipe", "dist-test", timeout_s=900)
            ran = time.monotonic() - t0
            states = cluster.task_states("skillpipe", "dist-test")
            # data-aware scheduling: the asset event for the new batch starts its own skillpipe run
            cluster.trigger("skillpipe_register_batch", "register-0002",
                            {"batch_uri": str(batch), "root": root, "shards": 1, **llm})
            cluster.wait_run("skillpipe", "batch-0002", timeout_s=900)
            served = _workers_that_ran_tasks(cluster)
        finally:
            stray = cluster.stop()
        report = [st for t, _, st, _ in states if t == "report"]
        print(f"report task: {report}; cluster start {started:.0f} s, first run done at {ran:.0f} s, start+runs+stop "
              f"{time.monotonic() - t0:.0f} s; task instances {len(states)}; workers that ran tasks: {served}; "
              f"stray at stop: {stray}")
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
        if shards:
            assert len([s for s in states if s[0] == "memory"]) == shards
        assert export_rows(root, RUN_ID) == export_rows(str(tmp_path / "cli"), RUN_ID)
        assert export_rows(root, "batch-0002") == export_rows(str(tmp_path / "cli"), "batch-0002")
        assert len(export_rows(root, RUN_ID)) > 0 and len(export_rows(root, "batch-0002")) > 0
        assert served == ["worker0", "worker1"]
    # the DAG runs asked the LLM exactly what the CLI runs asked (per-root caches, same requests)
    assert len(stub.requests) == 2 * cli_calls


def _workers_that_ran_tasks(cluster: Cluster) -> list[str]:
    """Names of the Celery workers whose log shows a task workload being executed."""
    names = []
    for p in cluster.procs:
        if p.name.startswith("worker"):
            with open(p.log, encoding="utf-8", errors="replace") as f:
                if "Executing workload in Celery" in f.read():
                    names.append(p.name)
    return names

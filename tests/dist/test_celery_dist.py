"""The skillpipe DAG on a real CeleryExecutor deployment on loopback (tests/dist/cluster.py):
PostgreSQL, Redis, api-server, scheduler, dag-processor and 2 Celery workers. The export rows
must equal those of ``skillpipe run`` (the CLI, one process) on the same input and config, and
nothing the cluster started may outlive it.

The LLM is the schema stub (bench/reliability_stub.py: valid structured answers, a deterministic
function of the request), shared by both runs, so equal rows mean equal pipelines. The run stops
after export (DAG param ``train`` False): SFT/GRPO are tested in tests/dags and tests/sft.
"""
from __future__ import annotations

import json
import os
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
    """The run's export rows as sorted canonical JSON strings."""
    art = ArtifactStore(root, run_id).load("export")
    assert art is not None, f"no export artifact under {root}"
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in art.read_rows())


def test_two_celery_workers_export_equals_cli_run(tmp_path):
    shards = 4 if dag_has_param("shards") else 0
    with SchemaStub() as stub:
        config = write_config(str(tmp_path / "run.yaml"), stub.base_url)
        ref_root, dist_root = str(tmp_path / "cli"), str(tmp_path / "celery")
        os.makedirs(ref_root)
        os.makedirs(dist_root)
        cli = [SKILLPIPE, "run", "--root", ref_root, "--run-id", RUN_ID, "-c", config, "--input", SAMPLES]
        res = subprocess.run(cli + (["--shards", str(shards)] if shards else []), capture_output=True,
                             text=True, timeout=600, cwd=REPO)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
        cli_calls = len(stub.requests)

        cluster = Cluster(str(tmp_path / "cluster"), workers=2)
        conf = {"input_path": SAMPLES, "root": dist_root, "run_id": RUN_ID, "config": config,
                "llm_base_url": stub.base_url, "llm_model": "stub-model", "train": False}
        if shards:
            conf["shards"] = shards
        t0 = time.monotonic()
        try:
            cluster.start()
            started = time.monotonic() - t0
            cluster.trigger("skillpipe", "dist-test", conf)
            cluster.wait_run("skillpipe", "dist-test", timeout_s=900)
            states = cluster.task_states("skillpipe", "dist-test")
            served = _workers_that_ran_tasks(cluster)
        finally:
            stray = cluster.stop()
        print(f"cluster start {started:.0f} s, start+run+stop {time.monotonic() - t0:.0f} s; "
              f"task instances {len(states)}; workers that ran tasks: {served}; stray at stop: {stray}")
    assert cluster.remaining() == [], "processes outlived the cluster"
    by_task = {}
    for task_id, _, state, _ in states:
        by_task.setdefault(task_id, set()).add(state)
    for stage in STAGES:
        assert by_task.get(stage) == {"success"}, (stage, by_task)
    assert by_task["sft_fit"] == {"skipped"} and by_task["grpo"] == {"skipped"}
    assert export_rows(dist_root, RUN_ID) == export_rows(ref_root, RUN_ID)
    assert len(export_rows(ref_root, RUN_ID)) > 0
    # every LLM answer the DAG needed was one the CLI run had asked for too (same requests)
    assert len(stub.requests) == 2 * cli_calls


def _workers_that_ran_tasks(cluster: Cluster) -> list[str]:
    """Names of the Celery workers whose log mentions executing a task workload."""
    names = []
    for p in cluster.procs:
        if p.name.startswith("worker"):
            with open(p.log, encoding="utf-8", errors="replace") as f:
                if "ExecuteTask" in f.read():
                    names.append(p.name)
    return names

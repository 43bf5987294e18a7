"""Whole runs on an object-storage root (moto's S3 server on loopback) against the stub LLM:
the same rows and fingerprints as a local run, a fresh worker that finds every stage done, and a
worker killed with ``kill -9`` in the middle of an LLM stage whose answers, checkpointed before
it died, are not paid for again by the worker that retries it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.lease import LeaseHeld
from pipeline.engine.remote import open_root, read_table
from pipeline.engine.runner import run_pipeline, run_task
from tests.helpers.llm_faults import GOOD_B, SUCCESS, stub_llm_config
from bench.chat_stub import ChatStub
from tests.helpers.paths import REPO
from tests.helpers.remote_upstream import commit_cool_apple_upstream

STAGES = ["parse", "remove_loops", "verify", "split", "memory"]


# fixtures s3 and env: tests/pipeline/engine/conftest.py


def quiet(_msg: str) -> None:
    pass


@pytest.mark.parametrize("stages, shards", [
    pytest.param(STAGES[:3], 2, id="no_llm-2_shards"),
    pytest.param(STAGES, 2, id="memory-2_shards", marks=pytest.mark.slow)])  # 15-30 s: the memory stage's checks
def test_s3_run_equals_the_local_run_and_a_fresh_worker_skips_every_stage(env, tmp_path, monkeypatch, stages, shards):
    sample = os.path.join(REPO, "data", "samples")
    with ChatStub([], default={"content": json.dumps(SUCCESS)}) as stub:
        # one answer for every request: successes pass or fail the grounding check, failures the schema
        cfg = PipelineConfig(llm=stub_llm_config(stub, concurrency=4, timeout_s=10, max_repairs=0, retry_failed=False))
        local = run_pipeline(str(tmp_path / "local"), "r1", sample, cfg, stages=stages, log=quiet, shards=shards)
        remote = run_pipeline(env.uri("e2e"), "r1", sample, cfg, stages=stages, log=quiet, shards=shards)
        calls = 2 * 19 if "memory" in stages else 0  # 19 trajectories, one request each, every run
        assert len(stub.requests) == calls
        for a, b in zip(local, remote, strict=True):
            assert (b.stage, b.fingerprint, b.manifest["content_sha256"], b.manifest["counts"]) == \
                   (a.stage, a.fingerprint, a.manifest["content_sha256"], a.manifest["counts"])
        store = ArtifactStore(str(tmp_path / "local"), "r1")
        for stage in stages:
            uri = env.uri(f"e2e/runs/r1/{stage}")
            assert read_table(uri).to_pylist() == store.require(stage).read_table().to_pylist()
            assert read_table(uri, quarantine=True).to_pylist() == store.require(stage).read_table(True).to_pylist()
        assert read_table(env.uri("e2e/runs/r1/remove_loops")).num_rows == 19
        monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker2"))  # another machine: empty mirror
        again = run_pipeline(env.uri("e2e"), "r1", sample, cfg, stages=stages, log=quiet)
        assert [r.skipped for r in again] == [True] * len(stages)
        assert [r.fingerprint for r in again] == [r.fingerprint for r in local]
        assert len(stub.requests) == calls  # no LLM call
    if shards == 2:  # a mapped shard task pulls its own shard of each sharded input, nothing more
        monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker3"))
        with open_root(env.uri("e2e"), "r1") as (local, hooks):
            hooks.before("remove_loops", "shard-00001")
            run = os.path.join(local, "runs", "r1")
            assert os.path.exists(os.path.join(run, "parse", "shard-00001", "part-00000.parquet"))
            assert os.path.exists(os.path.join(run, "remove_loops", "shard-00001", "part-00000.parquet"))
            assert not os.path.exists(os.path.join(run, "parse", "shard-00000"))
            assert not os.path.exists(os.path.join(run, "remove_loops", "shard-00000"))
            hooks.after("remove_loops", "shard-00001")
            assert hooks.stats["published"] == 0


WORKER = """
import json, sys
from pipeline.core.config import LLMConfig, PipelineConfig
from pipeline.engine.runner import run_pipeline, run_task
root, base_url = sys.argv[1:3]
cfg = PipelineConfig(llm=LLMConfig(**json.loads(sys.argv[3])))
run_pipeline(root, "r1", "", cfg, env="alfworld", stages=["memory"], log=lambda m: None)
"""


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.mark.slow  # a worker process that loads the memory stage: ~10-20 s on 2 cores
def test_worker_killed_mid_stage_retry_elsewhere_pays_only_for_unanswered_requests(env, tmp_path, monkeypatch):
    root = env.uri("kill")
    commit_cool_apple_upstream(root)  # the upstream artifacts, committed
    fs = env.fs()
    parts = f"{env.bucket}/kill/runs/r1/memory/_llm_cache"
    # A is answered at once; B's answer never comes before the worker is killed
    with ChatStub([{"content": json.dumps(SUCCESS)}, {"sleep": 60, **GOOD_B}]) as stub:
        llm = dict(base_url=stub.base_url, model="stub-model", structured_output="json_object", max_retries=0,
                   max_repairs=0, timeout_s=120, concurrency=1)
        worker_env = {**os.environ, "SKILLPIPE_LLM_CHECKPOINT_ANSWERS": "1", "SKILLPIPE_LEASE_S": "10",
                      "PYTHONPATH": REPO}
        proc = subprocess.Popen([sys.executable, "-c", WORKER, root, stub.base_url, json.dumps(llm)],
                                env=worker_env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: len(stub.requests) >= 2 and fs.ls(parts, detail=False, refresh=True)
                     if fs.exists(parts) else False, 120, "a checkpointed answer and B's request")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    assert len(fs.ls(parts, detail=False, refresh=True)) == 1  # one part, holding A's answer
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker2"))  # the retry runs elsewhere
    cfg = PipelineConfig(llm=stub_llm_config(stub, max_retries=0, max_repairs=0, timeout_s=10))
    with ChatStub([GOOD_B]) as stub2:  # only B's answer is left to pay for (an extra call gets a 599)
        cfg.llm.base_url = stub2.base_url
        with pytest.raises(LeaseHeld, match="memory.json is held by pid"):  # the dead worker's lease
            run_pipeline(root, "r1", "", cfg, env="alfworld", stages=["memory"], log=quiet)
        res, deadline = None, time.monotonic() + 30
        while res is None and time.monotonic() < deadline:  # Airflow's retry: once the lease has expired it is taken over
            try:
                (res,) = run_pipeline(root, "r1", "", cfg, env="alfworld", stages=["memory"], log=quiet)
            except LeaseHeld:
                time.sleep(0.5)
    assert res is not None, "the expired lease was never taken over"
    assert len(stub2.requests) == 1  # B's request again, the one the dead worker got no answer for
    assert stub2.requests[0]["messages"] == stub.requests[1]["messages"] != stub.requests[0]["messages"]
    assert (res.manifest["counts"]["in"], res.manifest["counts"]["out"]) == (2, 2)
    assert (res.manifest["llm"]["calls"], res.manifest["llm"]["cache_hits"]) == (1, 1)
    assert [r["trajectory_id"] for r in read_table(env.uri("kill/runs/r1/memory")).to_pylist()] == ["traj-A", "traj-B"]


def test_cli_run_on_an_s3_root_then_again_from_a_fresh_worker(env, tmp_path, monkeypatch):
    from typer.testing import CliRunner
    from pipeline.cli import app
    args = ["run", "--input", os.path.join(REPO, "data", "samples"), "--root", env.uri("cli"), "--run-id", "r1",
            "--stages", "parse,remove_loops,verify,split"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker2"))
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert again.output.count("unchanged (fingerprint") == 4  # every stage skipped
    assert read_table(env.uri("cli/runs/r1/split")).num_rows == 17
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker3"))  # an Airflow task on a third worker
    ref = run_task("remove_loops", root=env.uri("cli"), run_id="r1", log=quiet)
    assert ref == {"uri": env.uri("cli/runs/r1/remove_loops"), "rows": 19,
                   "fingerprint": json.loads(env.fs().cat_file(f"{env.bucket}/cli/runs/r1/remove_loops/_manifest.json"))
                   ["fingerprint"]}

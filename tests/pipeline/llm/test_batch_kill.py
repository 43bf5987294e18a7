"""kill -9 of ``skillpipe run --llm-mode batch`` while it polls its memory job: the rerun resumes
polling that job instead of submitting a second one, no line runs (is paid) twice, and the run
ends with the rows an online run gives (bench/stub_endpoint.py answers both the same)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

import pytest

from bench.reliability_common import cli_args, run_cli, run_env, write_config
from bench.stub_endpoint import StubEndpoint
from pipeline.engine.remote import read_table
from pipeline.stages import STAGES as ALL_STAGES

STAGES = ",".join(ALL_STAGES[:ALL_STAGES.index("memory") + 1])  # parse ... memory


def wait_for(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def custom_ids(stub: StubEndpoint, job: dict) -> set[str]:
    """The custom ids of a job's input file."""
    data = stub.batches.files[job["input_file_id"]]["data"].decode("utf-8")
    return {json.loads(line)["custom_id"] for line in data.splitlines() if line.strip()}


def memory_rows(root: str, run_id: str) -> list[tuple]:
    table = read_table(os.path.join(root, "runs", run_id, "memory")).to_pylist()
    return sorted((r["trajectory_id"], r["memory_id"]) for r in table)


@pytest.mark.slow
def test_kill_during_polling_resumes_the_same_job(tmp_path):
    root = str(tmp_path)
    with StubEndpoint(batch={"hold_after": 3}) as stub:
        config = write_config(str(tmp_path / "batch.yaml"), stub.base_url,
                              llm={"mode": "batch", "batch_poll_s": 0.1})
        log = open(tmp_path / "killed.log", "w")
        proc = subprocess.Popen(cli_args(root, "b", config, stages=STAGES), env=run_env(), stdout=log,
                                stderr=subprocess.STDOUT, cwd=os.getcwd())
        try:
            wait_for(lambda: stub.batches.jobs and stub.batches.retrieves >= 3
                     and stub.batches.view("batch_000002")["request_counts"]["completed"] == 3, 120,
                     "the first job to run 3 lines while the client polls")
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            log.close()
        first = stub.batches.view("batch_000002")
        assert first["status"] == "in_progress" and first["request_counts"]["total"] > 3
        polls = stub.batches.retrieves
        rerun = subprocess.Popen(cli_args(root, "b", config, stages=STAGES), env=run_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=os.getcwd())
        wait_for(lambda: stub.batches.retrieves > polls + 2 or rerun.poll() is not None, 120,
                 "the rerun to poll the running job")
        assert stub.batches.view("batch_000002")["status"] == "in_progress"  # resumed while it still ran
        stub.batches.release.set()
        out, _ = rerun.communicate(timeout=300)
        assert rerun.returncode == 0, out
        jobs = [stub.batches.view(b) for b in sorted(stub.batches.jobs)]
        lines = Counter(stub.batches.lines_run)
        online_calls = stub.online_calls()
    submitted = [custom_ids(stub, j) for j in jobs]
    assert "submitted" not in out.split("batch_000002")[0]  # the rerun's first word on jobs: the resumed one
    assert all(not (ids & submitted[0]) for ids in submitted[1:])  # no request of the first job sent again
    assert max(lines.values()) == 1  # nothing ran twice, so nothing was paid twice
    assert online_calls == 0
    # the same memories as an online run on the same answers
    with StubEndpoint() as stub:
        config = write_config(str(tmp_path / "online.yaml"), stub.base_url)
        res = run_cli(cli_args(root, "o", config, stages=STAGES))
        assert res.returncode == 0, res.stdout + res.stderr
    assert memory_rows(root, "b") == memory_rows(root, "o") and memory_rows(root, "b")

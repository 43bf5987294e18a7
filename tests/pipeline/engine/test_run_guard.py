"""Run-level guards: one process per run id (an advisory lock that
names its holder), temporary folders of a killed stage removed by the next run, and bad run
ids rejected as usage errors (exit 2) instead of tracebacks."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from tests.helpers.paths import REPO
from pipeline.core.artifacts import ArtifactStore
from pipeline.cli import app
from pipeline.core.config import PipelineConfig
from pipeline.engine.runlock import LOCK_FILE, RunLocked, run_lock
from pipeline.engine.runner import MAX_RUN_ID, check_run_id, run_pipeline, safe_run_id

ROOT = REPO
SAMPLES = os.path.join(ROOT, "data", "samples")


def flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


@pytest.mark.parametrize("run_id", ["x" * 300, "../escape", "a/b", ".hidden", ""])
@pytest.mark.parametrize("with_input", [False, True])
def test_bad_run_id_is_a_usage_error(tmp_path, run_id, with_input):
    args = ["run", "--run-id", run_id, "--root", str(tmp_path)] + (["--input", SAMPLES, "--stages", "parse"]
                                                                  if with_input else [])
    res = CliRunner().invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 2, res.output
    assert "Invalid value for --run-id" in flat(res.output) and "Traceback" not in res.output
    assert not os.path.exists(tmp_path / "runs")  # nothing was created, inside or outside the root


def test_run_id_rules_and_orchestrator_ids():
    assert check_run_id("manual__2026-11-30T10-00-00") == "manual__2026-11-30T10-00-00"
    with pytest.raises(ValueError, match="run id is 300 bytes long; the most is 128"):
        check_run_id("x" * 300)
    with pytest.raises(ValueError, match=r"invalid run id '\.\./escape'"):
        check_run_id("../escape")
    assert safe_run_id("manual__2026-11-30T10:00:00+00:00") == "manual__2026-11-30T10-00-00-00-00"
    long = safe_run_id("scheduled__" + "y" * 300)
    assert len(long) == MAX_RUN_ID and check_run_id(long) == long
    assert safe_run_id("scheduled__" + "y" * 300) == long != safe_run_id("scheduled__" + "y" * 299 + "z")


HOLDER = """
import sys, time
from pipeline.engine.runlock import run_lock
from tests.helpers.paths import REPO
with run_lock(sys.argv[1], "r1"):
    print("locked", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def held_lock(tmp_path):
    """Another process holding run r1's lock; yields its pid."""
    run_dir = str(tmp_path / "runs" / "r1")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, run_dir], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_second_process_on_the_same_run_fails_fast_naming_the_holder(tmp_path, held_lock):
    t0 = time.monotonic()
    with pytest.raises(RunLocked) as e:
        run_pipeline(str(tmp_path), "r1", SAMPLES, PipelineConfig(), stages=["parse"], log=lambda s: None)
    assert time.monotonic() - t0 < 5
    msg = str(e.value)
    assert f"run r1 is in use by pid {held_lock} on host {socket.gethostname()} since 20" in msg
    assert e.value.holder["pid"] == held_lock and "--run-id" in msg
    assert ArtifactStore(str(tmp_path), "r1").load("parse") is None  # it wrote nothing
    # the CLI: exit 1, one error line, no traceback; another run id is not affected
    res = CliRunner().invoke(app, ["run", "--input", SAMPLES, "--run-id", "r1", "--root", str(tmp_path),
                                   "--stages", "parse"])
    assert res.exit_code == 1 and f"error: run r1 is in use by pid {held_lock}" in flat(res.output)
    other = CliRunner().invoke(app, ["run", "--input", SAMPLES, "--run-id", "r2", "--root", str(tmp_path),
                                     "--stages", "parse"])
    assert other.exit_code == 0, other.output


def test_lock_is_released_when_the_holder_is_killed(tmp_path, held_lock):
    os.kill(held_lock, signal.SIGKILL)
    for _ in range(100):  # the kernel drops the flock when the process is gone
        try:
            with run_lock(str(tmp_path / "runs" / "r1"), "r1") as me:
                assert me["pid"] == os.getpid()
                with open(tmp_path / "runs" / "r1" / LOCK_FILE) as f:
                    assert json.load(f)["pid"] == os.getpid()
            break
        except RunLocked:
            time.sleep(0.05)
    else:
        pytest.fail("lock still held after the holder was killed")
    # sequential calls (one Airflow task per stage) each take and release it
    run_pipeline(str(tmp_path), "r1", SAMPLES, PipelineConfig(), stages=["parse"], log=lambda s: None)
    run_pipeline(str(tmp_path), "r1", SAMPLES, PipelineConfig(), stages=["remove_loops"], log=lambda s: None)
    assert ArtifactStore(str(tmp_path), "r1").load("remove_loops") is not None


def test_stale_temp_folders_of_a_killed_stage_are_removed(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    for name in (".parse.tmp-deadbeef", ".parse.old-0badf00d", ".dedupe.tmp-12345678"):
        (run_dir / name / "quarantine").mkdir(parents=True)
        (run_dir / name / "part-00000.parquet").write_bytes(b"half written")
    logs: list[str] = []
    run_pipeline(str(tmp_path), "r1", SAMPLES, PipelineConfig(), stages=["parse"], log=logs.append)
    left = sorted(f for f in os.listdir(run_dir) if f.startswith("."))
    assert left == [".dedupe.tmp-12345678", LOCK_FILE]  # only the stage that ran is cleaned
    assert "[parse] removed 2 temporary folder(s) left by a killed run: .parse.old-0badf00d, " \
           ".parse.tmp-deadbeef" in logs

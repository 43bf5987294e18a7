"""SIGTERM to ``skillpipe run`` while parse's worker pool runs: the CLI exits 143 within a few
seconds and leaves no worker behind, whatever moment the signal lands (start-up, mid-chunk,
teardown). Each run starts and stops one pool; the in-process cycles are in
tests/pipeline/formats/test_parallel.py."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.helpers.paths import FIXTURES, REPO

RUNS = 10
EXIT_WITHIN_S = 5.0


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    out = tmp_path_factory.mktemp("rollouts")
    subprocess.run([sys.executable, os.path.join(FIXTURES, "tools", "make_skillrl_rollouts.py"), str(out),
                    "--envs", "600", "--seed", "3"], check=True, capture_output=True)
    return str(out)


def pool_workers(pid: int, timeout_s: float = 30.0) -> list[psutil.Process]:
    """The children of ``pid`` once there are at least two (parse's pool started)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        kids = psutil.Process(pid).children()
        if len(kids) >= 2:
            return kids
        time.sleep(0.005)
    raise AssertionError(f"no worker pool appeared under pid {pid} within {timeout_s} s")


def still_running(procs: list[psutil.Process]) -> list[int]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_sigterm_mid_parse_exits_143_within_seconds_leaving_no_worker(tree, tmp_path):
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": REPO, "HF_HUB_OFFLINE": "1", "SKILLPIPE_WORKERS": "2"}  # a pool on any machine
    codes = []
    for i in range(RUNS):
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "run", "--input", tree, "--stages", "parse",
                                 "--root", str(tmp_path), "--run-id", f"r{i}"], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            workers = pool_workers(proc.pid)
            time.sleep(rng.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            rc = proc.wait(timeout=EXIT_WITHIN_S + 5)
            took = time.monotonic() - t0
        finally:
            proc.kill()
            proc.wait(timeout=10)
        stderr = proc.stderr.read().decode(errors="replace")
        assert took < EXIT_WITHIN_S, f"run {i}: exit took {took:.1f} s\n{stderr[-2000:]}"
        assert rc in (143, 0), f"run {i}: exit code {rc}\n{stderr[-2000:]}"
        time.sleep(0.2)  # PR_SET_PDEATHSIG / the teardown's SIGKILL land within milliseconds
        assert not still_running(workers), f"run {i}: workers {still_running(workers)} outlived the CLI"
        codes.append(rc)
    assert codes.count(143) >= RUNS - 2, codes  # the signal came mid-stage (0: parse had finished)


def test_sigterm_after_the_run_finished_keeps_its_exit_status(tree, tmp_path):
    """A SIGTERM that lands once the stages are written, while the interpreter shuts down (Python
    has dropped its handler by then), leaves exit 0 or 143, never a death by the signal (-15)."""
    env = {**os.environ, "PYTHONPATH": REPO, "HF_HUB_OFFLINE": "1", "SKILLPIPE_WORKERS": "2"}
    codes = []
    for i, delay in enumerate((0.0, 0.03, 0.06, 0.1, 0.15, 0.25)):
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "run", "--input", tree, "--stages", "parse",
                                 "--root", str(tmp_path), "--run-id", f"late{i}"], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stderr.readline()
            while line and not line.startswith("[parse]"):  # the stage's summary line: its artifact is written
                line = proc.stderr.readline()
            time.sleep(delay)
            proc.send_signal(signal.SIGTERM)
            codes.append(proc.wait(timeout=EXIT_WITHIN_S + 5))
        finally:
            proc.kill()
            proc.wait(timeout=10)
    assert all(rc in (0, 143) for rc in codes), codes

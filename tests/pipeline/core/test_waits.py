"""Deadlines of the waits outside the worker pool: the error names what and the pid, and
nothing is left running after it."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from pipeline.engine.remote import mirror_lock
from pipeline.core.waits import WaitTimeout, run_bounded, seconds_from_env, wait_exit
from pipeline.llm.server import _terminate
from tests.helpers.paths import REPO

IGNORES_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


def test_seconds_from_env_takes_a_positive_number_and_rejects_the_rest(monkeypatch):
    monkeypatch.delenv("SKILLPIPE_TEST_S", raising=False)
    assert seconds_from_env("SKILLPIPE_TEST_S", 7.0) == 7.0
    monkeypatch.setenv("SKILLPIPE_TEST_S", "2.5")
    assert seconds_from_env("SKILLPIPE_TEST_S", 7.0) == 2.5
    for bad in ("0", "-1", "inf", "soon"):
        monkeypatch.setenv("SKILLPIPE_TEST_S", bad)
        with pytest.raises(ValueError, match=rf"\$SKILLPIPE_TEST_S must be a number of seconds > 0 \(default 7\), got '{bad}'"):
            seconds_from_env("SKILLPIPE_TEST_S", 7.0)


def test_wait_exit_kills_a_process_past_its_deadline_and_names_it():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    t0 = time.monotonic()
    with pytest.raises(WaitTimeout, match=rf"^sleeper \(pid {proc.pid}\) did not finish within 0.3 s: killed$") as info:
        wait_exit(proc, "sleeper", 0.3)
    assert info.value.pid == proc.pid and time.monotonic() - t0 < 5
    assert proc.poll() is not None  # killed and reaped
    assert wait_exit(subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"]), "quick", 30) == 3


def test_run_bounded_kills_the_whole_group_and_names_the_pid():
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(p.pid, flush=True); time.sleep(60)")
    with pytest.raises(WaitTimeout, match=r"^stage \(pid \d+\) did not finish within 1 s: killed with its process group") as info:
        run_bounded([sys.executable, "-c", code], 1.0, "stage", capture_output=True, text=True)
    assert not psutil.pid_exists(info.value.pid) or psutil.Process(info.value.pid).status() == psutil.STATUS_ZOMBIE
    done = run_bounded([sys.executable, "-c", "print('ok')"], 30, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "ok\n")


def test_the_embedded_server_stop_kills_a_process_that_ignores_sigterm():
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    _terminate(proc, grace_s=0.5)
    assert proc.returncode == -9 and time.monotonic() - t0 < 5


def test_mirror_lock_gives_up_naming_the_holder(tmp_path):
    holder = ("import sys; from pipeline.engine.remote import mirror_lock\n"
              "with mirror_lock(sys.argv[1]):\n    print('held', flush=True); sys.stdin.read()")
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-c", holder, str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(WaitTimeout, match=rf"the pull holding .*\.mirror\.lock \(pid {proc.pid}\) did not finish "
                                              r"within 0.5 s: another process of this machine is still pulling"):
            with mirror_lock(str(tmp_path), timeout_s=0.5):
                pass
    finally:
        proc.stdin.close()
        wait_exit(proc, "lock holder", 10)
    with mirror_lock(str(tmp_path), timeout_s=0.5):  # released: taken at once
        assert open(tmp_path / ".mirror.lock").read() == str(os.getpid())

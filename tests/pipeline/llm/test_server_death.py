"""A dead embedded LLM server is named, not retried.

Fast cases put the scripted stub (bench/chat_stub.py, run as its own process) in the place of the
llama.cpp server: it answers ``/v1/models`` like the real one and kills itself (SIGILL, or exit 3)
on its first completion, as the natively built server did on a CPU with AMX. Slow cases kill the
real embedded server during ``memory`` from outside, through the CLI and the detached (Airflow)
path, and check ``skillpipe serve-llm --check``.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.paths import REPO as _REPO
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.llm import server
from pipeline.llm.provider import llm_factory
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext
from tests.helpers.llm_stage_data import cool_apple, write_trajectories

REPO = Path(_REPO)
STUB = REPO / "bench" / "chat_stub.py"
SIGILL_MSG = ("died with SIGILL (illegal instruction): rebuild llama-cpp-python, see README Troubleshooting "
              "(for llama-server, SKILLPIPE_LLAMA_SERVER_VARIANT=baseline runs its portable AVX2 build)")


def stub_command(script: list[dict]):
    """A ``server.server_command`` replacement that starts the stub with ``script``."""
    def command(port: int, ctx_size: int, n_threads: int | None = None, model: str = "") -> list[str]:
        return [sys.executable, str(STUB), "--as", "llama_cpp.server", "--port", str(port),
                "--script", json.dumps(script)]
    return command


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" in f.read()
    except OSError:
        return True


def memory_ctx(tmp_path) -> tuple[ArtifactStore, StageContext, contextlib.ExitStack]:
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [cool_apple("success", "traj-A"), cool_apple("failure", "traj-B")])
    stack = contextlib.ExitStack()
    cfg = PipelineConfig()
    cfg.llm.ctx_size = 512
    return store, StageContext(store, cfg, env="alfworld", llm_factory=llm_factory(cfg.llm, store.run_dir, stack)), stack


def assert_memory_not_written(store: ArtifactStore) -> None:
    assert store.load("memory") is None
    leftovers = [p.name for p in Path(store.run_dir).iterdir() if "memory" in p.name]
    assert leftovers == []  # no stage folder, no temp folder


@pytest.mark.parametrize("step, expected", [
    ({"die": "SIGILL"}, SIGILL_MSG),
    ({"exit": 3, "stderr": "fatal: model file truncated"}, "exited with code 3: see README Troubleshooting"),
], ids=["sigill", "exit_code"])
def test_dead_embedded_server_fails_the_stage_at_once(tmp_path, monkeypatch, step, expected):
    monkeypatch.setattr(server, "server_command", stub_command([step]))
    store, ctx, stack = memory_ctx(tmp_path)
    died: list[float] = []
    with stack, pytest.raises(server.ServerDied) as info:
        proc = ctx.llm.server_watch.__self__.proc  # starts the (stub) server
        # timed from the server's death (the stage's own work before its LLM batch is not)
        watcher = threading.Thread(target=lambda: (proc.wait(), died.append(time.monotonic())), daemon=True)
        watcher.start()
        try:
            run_stage("memory", ctx, model_id="m", log=lambda s: None)
        finally:
            raised = time.monotonic()
    watcher.join(5)
    elapsed = raised - died[0]
    msg = str(info.value)
    assert re.match(r"\[memory\] embedded LLM server \(pid \d+\) " + re.escape(expected), msg), msg
    assert f"log {store.run_dir}/llm_server.log ends with:" in msg
    if "exit" in step:
        assert msg.endswith("fatal: model file truncated")  # the log tail names the cause
    else:
        assert "Fatal Python error: Illegal instruction" in msg  # faulthandler's line, from the log
    # the backoff of the first retry alone is 1 s: the watch ended the batch before any retry
    assert 0 <= elapsed < 3.0, elapsed
    # one call (one request at a time to the embedded server): the batch ended during its first
    # backoff, so neither a retry nor the second item was sent
    assert ctx._llm.stats_snapshot()["calls"] == 1
    assert_memory_not_written(store)


def test_server_already_dead_before_a_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(server, "server_command", stub_command([]))
    store, ctx, stack = memory_ctx(tmp_path)
    with stack:
        llm = ctx.llm  # starts the (stub) server
        srv_pid = llm.server_watch.__self__.pid  # the EmbeddedServer's death() method
        os.kill(srv_pid, signal.SIGKILL)
        with pytest.raises(server.ServerDied, match=r"\[memory\] embedded LLM server \(pid \d+\) died with "
                                                    r"SIGKILL \(killed\): killed by the OS"):
            run_stage("memory", ctx, model_id="m", log=lambda s: None)
    assert llm.stats_snapshot()["calls"] == 0  # no request was even sent
    assert_memory_not_written(store)


def detached_by_another_process(state_dir: Path, script: list[dict]) -> dict:
    """``start_detached`` run by a process that then exits (the Airflow setup task): the server
    is not our child, so its exit status cannot be collected here."""
    code = ("import json, sys\nfrom pipeline.llm import server\nimport tests.pipeline.llm.test_server_death as t\n"
            f"server.server_command = t.stub_command({script!r})\n"
            f"print(json.dumps(server.start_detached({str(state_dir)!r})))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_detached_server_death_is_named_from_its_state_file(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [cool_apple("success", "traj-A"), cool_apple("failure", "traj-B")])
    state = detached_by_another_process(Path(store.run_dir) / server.DETACHED_STATE_DIR, [{"die": "SIGILL"}])
    try:
        cfg = PipelineConfig()
        cfg.llm.base_url, cfg.llm.model = state["base_url"], server.EMBEDDED_MODEL_ALIAS  # as the DAG passes them
        died: list[float] = []

        def watch_pid():  # not our child: poll until it is gone
            while not gone(state["pid"]):
                time.sleep(0.01)
            died.append(time.monotonic())
        threading.Thread(target=watch_pid, daemon=True).start()
        with contextlib.ExitStack() as stack:
            ctx = StageContext(store, cfg, env="alfworld", llm_factory=llm_factory(cfg.llm, store.run_dir, stack))
            with pytest.raises(server.ServerDied) as info:
                run_stage("memory", ctx, model_id="m", log=lambda s: None)
            assert 0 <= time.monotonic() - died[0] < 3.0
        assert str(info.value).startswith(f"[memory] embedded LLM server (pid {state['pid']}) {SIGILL_MSG}; log ")
        assert_memory_not_written(store)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(state["pid"], signal.SIGKILL)


def test_detached_watch_ignores_another_endpoint_and_sees_exit_of_own_child(tmp_path, monkeypatch):
    monkeypatch.setattr(server, "server_command", stub_command([]))
    state = server.start_detached(str(tmp_path))
    try:
        assert server.detached_watch(str(tmp_path), "http://127.0.0.1:1/v1") is None
        assert server.detached_watch(str(tmp_path / "nowhere"), state["base_url"]) is None
        watch = server.detached_watch(str(tmp_path), state["base_url"])
        assert watch() is None
        os.kill(state["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 5
        while watch() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        # started by this process, so reaped here: the exact status
        assert re.match(rf"embedded LLM server \(pid {state['pid']}\) died with SIGTERM \(terminated\): "
                        r"see README Troubleshooting; log ", watch())
    finally:
        server.stop_detached(str(tmp_path))


def test_serve_llm_check_names_a_dying_server(monkeypatch):
    from typer.testing import CliRunner

    from pipeline.cli import app
    monkeypatch.setattr(server, "server_command", stub_command([{"die": "SIGILL"}]))
    res = CliRunner().invoke(app, ["serve-llm", "--check"])
    assert res.exit_code == 1, res.output
    out = " ".join(res.output.split())  # rich wraps long lines
    assert "error: the embedded LLM server cannot answer: embedded LLM server (pid" in out
    assert SIGILL_MSG in out and "Fatal Python error: Illegal instruction" in out


# ---- the real embedded server -------------------------------------------------------------------

class CliRun:
    """``skillpipe run --stages parse,remove_loops,verify,memory`` in a subprocess; its stderr is read as it comes."""

    def __init__(self, tmp_path: Path, *extra: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "run", "--input", str(REPO / "data" / "samples"), "--run-id", "kill",
             "--root", str(tmp_path), "--stages", "parse,remove_loops,verify,memory", *extra],
            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE)
        self.stderr: list[str] = []
        # raw reads, not lines: tqdm redraws its bar with "\r", no newline
        fd = self.proc.stderr.fileno()
        self._reader = threading.Thread(
            target=lambda: self.stderr.extend(iter(lambda: os.read(fd, 4096).decode("utf-8", "replace"), "")),
            daemon=True)
        self._reader.start()

    def wait_for_memory_requests(self, timeout_s: float = 180.0) -> None:
        """Until memory's progress bar is up (its requests go out with it), plus 1 s: mid-stage."""
        deadline = time.monotonic() + timeout_s
        while not any("memory:" in line for line in list(self.stderr)):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.proc.kill()
                raise AssertionError("memory never started: " + "".join(self.stderr)[-2000:])
            time.sleep(0.1)
        time.sleep(1.0)

    def kill_server_and_wait(self, server_pid: int, sig: int) -> tuple[float, str]:
        """Send ``sig`` to the server; seconds until the CLI exited, and its stderr (one line)."""
        os.kill(server_pid, sig)
        t0 = time.monotonic()
        try:
            self.proc.wait(timeout=30)
        finally:
            self.proc.kill()
        elapsed = time.monotonic() - t0
        self._reader.join(5)
        return elapsed, " ".join("".join(self.stderr).split())


@pytest.mark.slow
@pytest.mark.parametrize("sig, expected", [
    (signal.SIGKILL, "died with SIGKILL (killed): killed by the OS (out of memory? see dmesg) or by a user"),
    (signal.SIGILL, SIGILL_MSG),
], ids=["sigkill", "sigill"])
def test_cli_run_ends_within_10s_of_the_embedded_server_death(tmp_path, sig, expected):
    run = CliRun(tmp_path)
    run_dir = tmp_path / "runs" / "kill"
    run.wait_for_memory_requests()
    [server_pid] = [int(p) for p in subprocess.run(["pgrep", "-P", str(run.proc.pid), "-f", "llama_cpp.server|llama-server"],
                                                   capture_output=True, text=True).stdout.split()]
    elapsed, stderr = run.kill_server_and_wait(server_pid, sig)
    assert run.proc.returncode == 1
    assert elapsed < 10.0, elapsed
    assert f"error: [memory] embedded LLM server (pid {server_pid}) {expected}; log " in stderr, stderr
    assert "[verify] in=19 out=19" in stderr  # the stages before were written...
    assert not (run_dir / "memory").exists()  # ...memory was not (no folder, no manifest)
    assert not [p for p in os.listdir(run_dir) if "memory" in p]


@pytest.mark.slow
def test_detached_real_server_death_during_memory(tmp_path, monkeypatch):
    # A detached server is not our child: its signal is known only from faulthandler's line in
    # its log, which llama.cpp's Python server writes (llama-server, a C++ program, writes none)
    monkeypatch.setenv(server.ENGINE_ENV, "llama-cpp-python")
    run_dir = tmp_path / "runs" / "kill"
    code = ("import json\nfrom pipeline.llm import server\n"
            f"print(json.dumps(server.start_detached({str(run_dir / server.DETACHED_STATE_DIR)!r}, ctx_size=2048)))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    state = json.loads(out.stdout.splitlines()[-1])
    try:
        run = CliRun(tmp_path, "--llm-base-url", state["base_url"], "--llm-model", server.EMBEDDED_MODEL_ALIAS)
        run.wait_for_memory_requests()
        elapsed, stderr = run.kill_server_and_wait(state["pid"], signal.SIGILL)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(state["pid"], signal.SIGKILL)
    assert run.proc.returncode == 1 and elapsed < 10.0, (elapsed, stderr)
    assert f"error: [memory] embedded LLM server (pid {state['pid']}) {SIGILL_MSG}; log " in stderr, stderr
    assert not (run_dir / "memory").exists()


@pytest.mark.slow
def test_serve_llm_check_answers():
    res = subprocess.run([sys.executable, "-m", "pipeline.cli", "serve-llm", "--check"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    m = re.match(r"ok: embedded LLM (\S+) \(([^)]+)\) answered (\d+) tokens in (\d+\.\d+) s "
                 r"\(server start \d+\.\d s\)", res.stdout)
    assert m, res.stdout
    program = server.engine()
    if program == "llama-server":  # with the build that ran (baseline, or avx512 where the CPU has it)
        program += f", {server.llama_server_variant()} build"
    assert (m.group(1), m.group(2)) == (server.embedded_model_id(), program)
    assert 1 <= int(m.group(3)) <= 4 and float(m.group(4)) < 60

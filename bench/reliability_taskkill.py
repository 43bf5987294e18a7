"""Section 1b of the reliability suite: kill -9 of the processes a DAG run consists of.

Each mapped Airflow task of ``dags/skillpipe_dag.py`` runs
:func:`pipeline.engine.runner.run_task` ``(stage, shard=...)`` in a worker process; each
``<stage>_all`` task runs ``run_task(stage)`` (the collect step). Here a run of the sample input
in ``SHARDS`` shards goes task after task in DAG order (:func:`tasks`), the plan by
:func:`pipeline.engine.runner.plan_task`; the task under test runs as its own process
(``python -c "run_task(...)"``, its own process group) and is sent SIGKILL at a seeded random
moment:

* ``request``: once the stub has received the n-th LLM request of the process (n seeded in
  ``1..N``, N the task's requests in the reference run), then a seeded delay below the stub's
  latency (an LLM shard task: memory, distill);
* ``write``: the moment the shard's temporary folder ``.<stage>.shard-NNNNN.tmp-*`` appears;
* ``lock``: a seeded 0-20 ms after the task's lock file (``.skillpipe.<unit>.lock``) appears (a
  collect step, whose work takes milliseconds after seconds of imports);
* ``time``: a seeded fraction (10-95 %) of the task's wall time as a process in the reference run.

Then the same call again (Airflow's retry), the rest of the run, and the checks against an
unkilled reference run: every stage's rows and quarantine rows identical, the LLM requests after
the kill classified (:func:`bench.reliability_common.classify_calls`: repeated must be 0), no
temporary folder left (on object storage: no uncommitted attempt left under ``_attempts/``), no
process of the killed group alive.

Roots: a local folder, and ``s3://`` on moto's S3 server (``bench/s3_server.py``) where
every process is another worker: the killed task, its retry and the in-process tasks each have
their own mirror (``SKILLPIPE_CACHE_DIR``), the lease lives ``LEASE_S`` seconds and the retry
waits it out (an Airflow ``retry_delay``), and LLM answers go to a remote cache part every
``CKPT_ANSWERS`` answers.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from bench.reliability_common import (CallClasses, SAMPLES, STAGES, cache_keys, classify_calls, md_table,
                                      request_key, run_env, write_config, REPO)
from bench.reliability_kill import POLL_S, check_keys, kill_group
from bench.reliability_stub import SchemaStub
from pipeline.core import layout
from pipeline.core.waits import wait_exit

SHARDS = 3
TASK_TIMEOUT_S = 900.0   # one task of data/samples takes seconds: past this it hangs
DAG_TIMEOUT_S = 1800.0   # a whole airflow dags test run
LEASE_S = 3.0
CKPT_ANSWERS = 2
TASK = "import json, sys; from pipeline.engine.runner import run_task; run_task(**json.loads(sys.argv[1]))"
# (root kind, stage, shard or None for the collect step, mode, seed): 13 kills
POINTS = [("local", "parse", "shard-00001", "write", 0), ("local", "remove_loops", "shard-00002", "time", 0),
          ("local", "memory", "shard-00000", "request", 0), ("local", "memory", "shard-00000", "request", 1),
          ("local", "memory", None, "lock", 0), ("local", "distill", "shard-00000", "request", 0),
          ("local", "distill", "shard-00002", "request", 1), ("local", "distill", None, "lock", 1),
          ("s3", "parse", "shard-00000", "write", 0), ("s3", "memory", "shard-00000", "request", 0),
          ("s3", "memory", "shard-00000", "request", 1), ("s3", "memory", None, "lock", 0),
          ("s3", "distill", "shard-00000", "request", 0)]


@dataclass
class TaskKill:
    """One row of the matrix."""
    root: str
    task: str           # "<stage>[<shard>]" or "<stage>_all"
    mode: str
    seed: int
    hit: str            # "in task" / "before task" (still importing) / "task done" (missed)
    retry_rc: int
    finish_ok: bool     # the rest of the run ran without an error
    identical: bool
    calls: CallClasses
    temp_left: int
    procs_left: int
    diff: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every check passed."""
        return (self.retry_rc == 0 and self.finish_ok and self.identical and self.calls.repeated == 0
                and self.temp_left == 0 and self.procs_left == 0)


def tasks(upto: str = STAGES[-1]) -> list[tuple[str, str | None]]:
    """The DAG's stage tasks in order, ``(stage, shard)``, shard ``None`` for a reduce or a
    collect step, up to stage ``upto``."""
    from pipeline.stages import get_stage
    out: list[tuple[str, str | None]] = []
    for st in STAGES[:STAGES.index(upto) + 1]:
        if get_stage(st).sharded:
            out += [(st, f"shard-{i:05d}") for i in range(SHARDS)]
        out.append((st, None))
    return out


def label(stage: str, shard: str | None) -> str:
    """The Airflow task name of ``(stage, shard)``."""
    return f"{stage}[{shard}]" if shard else f"{stage}_all"


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the block, then restore them."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Root:
    """Where a kill's runs live: ``uri`` (a folder or ``s3://``), the environment of a worker
    ``name`` (its own mirror on s3), and how to read a run back."""

    def __init__(self, work: str, s3=None):
        self.work, self.s3 = work, s3
        self.uri = s3.uri("kill") if s3 is not None else os.path.join(work, "local")

    def env(self, worker: str) -> dict[str, str]:
        """The environment of worker ``worker``: its mirror, the short lease and checkpoints."""
        if self.s3 is None:
            return {}
        return {**self.s3.env(), "SKILLPIPE_CACHE_DIR": os.path.join(self.work, "workers", worker),
                "SKILLPIPE_LEASE_S": str(LEASE_S), "SKILLPIPE_LLM_CHECKPOINT_ANSWERS": str(CKPT_ANSWERS)}

    def run_dir(self, worker: str, run_id: str) -> str:
        """The run folder that worker ``worker`` works in (the root's, or its mirror's)."""
        if self.s3 is None:
            return layout.run_dir(self.uri, run_id)
        from pipeline.engine.remote import mirror_dir
        with environ(self.env(worker)):
            return layout.run_dir(mirror_dir(self.uri), run_id)

    def visible_keys(self, run_id: str, stage: str, shard: str | None) -> set[str] | None:
        """Keys of the committed remote LLM cache parts of the unit (``None`` on a local root)."""
        if self.s3 is None:
            return None
        rel = f"{self.s3.bucket}/kill/runs/{run_id}/{stage}" + (f"/{shard}" if shard else "")
        return remote_cache_keys(self.s3.fs(), rel)

    def read(self, run_id: str) -> dict[str, Any]:
        """Every stage's rows and quarantine rows of run ``run_id`` (``None`` for a missing stage)."""
        out: dict[str, Any] = {}
        with environ(self.env("reader")):
            for st in STAGES:
                out[st] = _read_stage(self.uri, run_id, st)
        return out

    def temp_left(self, run_id: str, workers: list[str]) -> int:
        """Temporary folders left in the run folders of ``workers``, plus (s3) attempt folders
        not named by their folder's committed manifest."""
        n = 0
        for w in workers:
            d = self.run_dir(w, run_id)
            n += sum(".tmp-" in f or ".old-" in f for f in os.listdir(d)) if os.path.isdir(d) else 0
        return n + (self._stale_attempts(run_id) if self.s3 is not None else 0)

    def _stale_attempts(self, run_id: str) -> int:
        fs, n = self.s3.fs(), 0
        for m in fs.glob(f"{self.s3.bucket}/kill/runs/{run_id}/**/{layout.ARTIFACT_MANIFEST}"):
            folder = m.rsplit("/", 1)[0]
            keep = (json.loads(fs.cat_file(m)).get("attempt") or {}).get("id")
            try:
                ids = [p.rsplit("/", 1)[1] for p in fs.ls(f"{folder}/_attempts", detail=False)]
            except FileNotFoundError:
                ids = []
            n += sum(i != keep for i in ids)
        return n


def remote_cache_keys(fs, folder: str, pattern: str = "_llm_cache/*.parquet") -> set[str]:
    """Keys of the LLM cache parts (:func:`pipeline.llm.cache.decode_part`) matching ``pattern``
    under ``folder`` on the fsspec filesystem ``fs`` (a path without protocol, e.g.
    ``bucket/prefix/runs/<id>/memory/shard-00000``; ``pattern`` ``*/_llm_cache/*.parquet`` takes
    every shard of a stage): what a retry on another worker can import. Empty when there is none.
    A unit that commits merges its parts into a new one and then deletes them, so a part gone
    between the glob and the read is looked for again in a fresh glob (at most 3)."""
    from pipeline.llm.cache import decode_part
    keys: set[str] = set()
    done: set[str] = set()
    for _ in range(3):
        gone = False
        for p in [p for p in fs.glob(f"{folder}/{pattern}") if p not in done]:
            try:
                keys |= {e["key"] for e in decode_part(fs.cat_file(p))}
            except FileNotFoundError:
                gone = True
            done.add(p)
        if not gone:
            break
    return keys


def _read_stage(uri: str, run_id: str, stage: str) -> tuple[list, list] | None:
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.storage import is_remote
    from pipeline.engine.remote import read_table
    if is_remote(uri):
        try:
            path = f"{uri}/runs/{run_id}/{stage}"
            return read_table(path).to_pylist(), read_table(path, quarantine=True).to_pylist()
        except FileNotFoundError:
            return None
    art = ArtifactStore(uri, run_id).load(stage)
    return None if art is None else (art.read_rows(), art.read_rows(quarantine=True))


def _quiet(_msg: str) -> None:
    pass


def _task_args(root: Root, run_id: str, config: str, stage: str, shard: str | None) -> dict[str, Any]:
    return dict(stage=stage, root=root.uri, run_id=run_id, input_path=SAMPLES, config_path=config, shard=shard)


def run_inline(root: Root, worker: str, args: dict[str, Any]) -> None:
    """One task in this process (another worker when ``worker`` differs), as a DAG task runs it."""
    from pipeline.engine.runner import run_task
    with environ(root.env(worker)):
        run_task(args.pop("stage"), log=_quiet, **args)


def start_task(root: Root, worker: str, args: dict[str, Any], log_path: str) -> subprocess.Popen:
    """One task as its own process (its own process group), on worker ``worker``."""
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-c", TASK, json.dumps(args)], env={**run_env(), **root.env(worker)},
                                cwd=REPO, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)


def reference(root: Root, config: str, stub: SchemaStub, targets: set[tuple[str, str | None]],
              upto: str) -> dict[tuple[str, str | None], tuple[int, float]]:
    """Run the whole task sequence once, unkilled, as run ``reference``: the tasks in ``targets``
    (those killed at a fraction of their wall time) as processes, the others in this process. Returns per task
    ``(LLM requests, wall s)``; checks the request-key derivation on the run's cache."""
    from pipeline.engine.runner import plan_task
    from pipeline.llm.cache import CACHE_FILE
    with environ(root.env("main")):
        plan_task(root=root.uri, run_id="reference", input_path=SAMPLES, shards=SHARDS, log=_quiet)
    out = {}
    for stage, shard in tasks(upto):
        n, t0 = len(stub.requests), time.monotonic()
        args = _task_args(root, "reference", config, stage, shard)
        if (stage, shard) in targets:
            proc = start_task(root, "main", args, os.path.join(root.work, "reference.log"))
            if wait_exit(proc, f"reference task {label(stage, shard)}", TASK_TIMEOUT_S) != 0:
                raise RuntimeError(f"reference task {label(stage, shard)} failed with rc {proc.returncode}")
        else:
            run_inline(root, "main", args)
        out[(stage, shard)] = (len(stub.requests) - n, time.monotonic() - t0)
    check_keys(stub.requests, os.path.join(root.run_dir("main", "reference"), CACHE_FILE))
    return out


def wait_for_moment(proc: subprocess.Popen, stub: SchemaStub, mode: str, rng: random.Random,
                    ref: tuple[int, float], run_dir: str, prefix: str, latency_s: float, lock: str = "") -> bool:
    """Poll until the kill moment of ``mode`` (module docstring; ``prefix``: the temporary
    folder's, ``lock``: the task lock file's name); False when the process ended first."""
    before, t0, fire_at = len(stub.requests), time.monotonic(), None
    n, delay, at = rng.randint(1, max(1, ref[0])), rng.uniform(0.0, latency_s), rng.uniform(0.1, 0.95) * ref[1]
    while proc.poll() is None:
        now = time.monotonic()
        if fire_at is None:
            if mode == "request" and len(stub.requests) - before >= n:
                fire_at = now + delay
            elif mode == "write" and os.path.isdir(run_dir) and any(f.startswith(prefix) for f in os.listdir(run_dir)):
                fire_at = now
            elif mode == "lock" and os.path.exists(os.path.join(run_dir, lock)):
                fire_at = now + rng.uniform(0.0, 0.02)
            elif mode == "time" and now - t0 >= at:
                fire_at = now
        if fire_at is not None and now >= fire_at:
            return True
        time.sleep(POLL_S)
    return False


def where_hit(run_dir: str, stage: str, shard: str | None) -> str:
    """What the killed process had reached: its unit's manifest written (``task done``), its task
    lock taken (``in task``), or neither (``before task``: still starting up)."""
    unit = f"{stage}.{shard}" if shard else stage
    if os.path.exists(os.path.join(run_dir, stage, *([shard] if shard else []), layout.ARTIFACT_MANIFEST)):
        return "task done"
    return "in task" if os.path.exists(os.path.join(run_dir, f".skillpipe.{unit}.lock")) else "before task"


def kill_one(root: Root, kind: str, config: str, stub: SchemaStub, point: tuple, ref: dict, ref_rows: dict,
             upto: str, latency_s: float) -> TaskKill:
    """One kill: a fresh run up to the task, the task killed (:func:`wait_for_moment`), its retry
    on a fresh worker, the rest of the run, the checks."""
    from pipeline.engine.runner import plan_task
    from pipeline.llm.cache import CACHE_FILE
    _, stage, shard, mode, seed = point
    run_id = f"kill-{kind}-{stage}-{shard or 'all'}-{mode}-{seed}"
    order = tasks(upto)
    at = order.index((stage, shard))
    with environ(root.env("main")):
        plan_task(root=root.uri, run_id=run_id, input_path=SAMPLES, shards=SHARDS, log=_quiet)
    for st, sh in order[:at]:
        run_inline(root, "main", _task_args(root, run_id, config, st, sh))
    args, log_path = _task_args(root, run_id, config, stage, shard), os.path.join(root.work, f"{run_id}.log")
    killed_dir, before = root.run_dir("killed", run_id), len(stub.requests)
    proc = start_task(root, "killed", args, log_path)
    rng = random.Random(f"{kind}-{stage}-{shard}-{mode}-{seed}")
    lock = f".skillpipe.{stage}.{shard}.lock" if shard else f".skillpipe.{stage}.lock"
    landed = wait_for_moment(proc, stub, mode, rng, ref[(stage, shard)], killed_dir, f".{stage}.{shard}.tmp-",
                             latency_s, lock)
    procs = kill_group(proc) if landed else 0
    if not landed:
        wait_exit(proc, f"task {label(stage, shard)} (the kill missed it)", TASK_TIMEOUT_S)
    hit = where_hit(killed_dir, stage, shard)
    stored = cache_keys(os.path.join(killed_dir, CACHE_FILE))  # the snapshot, before anything else runs
    visible = root.visible_keys(run_id, stage, shard)
    killed_keys, after = [request_key(b) for b in stub.requests[before:]], len(stub.requests)
    if root.s3 is not None:
        time.sleep(LEASE_S + 0.5)  # the retry delay: the dead worker's lease expires
    retry = start_task(root, "retry" if root.s3 is not None else "main", dict(args), log_path)
    retry_rc, finish_ok, diff = wait_exit(retry, f"retry of task {label(stage, shard)}", TASK_TIMEOUT_S), True, []
    try:
        for st, sh in order[at + 1:]:
            run_inline(root, "main", _task_args(root, run_id, config, st, sh))
    except Exception as e:  # a finding: reported in the row
        finish_ok, diff = False, [f"{type(e).__name__}: {e}"[:200]]
    got = root.read(run_id)
    diff += [st for st in STAGES if got.get(st) != ref_rows.get(st)]
    calls = classify_calls([request_key(b) for b in stub.requests[after:]], killed_keys, stored,
                           stored if visible is None else visible)
    workers = ["main"] if root.s3 is None else ["main", "retry"]
    return TaskKill(kind, label(stage, shard), mode, seed, hit, retry_rc, finish_ok, not diff, calls,
                    root.temp_left(run_id, workers), procs, diff)


def matrix(work: str, points: list[tuple] | None = None, latency_s: float = 0.3, upto: str = STAGES[-1],
           log=print) -> list[TaskKill]:
    """Run the kills of ``points`` (default :data:`POINTS`; ``(root kind, stage, shard, mode,
    seed)``) under the scratch folder ``work``, runs stopping after stage ``upto``. Starts the
    stub (``latency_s`` per answer) and, when a point needs it, moto's S3 server. Returns one
    :class:`TaskKill` per point."""
    points = points or POINTS
    quiet = {"TQDM_DISABLE": "1", **{k: v for k, v in run_env().items() if k not in os.environ}}
    results = []
    with SchemaStub(latency_s) as stub, environ(quiet), contextlib.ExitStack() as stack:
        config = write_config(os.path.join(work, "taskkill.yaml"), stub.base_url)
        local = Root(work)
        ref = reference(local, config, stub, {(p[1], p[2]) for p in points if p[3] == "time"}, upto)
        ref_rows = local.read("reference")
        roots = {"local": local}
        if any(p[0] == "s3" for p in points):
            sys.path.insert(0, REPO)
            from bench.s3_server import S3Server
            roots["s3"] = Root(work, stack.enter_context(S3Server()))
        for p in points:
            results.append(kill_one(roots[p[0]], p[0], config, stub, p, ref, ref_rows, upto, latency_s))
            r = results[-1]
            log(f"kill {r.root} {r.task}/{r.mode}/{r.seed}: hit={r.hit} ok={r.ok} {r.diff or ''}")
    return results


def table(results: list[TaskKill]) -> str:
    """The matrix as a Markdown table, one row per kill."""
    head = ["root", "task killed", "mode", "seed", "hit", "retry rc", "rest of run", "rows identical (all stages)",
            "repeated calls", "in flight at kill (asked again)", "uncheckpointed (asked again)", "new calls",
            "temp left", "processes left", "outcome"]
    return md_table(head, [[r.root, r.task, r.mode, r.seed, r.hit, r.retry_rc, "ok" if r.finish_ok else "FAILED",
                            "yes" if r.identical else "NO: " + ", ".join(r.diff), r.calls.repeated,
                            f"{r.calls.in_flight_at_kill} ({r.calls.in_flight})", r.calls.uncheckpointed,
                            r.calls.new, r.temp_left, r.procs_left,
                            {"task done": "missed", "before task": "early"}.get(r.hit, "ok") if r.ok else "FAIL"]
                           for r in results])


def airflow_env(work: str) -> dict[str, str]:
    """The environment of an ``airflow`` command with its own home (SQLite metadata DB) under ``work``."""
    return {**run_env(), "AIRFLOW_HOME": os.path.join(work, "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(REPO, "dags"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False", "PYTHONPATH": REPO}


def dag_kill(work: str, seed: int = 0, latency_s: float = 0.3, timeout_s: float = 1200) -> TaskKill:
    """kill -9 of a whole ``airflow dags test skillpipe`` run (3 shards, local root, the stub as
    LLM, no training) once the stub has received a seeded n-th of the run's LLM requests, then
    the same command again (same ``run_id`` param: complete artifacts are reused), checked like a
    task kill against an unkilled reference run. Minutes: an Airflow DB is created first."""
    from pipeline.llm.cache import CACHE_FILE
    from bench.reliability_common import run_state
    airflow, env = os.path.join(os.path.dirname(sys.executable), "airflow"), airflow_env(work)
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
    quiet = {"TQDM_DISABLE": "1", **{k: v for k, v in run_env().items() if k not in os.environ}}
    with SchemaStub(latency_s) as stub, environ(quiet):
        config, local = write_config(os.path.join(work, "dag.yaml"), stub.base_url), Root(work)
        ref = reference(local, config, stub, set(), STAGES[-1])
        ref_rows = local.read("reference")
        conf = json.dumps({"input_path": SAMPLES, "root": local.uri, "run_id": "dagkill", "config": config,
                           "llm_base_url": stub.base_url, "llm_model": "stub-model", "shards": SHARDS, "train": False})
        cmd, log_path = [airflow, "dags", "test", "skillpipe", "-c", conf], os.path.join(work, "dag.log")
        before = len(stub.requests)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, env=env, cwd=REPO, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
        n_llm = sum(v[0] for v in ref.values())
        landed = wait_for_moment(proc, stub, "request", random.Random(f"dag-{seed}"), (n_llm, 0.0), "", "", latency_s)
        procs = kill_group(proc) if landed else 0
        wait_exit(proc, "airflow dags test", DAG_TIMEOUT_S)
        run_dir = local.run_dir("main", "dagkill")
        hit = run_state(local.uri, "dagkill").first_missing() or "task done"
        stored = cache_keys(os.path.join(run_dir, CACHE_FILE))
        killed_keys = [request_key(b) for b in stub.requests[before:]]
        after = len(stub.requests)
        with open(log_path, "ab") as log:
            rc = subprocess.run(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s).returncode
        got = local.read("dagkill")
        diff = [st for st in STAGES if got.get(st) != ref_rows.get(st)]
        calls = classify_calls([request_key(b) for b in stub.requests[after:]], killed_keys, stored, stored)
    return TaskKill("local", "airflow dags test (whole run)", "request", seed, hit, rc, rc == 0, not diff, calls,
                    local.temp_left("dagkill", ["main"]), procs, diff)

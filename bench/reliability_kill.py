"""Section 1 of the reliability suite: the kill -9 matrix.

A reference ``skillpipe run`` of every stage on ``data/samples`` (schema stub as the LLM) gives
each stage's content hash and how long it runs. Then, for each stage and seed, a fresh run is
started in a subprocess (its own process group) and sent SIGKILL while that stage runs:

* ``mode="time"``: once the previous stage's artifact is complete (for parse: once the process
  started, so imports count), after a seeded random fraction (0-90 %) of the stage's duration
  in the reference run;
* ``mode="write"``: the moment the stage's temporary folder ``.<stage>.tmp-*`` appears (the
  writer's transaction).

The stage actually hit is read back from the run folder (the first stage without a complete
artifact), not assumed. Then a plain rerun of the same command, and the checks: the rerun exits
0, every stage's content hash equals the reference, no temporary folder is left, no process of
the killed group survives, counts reconcile (units in = out + quarantined), and the LLM calls of
both runs together exceed the reference's by the number reported (``extra calls``).

The rerun's requests are classified (:func:`bench.reliability_common.classify_calls`) from the
stub's log and the run's LLM cache (SQLite) read right after the kill: *repeated* (the answer
was in the cache at the kill: must be 0), *in flight* (sent by the killed run, its answer not
stored: unavoidable) and new. The cache key of a logged request is derived as the client derives
it (:func:`bench.reliability_common.request_key`); the reference run checks that derivation
(every request it sent must have its key in its cache).
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass

from bench.reliability_common import (STAGES, CallClasses, cache_keys, classify_calls, cli_args, md_table,
                                      request_key, run_cli, run_env, run_state, write_config, REPO)
from bench.reliability_stub import SchemaStub
from pipeline.core import layout
from pipeline.core.waits import wait_exit

POLL_S = 0.002


@dataclass
class KillResult:
    """One row of the matrix."""
    target: str
    mode: str
    seed: int
    hit: str            # stage without a complete artifact at the kill ("" = the run had finished)
    temp_at_kill: int   # temporary folders present right after the kill
    rerun_rc: int
    identical: bool
    extra_calls: int
    calls: CallClasses  # the rerun's requests by what the killed run had stored
    temp_left: int
    procs_left: int
    reconciled: bool

    @property
    def landed(self) -> bool:
        """The kill hit a running pipeline (not a run that had already finished)."""
        return bool(self.hit)

    @property
    def ok(self) -> bool:
        """Every check passed."""
        return (self.rerun_rc == 0 and self.identical and self.temp_left == 0 and self.procs_left == 0
                and self.reconciled and self.calls.repeated == 0)


def complete(run_dir: str, stage: str) -> bool:
    """Whether ``stage`` of the run folder ``run_dir`` has a complete artifact (its manifest)."""
    return os.path.exists(os.path.join(run_dir, stage, layout.ARTIFACT_MANIFEST))


def windows(root: str, run_id: str, config: str,
            upto: str = STAGES[-1]) -> tuple[dict[str, tuple[float, float]], float]:
    """Run the pipeline once, polling the run folder; returns per stage ``(start, end)`` seconds
    after the process started (start = the previous stage complete; parse starts at 0) and the
    total wall time. ``upto``: the last stage run."""
    run_dir = layout.run_dir(root, run_id)
    t0 = time.monotonic()
    with open(os.path.join(root, f"{run_id}.log"), "wb") as log:
        proc = subprocess.Popen(cli_args(root, run_id, config, stages=upto_stages(upto)), env=run_env(), cwd=REPO,
                                stdout=log,
                                stderr=subprocess.STDOUT)
    done: dict[str, float] = {}
    while proc.poll() is None:
        for s in STAGES:
            if s not in done and complete(run_dir, s):
                done[s] = time.monotonic() - t0
        time.sleep(0.01)
    end = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"reference run failed with rc {proc.returncode}")
    out, start = {}, 0.0
    for s in STAGES[:STAGES.index(upto) + 1]:
        out[s] = (start, done.get(s, end))
        start = done.get(s, end)
    return out, end


def upto_stages(upto: str) -> str:
    """The ``--stages`` value of a run that stops after ``upto``."""
    return ",".join(STAGES[:STAGES.index(upto) + 1])


def kill_group(proc: subprocess.Popen) -> int:
    """SIGKILL the process group of ``proc``, reap it; returns how many of its processes were
    still alive 2 s later (0 expected)."""
    os.killpg(proc.pid, signal.SIGKILL)
    wait_exit(proc, "killed skillpipe run", 30.0, killed=True)
    time.sleep(2.0)
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return 0
    return int(subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True,
                              timeout=30).stdout.count("\n"))


def kill_once(root: str, run_id: str, config: str, target: str, mode: str, delay_s: float,
              upto: str = STAGES[-1]) -> tuple[str, int, int, float]:
    """Start a run and SIGKILL it per ``mode`` ("time": ``delay_s`` after the stage before
    ``target`` is complete, or after the start for the first stage); returns (stage hit, temp
    folders at the kill, processes left, ``time.monotonic()`` of the kill)."""
    run_dir = layout.run_dir(root, run_id)
    prev = STAGES[STAGES.index(target) - 1] if STAGES.index(target) else ""
    with open(os.path.join(root, f"{run_id}.killed.log"), "wb") as log:
        proc = subprocess.Popen(cli_args(root, run_id, config, stages=upto_stages(upto)), env=run_env(), cwd=REPO,
                                start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    prefix, started = f".{target}.tmp-", None if prev else time.monotonic()
    while proc.poll() is None:
        if mode == "time" and started is None and complete(run_dir, prev):
            started = time.monotonic()
        if mode == "time" and started is not None and time.monotonic() - started >= delay_s:
            break
        if mode == "write" and os.path.isdir(run_dir) and any(f.startswith(prefix) for f in os.listdir(run_dir)):
            break
        time.sleep(POLL_S)
    if proc.poll() is not None:
        return "", 0, 0, time.monotonic()
    killed_at = time.monotonic()
    procs_left = kill_group(proc)
    state = run_state(root, run_id)
    return state.first_missing(), len(state.temp_left), procs_left, killed_at


def check_keys(bodies: list[dict], cache_path: str) -> None:
    """Raise ``RuntimeError`` unless every request body of an uninterrupted run maps
    (:func:`request_key`) to a key of that run's cache at ``cache_path``: without that, the
    repeated/in-flight split would be meaningless."""
    keys = cache_keys(cache_path)
    missing = sum(request_key(b) not in keys for b in bodies)
    if missing:
        raise RuntimeError(f"{missing} of {len(bodies)} requests of the reference run have no cache entry "
                           "under the derived key: request_key no longer matches the client's cache_key")


def matrix(work: str, seeds: int = 2, stages: tuple[str, ...] = STAGES, modes: tuple[str, ...] = ("time", "write"),
           latency_s: float = 0.05, log=print, points: list[tuple[str, str, int]] | None = None) -> list[KillResult]:
    """Run the matrix under ``work`` (a scratch folder); ``seeds`` random moments per stage for
    mode "time", one kill per stage for mode "write"; ``stages``: the target stages (the runs
    stop after the last of them); ``points``: explicit ``(stage, mode, seed)`` kills instead.
    Returns one :class:`KillResult` per kill."""
    from pipeline.llm.cache import CACHE_FILE
    points = points or [(t, m, seed) for t in stages for m in modes for seed in range(seeds if m == "time" else 1)]
    upto = max((p[0] for p in points), key=STAGES.index)
    results = []
    with SchemaStub(latency_s) as stub:
        config = write_config(os.path.join(work, "kill.yaml"), stub.base_url)
        win, _ = windows(work, "reference", config, upto)
        ref = run_state(work, "reference")
        ref_calls = len(stub.requests)
        check_keys(stub.requests, os.path.join(layout.run_dir(work, "reference"), CACHE_FILE))
        for target, mode, seed in points:
            lo, hi = win[target]
            at = random.Random(f"{target}-{seed}").uniform(0.0, 0.9) * (hi - lo)
            run_id = f"kill-{target}-{mode}-{seed}"
            before = len(stub.requests)
            hit, temp_at, procs, _ = kill_once(work, run_id, config, target, mode, at, upto)
            stored = cache_keys(os.path.join(layout.run_dir(work, run_id), CACHE_FILE))  # snapshot before the rerun
            rerun_from = len(stub.requests)
            rerun = run_cli(cli_args(work, run_id, config, stages=upto_stages(upto)),
                            log_path=os.path.join(work, f"{run_id}.log"))
            state = run_state(work, run_id)
            calls = classify_calls([request_key(b) for b in stub.requests[rerun_from:]],
                                   [request_key(b) for b in stub.requests[before:rerun_from]], stored, stored)
            results.append(KillResult(target, mode, seed, hit, temp_at, rerun.returncode,
                                      state.hashes == ref.hashes, len(stub.requests) - before - ref_calls,
                                      calls, len(state.temp_left), procs, state.reconciled()))
            log(f"kill {target}/{mode}/{seed}: hit={hit or 'finished'} ok={results[-1].ok}")
    return results


def table(results: list[KillResult]) -> str:
    """The matrix as a Markdown table, one row per kill."""
    head = ["target stage", "mode", "seed", "stage hit", "temp at kill", "rerun rc", "identical to reference",
            "extra LLM calls", "repeated calls", "in flight at kill (asked again)", "temp left",
            "processes left", "reconciled", "outcome"]
    return md_table(head, [[r.target, r.mode, r.seed, r.hit or "(run had finished)", r.temp_at_kill, r.rerun_rc,
                            "yes" if r.identical else "NO", r.extra_calls, r.calls.repeated,
                            f"{r.calls.in_flight_at_kill} ({r.calls.in_flight})", r.temp_left, r.procs_left,
                            "yes" if r.reconciled else "NO",
                            ("ok" if r.landed else "missed") if r.ok else "FAIL"] for r in results])

"""Scale benchmark: does the pipeline scale with Celery workers, and what does one shard cost?

(a) **1 vs 2 Celery workers.** A real CeleryExecutor deployment on loopback (bench/cluster.py:
    PostgreSQL, Redis, api-server, scheduler, dag-processor, workers with 1 task slot each) runs
    the skillpipe DAG on a synthetic SkillRL rollout tree (tests/fixtures/tools/
    make_skillrl_rollouts.py) cut into ``--shards`` shards, against the schema stub
    (bench/reliability_stub.py) answering every call after ``--latency`` seconds, with
    ``llm.concurrency = 1``: each task waits on the endpoint, so the worker slots are the
    bottleneck, not the CPU. The same DAG runs with 1 worker, then (a second worker started)
    with 2, each into its own root. LLM-stage throughput = LLM calls of the mapped ``memory`` and
    ``distill`` tasks / the sum, over those two stages, of the time from the stage's first shard
    task's start to its last one's end (task instance times in the metadata DB; the serial tasks
    between them, collect and skills, do not count). Printed: ``ratio_2_vs_1_workers`` (target >= 1.8).

(b) **Per-shard cost.** ``skillpipe run`` (one process) on the same tree with the stub at zero
    latency, stage by stage; from the stage manifests: wall time, rows in/out, bytes written and
    LLM calls per shard for parse/remove_loops/memory/distill, and the characters of the prompts
    the stages sent (the stub's tokens are not real: prompt tokens are estimated at
    ``CHARS_PER_TOKEN`` characters per token; completion tokens are bounded by each request's
    ``max_tokens``). docs/scaling.md turns these into the sizing table.

Run: ``.venv/bin/python bench/scale.py`` (about 19 min on 2 cores, 13 with ``--latency 2``;
``--skip-celery`` for (b) only).
The last line is ``ratio_2_vs_1_workers=<x>``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.reliability_stub import SchemaStub  # noqa: E402
from pipeline.quality import QUALITY_RULES  # noqa: E402
from pipeline.core.layout import run_dir, stage_manifest_path  # noqa: E402
from pipeline.core.waits import run_bounded  # noqa: E402
from bench.cluster import Cluster  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKILLPIPE = os.path.join(os.path.dirname(sys.executable), "skillpipe")
GENERATOR = os.path.join(REPO, "tests", "fixtures", "tools", "make_skillrl_rollouts.py")
MAP_STAGES = ("parse", "remove_loops", "verify", "memory", "distill")
LLM_STAGES = ("memory", "distill")
STAGE_TIMEOUT_S = 4 * 3600.0  # one stage of the largest tree this bench makes, on the stub
#: English text averages about 4 characters per BPE token (OpenAI's rule of thumb for its tokenizers)
CHARS_PER_TOKEN = 4.0


def make_input(out: str, envs: int, tests: int, seed: int) -> str:
    """Write a synthetic SkillRL rollout tree of ``envs`` x ``tests`` trajectories to ``out``."""
    subprocess.run([sys.executable, GENERATOR, out, "--envs", str(envs), "--tests", str(tests),
                    "--seed", str(seed)], check=True, capture_output=True, timeout=3600)
    return out


def write_config(path: str, base_url: str) -> str:
    """Run config: the stub as LLM (json_schema), one request at a time per task, content rules
    only counted (the stub's answers are valid in form, not in content)."""
    import yaml
    cfg = {"llm": {"base_url": base_url, "model": "stub-model", "structured_output": "json_schema",
                   "concurrency": 1},
           "quality": {"off_topic_threshold": -1, "flag_rules": list(QUALITY_RULES)}}
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(cfg, f)
    return path


def _manifest(root: str, run_id: str, stage: str) -> dict:
    with open(stage_manifest_path(root, run_id, stage), encoding="utf-8") as f:
        return json.load(f)


def _bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)


def shard_costs(work: str, tree: str, shards: int) -> dict:
    """(b): per stage, totals and per-shard means of wall_s, rows_in/out, bytes, llm calls,
    prompt characters and max_tokens bounds, from a stage-by-stage CLI run of ``tree``."""
    root, out = os.path.join(work, "cost"), {}
    with SchemaStub() as stub:
        config = write_config(os.path.join(work, "cost.yaml"), stub.base_url)
        plan = ["parse", "remove_loops", "verify", "split", "memory", "skills", "distill", "build_pairs", "export"]
        for stage in plan:
            before = len(stub.requests)
            cmd = [SKILLPIPE, "run", "--root", root, "--run-id", "cost", "-c", config, "--input", tree,
                   "--shards", str(shards), "--stages", stage]
            t0 = time.perf_counter()
            res = run_bounded(cmd, STAGE_TIMEOUT_S, f"skillpipe run --stages {stage}", capture_output=True, text=True, cwd=REPO)
            if res.returncode:
                raise SystemExit(f"skillpipe run --stages {stage} failed:\n{res.stderr[-3000:]}")
            if stage not in MAP_STAGES:
                continue
            reqs = stub.requests[before:]
            m = _manifest(root, "cost", stage)
            n = max(1, len(m.get("shards") or [None]))
            out[stage] = {
                "shards": n, "process_s": round(time.perf_counter() - t0, 2), "wall_s": m.get("wall_s"),
                "rows_in": m["counts"]["in"], "rows_out": m["counts"]["out"],
                "quarantined": m["counts"]["quarantined"],
                "bytes": _bytes(os.path.join(run_dir(root, "cost"), stage)),
                "llm_calls": (m.get("llm") or {}).get("calls", 0),
                "prompt_chars": sum(len(json.dumps(r.get("messages"))) for r in reqs),
                "max_tokens_sum": sum(int(r.get("max_tokens") or 0) for r in reqs),
            }
            out[stage]["per_shard"] = {k: round(out[stage][k] / n, 3) for k in
                                       ("wall_s", "rows_in", "bytes", "llm_calls", "prompt_chars")}
    return out


def _spans(cluster: Cluster, run_id: str) -> dict[str, float]:
    """Per LLM stage: seconds from the first start to the last end of its mapped shard tasks.
    Stage by stage, so the serial tasks between them (collect, skills) do not count."""
    out = {}
    for stage in LLM_STAGES:
        start, end = cluster.query("SELECT min(start_date), max(end_date) FROM task_instance WHERE dag_id = "
                                   "'skillpipe' AND run_id = %s AND task_id = %s AND map_index >= 0",
                                   (run_id, stage))[0]
        out[stage] = round((end - start).total_seconds(), 1)
    return out


def timed_run(cluster: Cluster, work: str, tree: str, config: str, base_url: str, shards: int,
              tag: str) -> dict:
    """Trigger the DAG (stop after export) into a fresh root; LLM calls and span of its LLM stages."""
    root = os.path.join(work, f"root-{tag}")
    os.makedirs(root)
    conf = {"input_path": tree, "root": root, "run_id": tag, "config": config, "llm_base_url": base_url,
            "llm_model": "stub-model", "train": False, "shards": shards}
    t0 = time.monotonic()
    cluster.trigger("skillpipe", tag, conf)
    cluster.wait_run("skillpipe", tag, timeout_s=1800)
    spans = _spans(cluster, tag)
    calls = {s: (_manifest(root, tag, s).get("llm") or {}).get("calls", 0) for s in LLM_STAGES}
    return {"dag_run_s": round(time.monotonic() - t0, 1), "stage_span_s": spans, "llm_calls": calls,
            "calls_per_s": round(sum(calls.values()) / sum(spans.values()), 3)}


def celery_ratio(work: str, tree: str, shards: int, latency: float) -> dict:
    """(a): the same DAG run with 1 worker, then 2 (one cluster, a worker added between)."""
    with SchemaStub(latency_s=latency) as stub:
        config = write_config(os.path.join(work, "celery.yaml"), stub.base_url)
        cluster = Cluster(os.path.join(work, "cluster"), workers=1, concurrency=1)
        t0 = time.monotonic()
        try:
            cluster.start()
            started = time.monotonic() - t0
            one = timed_run(cluster, work, tree, config, stub.base_url, shards, "w1")
            cluster.start_worker(1)
            two = timed_run(cluster, work, tree, config, stub.base_url, shards, "w2")
        finally:
            stray = cluster.stop()
        left = cluster.remaining()
    return {"cluster_start_s": round(started, 1), "one_worker": one, "two_workers": two,
            "stray_at_stop": len(stray), "left_running": len(left),
            "ratio": round(two["calls_per_s"] / one["calls_per_s"], 3)}


def sizing(costs: dict, a: argparse.Namespace) -> list[str]:
    """Markdown table lines: ``a.target`` trajectories on ``a.workers`` workers, from the measured
    per-trajectory costs (rows_in of parse = trajectories). Assumptions are the arguments: CPU
    time scales linearly with trajectories; LLM calls per trajectory as measured; prompt tokens
    = prompt characters / CHARS_PER_TOKEN; ``a.completion_tokens`` per call; each task keeps
    ``a.task_concurrency`` requests in flight at ``a.endpoint_latency`` s each, capped by the
    endpoint's ``a.rpm`` requests per minute; prices in USD per 1M tokens."""
    n_in = costs["parse"]["rows_in"]
    scale = a.target / n_in
    rows = ["| stage | CPU s (1 worker) | wall on workers | storage | LLM calls | prompt tok | completion tok "
            "| cost USD |",
            "|---|---|---|---|---|---|---|---|"]
    total = {"cpu": 0.0, "wall": 0.0, "bytes": 0.0, "calls": 0.0, "pt": 0.0, "ct": 0.0, "usd": 0.0}
    rate = min(a.workers * a.task_concurrency / a.endpoint_latency, a.rpm / 60.0)  # calls per second
    for stage in MAP_STAGES:
        c = costs[stage]
        cpu = c["wall_s"] * scale
        calls = c["llm_calls"] * scale
        pt = c["prompt_chars"] / CHARS_PER_TOKEN * scale
        ct = calls * a.completion_tokens
        wall = max(cpu / a.workers, calls / rate if calls else 0.0)
        usd = pt / 1e6 * a.price_prompt + ct / 1e6 * a.price_completion
        for k, v in zip(total, (cpu, wall, c["bytes"] * scale, calls, pt, ct, usd)):
            total[k] += v
        rows.append(f"| {stage} | {cpu:,.0f} | {wall / 3600:,.2f} h | {c['bytes'] * scale / 1e9:,.1f} GB | "
                    f"{calls:,.0f} | {pt / 1e6:,.0f} M | {ct / 1e6:,.0f} M | {usd:,.0f} |")
    rows.append(f"| **total** | {total['cpu']:,.0f} | {total['wall'] / 3600:,.2f} h | {total['bytes'] / 1e9:,.1f} GB | "
                f"{total['calls']:,.0f} | {total['pt'] / 1e6:,.0f} M | {total['ct'] / 1e6:,.0f} M | "
                f"{total['usd']:,.0f} |")
    return rows


def main() -> None:
    """Command line: builds the input, prints (b) and the sizing table, then (a) and its ratio."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", type=int, default=24, help="environment instances in the synthetic tree")
    p.add_argument("--tests", type=int, default=2, help="rollouts per environment instance")
    p.add_argument("--shards", type=int, default=6)
    p.add_argument("--latency", type=float, default=4.0, help="seconds the stub waits before each answer")
    p.add_argument("--skip-celery", action="store_true", help="only (b), the per-shard cost")
    p.add_argument("--target", type=int, default=10_000_000, help="sizing: trajectories")
    p.add_argument("--workers", type=int, default=64, help="sizing: Celery worker slots")
    p.add_argument("--task-concurrency", type=int, default=8, help="sizing: llm.concurrency per task")
    p.add_argument("--endpoint-latency", type=float, default=4.0, help="sizing: seconds per LLM call")
    p.add_argument("--rpm", type=float, default=10_000, help="sizing: endpoint rate limit, requests/min")
    p.add_argument("--completion-tokens", type=int, default=300, help="sizing: completion tokens per call")
    p.add_argument("--price-prompt", type=float, default=0.20, help="sizing: USD per 1M prompt tokens")
    p.add_argument("--price-completion", type=float, default=0.80, help="sizing: USD per 1M completion tokens")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="skillpipe-scale-")
    try:
        tree = make_input(os.path.join(work, "traces"), a.envs, a.tests, seed=12)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=REPO, timeout=30).stdout.strip()
        print(f"# bench/scale.py at {commit}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
              f"{os.cpu_count()} CPUs; input {a.envs}x{a.tests} trajectories, {a.shards} shards", flush=True)
        costs = shard_costs(work, tree, a.shards)
        print("per_shard_cost " + json.dumps(costs, indent=1), flush=True)
        print(f"sizing: {a.target:,} trajectories, {a.workers} workers, llm.concurrency {a.task_concurrency}, "
              f"{a.endpoint_latency} s/call, <= {a.rpm:,.0f} req/min, {a.completion_tokens} completion tok/call, "
              f"USD {a.price_prompt}/{a.price_completion} per 1M prompt/completion tokens")
        print("\n".join(sizing(costs, a)), flush=True)
        if a.skip_celery:
            return
        res = celery_ratio(work, tree, a.shards, a.latency)
        print(f"celery (latency {a.latency} s, llm.concurrency 1, 1 slot per worker) " + json.dumps(res, indent=1))
        print(f"ratio_2_vs_1_workers={res['ratio']}")
        from bench.results import write_result  # the result file (bench/results.py)
        write_result("scale", {"ratio_2_vs_1_workers": res["ratio"], "celery": res, "per_shard_cost": costs}, vars(a))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

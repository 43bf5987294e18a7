"""LLM cost and throughput at production scale, against a loopback endpoint that counts like a
hosted one (``bench/stub_endpoint.py``: real 429s and ``x-ratelimit-*`` headers under an RPM/TPM
limit, cached prefix tokens billed as ``prompt_tokens_details.cached_tokens``, the Files + Batches
API).

**(a) Running at the rate limit.** ``--requests`` structured calls (a fixed ~1,000-character
instruction, then 1,000-5,000 characters of per-item text, ``max_tokens`` 256) through
``LLMClient`` at concurrency 16 against a stub in its own process that answers after 0.3 s and
enforces a TPM limit over 2-second windows (OpenAI: limits "may be quantized"). Twice: with
``llm.tpm`` set to the limit (the headline) and with no limit set, learned from the headers.
``tpm_ratio`` = tokens the stub admitted per minute (prompt + ``max_tokens``, as OpenAI counts)
from the first admitted call to the last / the limit (target >= 0.90); ``429_ratio`` = 429s /
calls (target <= 0.01).

**(b) Billed cost, new vs today.** The same synthetic 200-trajectory SkillRL tree
(``tests/fixtures/tools/make_skillrl_rollouts.py``, run as a script) through parse ... distill
with ``skillpipe run``, once online and once with ``--llm-mode batch``, each against a fresh stub
that bills cached prefix tokens (OpenAI's rule: prompts of 1,024+ tokens, 128-token blocks).
The prompts are the ones the stages build at the time, so a layout that puts more shared text
first shows here without a change to this script. Priced at ``--price-prompt`` /
``--price-cached`` / ``--price-completion`` USD per 1M tokens (gpt-4o-mini: 0.15 / 0.075 / 0.60)
and batch at x ``--batch-factor`` (0.5):

* today = every online call at list price (what the client paid before it read cached tokens);
* ``prefix_factor`` = the online calls billed with their cached tokens / today;
* ``batch_factor`` = the batch run's bill / the same calls billed online;
* ``cost_ratio`` = the batch run's bill / today (target <= 0.40 = 0.5 x prefix savings of 20 %).
It also checks that both runs wrote the same rows and that the client's manifests count the
cached tokens the stub billed.

**(c) The embedded server's program.** ``--calls`` (4) memory requests of the shipped sample
(parse .. verify first, no LLM), sent through the stage's client (concurrency 2, no cache, no
repairs) to the embedded model served by llama-cpp-python's Python server, then by llama.cpp's
``llama-server`` (``pipeline.llm.server.engine``; the build :func:`pipeline.llm.server.llama_server_variant`
picks, printed as ``build``). ``server_ratio`` = calls per minute with
llama-server / with the Python server (target >= 2.0). Needs ``make install``'s llama-server.

Run: ``.venv/bin/python bench/llm_cost.py`` (about 2 minutes; ``--parts a`` or ``b`` for one;
``--parts c`` about 10 minutes). The last line holds the ratios.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.reliability_common import write_config  # noqa: E402
from bench.stub_endpoint import StubEndpoint, serve_child  # noqa: E402
from pipeline.core.waits import run_bounded  # noqa: E402
from pipeline.core.config import LLMConfig  # noqa: E402
from pipeline.core.layout import run_dir, stage_manifest_path  # noqa: E402
from pipeline.engine.remote import read_table  # noqa: E402
from pipeline.llm.client import LLMClient  # noqa: E402
from pipeline.llm.types import JSONRequest  # noqa: E402
from pipeline.stages import STAGES  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR = os.path.join(REPO, "tests", "fixtures", "tools", "make_skillrl_rollouts.py")
LLM_STAGES = ("memory", "skills", "distill")
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["summary", "steps"],
          "properties": {"summary": {"type": "string", "maxLength": 200},
                         "steps": {"type": "array", "minItems": 2, "maxItems": 4,
                                   "items": {"type": "string", "maxLength": 80}}}}
WORDS = ("go to the cabinet then take the mug from the shelf and heat it in the microwave before you put it "
         "on the countertop near the sink while the fridge stays closed").split()


# ---- (a) ------------------------------------------------------------------------------------
def throughput_requests(n: int, seed: int) -> list[JSONRequest]:
    """``n`` calls: one shared instruction, then per-item text of 1,000-5,000 characters."""
    rng = random.Random(seed)
    system = "You summarise agent episodes as JSON. " + " ".join(WORDS) * 6
    out = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(200, 1000)))[: rng.randint(1000, 5000)]
        out.append(JSONRequest(f"q{seed}-{i}", [{"role": "system", "content": system},
                                                {"role": "user", "content": f"Episode {i}: {text}"}], SCHEMA))
    return out


def stub_stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/_stats") as r:
        return json.load(r)


def at_the_limit(url: str, tpm: int, n: int, configured: bool, seed: int) -> dict:
    """One run of part (a); the figures from the stub's admissions and the client's counters."""
    before = stub_stats(url)
    cfg = LLMConfig(base_url=url, model="stub-model", structured_output="json_schema", concurrency=16,
                    max_tokens=256, timeout_s=60.0, max_retries=8, tpm=tpm if configured else 0)
    client = LLMClient(cfg)
    t0 = time.monotonic()
    results = client.complete_json_many(throughput_requests(n, seed), desc="bench")
    wall = time.monotonic() - t0
    after = stub_stats(url)
    admitted = after["admitted"][len(before["admitted"]):]
    span = admitted[-1][0] - admitted[0][0]
    tokens = sum(c for _, c in admitted[1:])  # the first call opens the span, each later one lies in it
    steady = [c for t, c in admitted if t >= admitted[0][0] + 0.25 * span]
    stats = client.stats_snapshot()
    return {"limited": "llm.tpm set" if configured else "learned from headers", "calls": stats["calls"],
            "ok": sum(r.ok for r in results), "wall_s": round(wall, 1),
            "tpm_achieved": round(tokens / span * 60), "tpm_ratio": round(tokens / span * 60 / tpm, 3),
            "steady_tpm_ratio": round(sum(steady) / (0.75 * span) * 60 / tpm, 3),
            "rate_limited": after["rate_limited"] - before["rate_limited"],
            "ratio_429": round((after["rate_limited"] - before["rate_limited"]) / stats["calls"], 4),
            "limit_wait_s": round(stats["limit_wait_s"], 1)}


def part_a(a) -> dict:
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=serve_child, daemon=True, args=(
        {"latency_s": 0.3, "tpm": a.tpm, "burst_s": 2.0}, child))
    proc.start()
    try:
        url = parent.recv()
        runs = [at_the_limit(url, a.tpm, a.requests, True, 1), at_the_limit(url, a.tpm, a.requests, False, 2)]
    finally:
        parent.send("stop")
        proc.join(10)
    for r in runs:
        print("(a)", json.dumps(r))
    return runs[0]


# ---- (b) ------------------------------------------------------------------------------------
def cli_run(root: str, run_id: str, config: str, tree: str, mode: str) -> None:
    args = [sys.executable, "-m", "pipeline.cli", "run", "--root", root, "--run-id", run_id, "-c", config,
            "--input", tree, "--llm-mode", mode, "--stages", ",".join(STAGES[:STAGES.index("distill") + 1])]
    env = dict(os.environ, PYTHONPATH=REPO, TQDM_MININTERVAL="30")
    res = run_bounded(args, 3600, f"skillpipe run ({mode})", env=env, capture_output=True, text=True, cwd=REPO)
    if res.returncode != 0:
        raise SystemExit(f"skillpipe run ({mode}) failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")


def bill(bills: list[dict], a, cached_price: bool = True, factor: float = 1.0) -> float:
    """USD of ``bills`` (the stub's per-call records)."""
    usd = 0.0
    for b in bills:
        cached = b["cached"] if cached_price else 0
        usd += ((b["prompt"] - cached) * a.price_prompt + cached * a.price_cached
                + b["completion"] * a.price_completion) / 1e6
    return usd * factor


def run_rows(root: str, run_id: str) -> dict[str, list]:
    """The ids of each LLM stage's rows, to compare two runs."""
    key = {"memory": "memory_id", "skills": "skill_id", "distill": "trajectory_id"}
    return {s: sorted(r[key[s]] for r in read_table(os.path.join(run_dir(root, run_id), s)).to_pylist())
            for s in LLM_STAGES}


def manifest_llm(root: str, run_id: str) -> dict[str, dict]:
    out = {}
    for s in LLM_STAGES:
        with open(stage_manifest_path(root, run_id, s), encoding="utf-8") as f:
            out[s] = json.load(f).get("llm") or {}
    return out


def part_b(a) -> dict:
    with tempfile.TemporaryDirectory() as work:
        tree = os.path.join(work, "traces")
        run_bounded([sys.executable, GENERATOR, tree, "--envs", str(a.envs), "--tests", "2", "--seed", "7"], 600,
                    "the rollout tree generator", check=True, capture_output=True)
        bills, llm = {}, {}
        for mode in ("online", "batch"):
            with StubEndpoint(prefix_cache=True) as stub:
                cfg = write_config(os.path.join(work, f"{mode}.yaml"), stub.base_url,
                                   llm={"api_key_env": "", "concurrency": 8, "batch_poll_s": 0.2,
                                        "stable_schema": a.stable_schema},
                                   quality={"off_topic_threshold": -1})
                cli_run(work, mode, cfg, tree, mode)
                bills[mode] = [b for b in stub.bills]
            llm[mode] = manifest_llm(work, mode)
        same_rows = run_rows(work, "online") == run_rows(work, "batch")
    today = bill(bills["online"], a, cached_price=False)
    online_cached = bill(bills["online"], a)
    new = bill(bills["batch"], a, factor=a.batch_factor)
    counted = sum(m.get("cached_prompt_tokens", 0) for m in llm["batch"].values())
    out = {"calls_online": len(bills["online"]), "calls_batch": len(bills["batch"]),
           "prompt_tokens": sum(b["prompt"] for b in bills["online"]),
           "cached_tokens_online": sum(b["cached"] for b in bills["online"]),
           "cached_tokens_batch": sum(b["cached"] for b in bills["batch"]),
           "cached_tokens_in_manifests": counted, "same_rows": same_rows,
           "usd_today": round(today, 6), "usd_online_with_cache": round(online_cached, 6), "usd_new": round(new, 6),
           "prefix_factor": round(online_cached / today, 3),
           "batch_factor": round(new / bill(bills["batch"], a), 3), "cost_ratio": round(new / today, 3)}
    print("(b)", json.dumps(out))
    return out


# ---- (c) ------------------------------------------------------------------------------------
def sample_trajectories(work: str) -> list:
    """The shipped sample's verified trajectories (parse .. verify, no LLM), in stage order."""
    from pipeline.core.records import Trajectory
    args = [sys.executable, "-m", "pipeline.cli", "run", "--root", work, "--run-id", "c", "--input",
            os.path.join(REPO, "data", "samples"), "--stages", "parse,remove_loops,verify"]
    run_bounded(args, 600, "skillpipe run (parse..verify)", env=dict(os.environ, PYTHONPATH=REPO),
                capture_output=True, cwd=REPO, check=True)
    return [Trajectory.from_row(r) for r in read_table(os.path.join(run_dir(work, "c"), "verify")).to_pylist()]


def engine_run(program: str, trajs: list, model: str, work: str) -> dict:
    """The memory requests of ``trajs`` through the stage's client against the embedded server
    run by ``program`` (no cache, no repairs: every request is sent once)."""
    from pipeline.core.config import PipelineConfig
    from pipeline.llm import server
    from pipeline.stages.memory import build_request
    os.environ[server.ENGINE_ENV] = program
    cfg = PipelineConfig()
    reqs = [build_request(t, cfg.memory, cfg.quality) for t in trajs]
    with server.EmbeddedServer(os.path.join(work, program), model=model) as url:
        client = LLMClient(LLMConfig(base_url=url, model=server.embedded_alias(model), api_key_env="",
                                     max_repairs=0, max_retries=0, timeout_s=3600), cache_path=None)
        t0 = time.monotonic()
        res = client.complete_json_many(reqs, desc=program)
        wall = time.monotonic() - t0
    s = client.stats_snapshot()
    build = server.llama_server_variant() if program == "llama-server" else "python"
    return {"engine": program, "build": build, "calls": len(reqs), "wall_s": round(wall, 1), "passed": sum(r.ok for r in res),
            "calls_per_min": round(len(reqs) / wall * 60, 3), "prompt_tokens": s["prompt_tokens"],
            "cached_prompt_tokens": s.get("cached_prompt_tokens", 0), "completion_tokens": s["completion_tokens"]}


def part_c(a) -> dict:
    from pipeline.llm import server
    if server.llama_server_path() is None:
        raise SystemExit("(c) needs llama-server in the virtual environment: run `make install`")
    with tempfile.TemporaryDirectory() as work:
        trajs = sample_trajectories(work)[:a.calls]
        runs = [engine_run(p, trajs, a.model, work) for p in ("llama-cpp-python", "llama-server")]
    for r in runs:
        print("(c)", json.dumps(r))
    return {"server_ratio": round(runs[1]["calls_per_min"] / runs[0]["calls_per_min"], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="a,b", help="comma-separated: a (rate limit), b (cost), c (embedded "
                    "server programs; ~10 minutes with the default teacher, so not in the default)")
    ap.add_argument("--no-stable-schema", dest="stable_schema", action="store_false",
                    help="(b) send each call's tight schema (llm.stable_schema off, the default of the pipeline)")
    ap.add_argument("--calls", type=int, default=4, help="(c) memory calls on the shipped sample per program")
    ap.add_argument("--model", default="", help="(c) embedded model alias ('' = the default teacher)")
    ap.add_argument("--requests", type=int, default=240, help="(a) calls per run")
    ap.add_argument("--tpm", type=int, default=360_000, help="(a) the stub's tokens-per-minute limit")
    ap.add_argument("--envs", type=int, default=100, help="(b) environments x 2 rollouts = trajectories")
    ap.add_argument("--price-prompt", type=float, default=LLMConfig.price_prompt)
    ap.add_argument("--price-cached", type=float, default=LLMConfig.price_cached)
    ap.add_argument("--price-completion", type=float, default=LLMConfig.price_completion)
    ap.add_argument("--batch-factor", type=float, default=LLMConfig.batch_price_factor)
    a = ap.parse_args()
    parts = a.parts.split(",")
    ratios, figures = [], {}
    if "a" in parts:
        r = figures["a"] = part_a(a)
        ratios += [f"tpm_ratio={r['tpm_ratio']}", f"429_ratio={r['ratio_429']}"]
    if "b" in parts:
        r = figures["b"] = part_b(a)
        ratios += [f"cost_ratio={r['cost_ratio']}", f"batch_factor={r['batch_factor']}",
                   f"prefix_factor={r['prefix_factor']}"]
    if "c" in parts:
        figures["c"] = part_c(a)
        ratios += [f"server_ratio={figures['c']['server_ratio']}"]
    print(" ".join(ratios))
    from bench.results import write_result  # the result file (bench/results.py)
    write_result("llm_cost", figures, {k: v for k, v in vars(a).items()})


if __name__ == "__main__":
    main()

"""Benchmark of the LLM client's concurrency and cache against the local stub.

200 structured requests, each answered by the stub (bench/chat_stub.py) after an injected latency
of 0.5 s, through ``LLMClient.complete_json_many`` with ``llm.concurrency = 16``. The stub runs in
its own process, as a real endpoint would (in-process, its threads would share the client's GIL):

* ``ratio_to_ideal`` = wall time / (requests x latency / concurrency); target <= 1.15. With 200
  requests in waves of 16 the floor is 13 waves / 12.5 = 1.04.
* speedup vs sequential: the same requests at concurrency 1, measured on ``--sequential-sample``
  of them (default 20) and scaled to all 200 (running 200 x 0.5 s = 100 s sequentially proves
  nothing more).
* a rerun on the same SQLite cache must send 0 requests.

Run: ``.venv/bin/python bench/llm_stage.py`` (about 20 s). The last line is ``ratio_to_ideal=<x>``.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.core.config import LLMConfig  # noqa: E402
from pipeline.llm.client import LLMClient  # noqa: E402
from pipeline.llm.types import JSONRequest  # noqa: E402
from bench.chat_stub import ChatStub  # noqa: E402

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["think"],
          "properties": {"think": {"type": "string", "minLength": 1, "maxLength": 80}}}


def requests(n: int, tag: str) -> list[JSONRequest]:
    return [JSONRequest(f"{tag}{i}", [{"role": "user", "content": f"Explain step {i} of run {tag}."}], SCHEMA)
            for i in range(n)]


def client(url: str, concurrency: int, cache: str | None) -> LLMClient:
    cfg = LLMConfig(base_url=url, model="stub-model", structured_output="json_object",
                    concurrency=concurrency, timeout_s=30.0)
    return LLMClient(cfg, cache_path=cache)


def timed(c: LLMClient, reqs: list[JSONRequest]) -> tuple[float, int]:
    t0 = time.perf_counter()
    results = c.complete_json_many(reqs, desc="bench")
    wall = time.perf_counter() - t0
    bad = [r for r in results if not r.ok]
    if bad:
        raise SystemExit(f"{len(bad)} requests failed, first: {bad[0].error} {bad[0].detail}")
    return wall, len(results)


def serve_stub(default: dict, conn) -> None:
    """Child process: a ChatStub answering every call with ``default``; sends its URL, then
    serves until the parent closes the pipe. A separate process, as a real endpoint would be:
    the stub's threads must not compete with the client for the GIL."""
    with ChatStub([], default=default) as stub:
        conn.send(stub.base_url)
        try:
            conn.recv()
        except EOFError:
            pass


def sent(url: str) -> int:
    with urllib.request.urlopen(url + "/_stats") as r:
        return json.load(r)["requests"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--sequential-sample", type=int, default=20)
    a = ap.parse_args()
    answer = {"sleep": a.latency, "content": '{"think": "the goal needs this object"}'}
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=serve_stub, args=(answer, child), daemon=True)
    proc.start()
    try:
        url = parent.recv()
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "llm_cache.sqlite")
            reqs = requests(a.requests, "c")
            wall, n = timed(client(url, a.concurrency, cache), reqs)
            n_sent = sent(url)

            seq_wall, seq_n = timed(client(url, 1, None), requests(a.sequential_sample, "s"))
            seq_est = seq_wall / seq_n * a.requests

            before = sent(url)
            rerun = client(url, a.concurrency, cache)
            rerun_wall, _ = timed(rerun, reqs)
            rerun_sent = sent(url) - before
            hits = rerun.stats_snapshot()["cache_hits"]
    finally:
        parent.send("stop")
        proc.join(10)
    ideal = a.requests * a.latency / a.concurrency
    print(f"requests={n} latency_s={a.latency} concurrency={a.concurrency} sent={n_sent}")
    print(f"wall_s={wall:.3f} ideal_s={ideal:.3f} floor_s={-(-a.requests // a.concurrency) * a.latency:.3f}")
    print(f"sequential_s={seq_est:.3f} (measured {seq_wall:.3f} s for {seq_n} requests, scaled to {a.requests})"
          f" speedup_vs_sequential={seq_est / wall:.2f}")
    print(f"rerun_requests={rerun_sent} rerun_cache_hits={hits} rerun_wall_s={rerun_wall:.3f}")
    print(f"ratio_to_ideal={wall / ideal:.3f}")
    from bench.results import write_result  # the result file (bench/results.py)
    write_result("llm_stage", {"ratio_to_ideal": round(wall / ideal, 3), "wall_s": round(wall, 3),
                               "speedup_vs_sequential": round(seq_est / wall, 2), "rerun_requests": rerun_sent},
                 {"requests": a.requests, "latency_s": a.latency, "concurrency": a.concurrency})


if __name__ == "__main__":
    main()

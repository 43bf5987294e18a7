"""LLM fault storm (issue 14, "The suite"): memory, aggregate and distill through a fault proxy.

A fault-injecting OpenAI-compatible proxy on loopback sits between the pipeline's LLM client and
an upstream model (default: the embedded SmolLM2 server, started here; ``--upstream URL`` for
another). For each fault rate (default 30 % and 60 % of calls), a fresh run of parse, remove_loops,
memory, aggregate and distill on ``data/samples`` goes through the proxy, which picks a fault
per call from a seeded generator:

==============  ===============================================================================
``http_500``    HTTP 500 with a JSON error body (retried)
``http_429``    HTTP 429 with ``Retry-After: 1`` (retried after 1 s)
``reset``       the socket is closed with an RST, no response (retried)
``non_json``    HTTP 200 with an HTML body (retried, issue 14 hole 4)
``slow``        the answer comes 1.5 s late (within the timeout: no effect on rows)
``garbage``     the model's answer replaced by prose (a repair round, then quarantine)
``fenced``      the answer wrapped in a Markdown code fence (extraction copes)
``truncated``   the answer cut in half, ``finish_reason: length`` (quarantined as ``length``)
==============  ===============================================================================

Upstream answers are memoised by request body, so a retried request costs the model once and
both fault rates see the same answers. The table reports per fault rate: calls the proxy saw
(and whether they equal the calls the client counted: "reconciled"), faults injected by kind,
transport retries, repair calls, quarantined items by reason, and rows lost (units in minus out
minus quarantined, summed over stages: must be 0). Not covered yet: skill evolution (GRPO), the
kill -9 matrix, the corrupt-input matrix and the path checks of the suite.

Run: ``.venv/bin/python bench/reliability.py [--rates 0.3,0.6] [--seed 0] [--trajectories 8]
[--save docs/reliability.md]``
(several minutes on 2 cores: the first rate pays the model's answers). The last line is
``rows_lost=<n> reconciled=<yes|no>``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import io
import json
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.core.artifacts import ArtifactStore  # noqa: E402
from pipeline.core.config import PipelineConfig  # noqa: E402
from pipeline.llm.client import LLMClient  # noqa: E402
from pipeline.llm.server import EMBEDDED_MODEL_ALIAS, EmbeddedServer, embedded_model_id  # noqa: E402
from pipeline.core.runner import CountMismatch, StageFailed, run_stage  # noqa: E402
from pipeline.core.stage import StageContext

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAULTS = ("http_500", "http_429", "reset", "non_json", "slow", "garbage", "fenced", "truncated")
STAGES = ("parse", "remove_loops", "split", "memory", "skills", "distill")
LLM_STAGES = ("memory", "skills", "distill")


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: "FaultProxy"

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, data: bytes, ctype: str = "application/json", headers=None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        with urllib.request.urlopen(self.server.upstream + self.path.removeprefix("/v1"), timeout=30) as r:
            self._send(r.status, r.read())

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        fault = self.server.draw()
        if fault == "http_500":
            return self._send(500, b'{"error": {"message": "injected 500"}}')
        if fault == "http_429":
            return self._send(429, b'{"error": {"message": "injected 429"}}', headers={"Retry-After": "1"})
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if fault == "non_json":
            return self._send(200, b"<html><body>502 Bad Gateway (injected)</body></html>", "text/html")
        if fault == "slow":
            time.sleep(1.5)
        answer = json.loads(self.server.answer(body))
        self._send(200, json.dumps(mangle(answer, fault)).encode("utf-8"))


def mangle(answer: dict, fault: str | None) -> dict:
    """The upstream chat completion with the answer-level fault applied (a copy)."""
    answer = json.loads(json.dumps(answer))
    choice = answer["choices"][0]
    text = choice["message"].get("content") or ""
    if fault == "garbage":
        choice["message"]["content"] = "Sure! I would be glad to help with that task."
    elif fault == "fenced":
        choice["message"]["content"] = f"Here it is:\n```json\n{text}\n```"
    elif fault == "truncated":
        choice["message"]["content"], choice["finish_reason"] = text[: len(text) // 2], "length"
    return answer


class FaultProxy(ThreadingHTTPServer):
    """The proxy: ``with FaultProxy(upstream, rate, seed, memo) as p: p.base_url``; ``p.log`` counts
    calls by fault (``"none"`` = passed through). ``kinds``: the faults drawn from (default all)."""
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, upstream: str, rate: float, seed: int, memo: dict[str, bytes], kinds: tuple[str, ...] = FAULTS):
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream, self.rate, self.memo, self.kinds = upstream.rstrip("/"), rate, memo, kinds
        self.rng, self.lock, self.log = random.Random(seed), threading.Lock(), Counter()
        self.key_locks: dict[str, threading.Lock] = {}
        self.base_url = f"http://127.0.0.1:{self.server_address[1]}/v1"

    def draw(self) -> str | None:
        with self.lock:
            fault = self.rng.choice(self.kinds) if self.rng.random() < self.rate else None
            self.log[fault or "none"] += 1
        return fault

    def answer(self, body: bytes) -> bytes:
        """The upstream's answer to ``body``, memoised (one model call per distinct request; a
        retry that arrives while the first call still runs waits for it)."""
        key = hashlib.sha256(body).hexdigest()
        with self.lock:
            key_lock = self.key_locks.setdefault(key, threading.Lock())
        with key_lock:
            if key not in self.memo:
                req = urllib.request.Request(self.upstream + "/chat/completions", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=1800) as r:
                    self.memo[key] = r.read()
        return self.memo[key]

    def handle_error(self, request, client_address) -> None:
        pass  # a client that gave up leaves a broken pipe behind: expected

    def __enter__(self) -> "FaultProxy":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


def storm(root: str, upstream: str, rate: float, seed: int, memo: dict, model_id: str, trajectories: int) -> dict:
    """One run of STAGES through a proxy at ``rate``; returns the figures of one table row."""
    cfg = PipelineConfig()
    cfg.parse.max_trajectories = trajectories
    # the upstream's own slowness is not a fault under test (the proxy injects "slow" itself): on a
    # loaded CPU a real model can take minutes per answer
    cfg.llm.timeout_s = 1800.0
    with FaultProxy(upstream, rate, seed, memo) as proxy:
        cfg.llm.base_url, cfg.llm.model = proxy.base_url, EMBEDDED_MODEL_ALIAS
        store = ArtifactStore(root, f"storm-{int(rate * 100)}")
        client = LLMClient(cfg.llm, cache_path=os.path.join(store.run_dir, "llm_cache.sqlite"), model_id=model_id,
                           backoff_initial_s=0.2, backoff_max_s=2.0)
        ctx = StageContext(store, cfg, input_path=os.path.join(REPO, "data", "samples"), llm_factory=lambda: client)
        failed, lost, quarantined = [], 0, Counter()
        for name in STAGES:
            try:
                m = run_stage(name, ctx, model_id=model_id, log=lambda s: None).manifest
            except (StageFailed, CountMismatch) as e:
                failed.append(f"{name}: {e}")
                break
            except Exception as e:  # a crash is a finding to report, not the end of the benchmark
                failed.append(f"{name}: CRASH {type(e).__name__}: {e}")
                break
            c = m["counts"]
            lost += c["units_in"] - c["units_out"] - c["quarantined"]
            if name in LLM_STAGES:
                quarantined.update(c["quarantine_reasons"])
        stats = client.stats_snapshot()
        log = dict(proxy.log)
    sent = sum(log.values())
    return {"rate": rate, "calls_proxy": sent, "calls_client": stats["calls"], "reconciled": sent == stats["calls"],
            "faults": {k: log.get(k, 0) for k in FAULTS}, "retries": stats["retries"], "repairs": stats["repairs"],
            "quarantined": dict(sorted(quarantined.items())), "rows_lost": lost, "failed": failed}


def table(rows: list[dict]) -> str:
    out = io.StringIO()
    head = ["fault rate", "calls (proxy = client)", "faults injected", "retried", "repair calls",
            "quarantined (reasons)", "rows lost", "stage failures"]
    out.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
    for r in rows:
        faults = ", ".join(f"{k}={v}" for k, v in r["faults"].items() if v)
        q = ", ".join(f"{k}={v}" for k, v in r["quarantined"].items()) or "0"
        out.write(f"| {r['rate']:.0%} | {r['calls_proxy']} = {r['calls_client']} "
                  f"({'reconciled' if r['reconciled'] else 'MISMATCH'}) | {sum(r['faults'].values())}: {faults} | "
                  f"{r['retries']} | {r['repairs']} | {sum(r['quarantined'].values())}: {q} | {r['rows_lost']} | "
                  f"{'; '.join(r['failed']) or 'none'} |\n")
    return out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="0.3,0.6", help="comma-separated fault rates")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--upstream", default="", help="OpenAI-compatible upstream (default: the embedded server)")
    ap.add_argument("--trajectories", type=int, default=8,
                    help="parse.max_trajectories: how many sample trajectories go through (0 = all 17)")
    ap.add_argument("--save", default="", help="also write the table to this Markdown file (docs/reliability.md)")
    a = ap.parse_args()
    rates = [float(r) for r in a.rates.split(",")]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="skillpipe-storm-") as tmp, contextlib.ExitStack() as stack:
        upstream = a.upstream or stack.enter_context(EmbeddedServer(log_dir=tmp, ctx_size=8192))
        model_id = embedded_model_id() if not a.upstream else "upstream"
        memo: dict[str, bytes] = {}
        rows = [storm(tmp, upstream, r, a.seed, memo, model_id, a.trajectories) for r in rates]
    text = table(rows)
    lost = sum(r["rows_lost"] for r in rows)
    reconciled = all(r["reconciled"] for r in rows)
    print(text, end="")
    print(f"wall_s={time.monotonic() - t0:.0f} seed={a.seed} upstream={a.upstream or 'embedded ' + model_id}")
    print(f"rows_lost={lost} reconciled={'yes' if reconciled else 'no'}")
    if a.save:
        save(a.save, text, a, rows, time.monotonic() - t0)


def save(path: str, text: str, a, rows: list[dict], wall: float) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with open(path, "w", encoding="utf-8") as f:
        f.write("# Reliability: LLM fault storm\n\n"
                f"Last run of `bench/reliability.py --rates {a.rates} --seed {a.seed} --trajectories "
                f"{a.trajectories}` on {now}, commit `{commit}`, "
                f"upstream {a.upstream or 'the embedded SmolLM2 server'}, {wall:.0f} s on the 2-core development "
                "machine. Stages parse, remove_loops, memory, aggregate and distill on `data/samples`; each call "
                "through the proxy is a fault with the given probability, the kind drawn uniformly from: "
                f"{', '.join(FAULTS)} (see the module docstring).\n\n{text}\n"
                "Rows lost = units in - units out - quarantined, summed over the stages (the runner refuses "
                "to write a stage where it is not 0). Calls reconcile when the proxy's count of requests "
                "equals the client's `calls` counter.\n")


if __name__ == "__main__":
    main()

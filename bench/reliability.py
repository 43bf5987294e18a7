"""Reliability suite: kill -9 matrix, corrupt-input matrix, secrets and path escape, LLM fault storm.

Sections (``--sections``, default all), each printing one Markdown table and a verdict line:

1. ``kill``: SIGKILL of ``skillpipe run`` during each stage, then a rerun compared with an
   uninterrupted run (:mod:`bench.reliability_kill`).
2. ``corrupt``: 29 kinds of corrupt input next to good files (:mod:`bench.reliability_corrupt`).
3. ``secrets``: an API key echoed by the endpoint must appear in no file, log or report; run ids
   and inputs that try to leave their folders (:mod:`bench.reliability_secrets`).
4. ``storm``: the LLM fault storm below, on ``--trajectories`` generated SkillRL rollouts.
5. ``soak``: ``--soak-runs`` (default 20) runs of parse + remove_loops on the 3,000-environment
   tree (12,000 files), each a fresh process under a watchdog (:mod:`bench.soak`): a hang is a
   run past 120 s, recorded with its stacks. Verdict: no hang, failure or leftover process, and
   p99 <= 1.5 x p50 of the run times.

Sections 1-3 and 5 run the CLI in subprocesses; sections 1-4 talk to the schema stub
(:mod:`bench.reliability_stub`), never to a real model, unless ``--upstream`` says otherwise
for the storm (section 5 runs no LLM stage).

The storm: a fault-injecting OpenAI-compatible proxy on loopback sits between the pipeline's LLM
client and an upstream (default: the schema stub; ``--upstream embedded`` for the embedded SmolLM2
server, or a URL). For each fault rate (default 30 % and 60 % of calls), a fresh run of the stages
up to distill (through :func:`pipeline.engine.runner.run_pipeline`), then skill evolution
(:func:`bench.reliability_evolution.evolution_storm`: ``sft.rl.evolution.evolve``, as GRPO calls
it, on the run's trajectories and bank), goes through the proxy, which picks a fault per call
from a seeded generator:

==============  ===============================================================================
``http_500``    HTTP 500 with a JSON error body (retried)
``http_429``    HTTP 429 with ``Retry-After: 1`` (retried after 1 s)
``reset``       the socket is closed with an RST, no response (retried)
``non_json``    HTTP 200 with an HTML body (retried as a transport error)
``slow``        the answer comes 1.5 s late (within the timeout: no effect on rows)
``garbage``     the model's answer replaced by prose (a repair round, then quarantine)
``fenced``      the answer wrapped in a Markdown code fence (extraction copes)
``truncated``   the answer cut in half, ``finish_reason: length`` (quarantined as ``length``)
==============  ===============================================================================

Upstream answers are memoised by request body, so a retried request costs the upstream once and
both fault rates see the same answers. The table reports per fault rate: trajectories in, calls
the proxy saw (and whether they equal the calls the clients counted, summed from the stage
manifests plus the evolution client's count: "reconciled"), faults injected by kind, transport
retries and repair calls (stages and evolution), quarantined items by reason (LLM stages), skill-evolution
requests as answered + quarantined (by reason; every quarantine row of an answer-level failure
keeps the raw answer, else the run counts as failed), rows lost (units in minus out minus
quarantined, summed over stages, plus evolution requests neither answered nor quarantined: must
be 0), stage failures and wall time.

Run: ``.venv/bin/python bench/reliability.py [--sections kill,corrupt,secrets,storm] [--rates 0.3,0.6]
[--seed 0] [--trajectories 200] [--kill-seeds 2] [--dag-kill] [--soak-runs 20] [--save docs/reliability.md]``
(about 12-17 minutes on 2 shared cores, most of it the kill matrix; the soak takes ~2). The last line is ``wall_s=<seconds>``.
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
import re
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
from pipeline.stages import STAGES as PIPELINE_STAGES  # noqa: E402
from pipeline.core.config import QualityConfig  # noqa: E402
from pipeline.llm.server import EMBEDDED_MODEL_ALIAS, EmbeddedServer  # noqa: E402
from bench.reliability_evolution import evolution_storm  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAULTS = ("http_500", "http_429", "reset", "non_json", "slow", "garbage", "fenced", "truncated")
STAGES = PIPELINE_STAGES[:PIPELINE_STAGES.index("distill") + 1]  # the LLM stages and what they need
LLM_STAGES = ("memory", "skills", "distill")
EMPTY_EVOLUTION = {"requests": 0, "answered": 0, "quarantined": {}, "raw_missing": 0, "rows_lost": 0, "calls": 0,
                   "retries": 0, "repairs": 0}


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
        """The fault for the next call (``None`` = pass through), counted in ``log``."""
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


def storm(root: str, upstream: str, rate: float, seed: int, memo: dict, input_path: str, model: str,
          stub: bool = True) -> dict:
    """One run of STAGES (through :func:`run_pipeline`) on ``input_path`` with the LLM behind a
    proxy at ``rate``, then skill evolution through the same proxy
    (:func:`bench.reliability_evolution.evolution_storm`); returns the figures of one table row.
    Client-side figures come from the stage manifests (``llm`` counters) and the evolution
    client's own count.
    ``stub``: the upstream is the schema stub (``json_schema`` dialect, content rules only
    counted); otherwise the embedded server (``json_object``, default content rules)."""
    from bench.reliability_common import FAKE_KEY, KEY_ENV, write_config
    os.environ.setdefault(KEY_ENV, FAKE_KEY)
    from pipeline.runconfig import load_run_config
    from pipeline.engine.runner import run_pipeline
    t0 = time.monotonic()
    run_id = f"storm-{int(rate * 100)}"
    with FaultProxy(upstream, rate, seed, memo) as proxy:
        cfg = load_run_config(write_config(os.path.join(root, f"{run_id}.yaml"), proxy.base_url, llm={
            # the upstream's own slowness is not a fault under test (the proxy injects "slow"
            # itself): on a loaded CPU a real model can take minutes per answer
            "model": model, "structured_output": "json_schema" if stub else "json_object", "timeout_s": 1800.0}))
        if not stub:
            cfg.quality = QualityConfig()
        failed, evo = [], EMPTY_EVOLUTION
        try:
            run_pipeline(root, run_id, input_path, cfg, stages=STAGES, log=lambda s: None)
            evo = evolution_storm(root, run_id, cfg.llm, proxy.base_url)
        except Exception as e:  # a failed or crashed stage is a finding to report, not the end of the benchmark
            failed.append(f"{type(e).__name__}: {e}")
        log = dict(proxy.log)
    lost, quarantined, stats, units = 0, Counter(), Counter(), 0
    store = ArtifactStore(root, run_id)
    for name in STAGES:
        art = store.load(name)
        if art is None:
            continue
        c = art.manifest["counts"]
        units += c["units_in"] if name == "parse" else 0
        lost += c["units_in"] - c["units_out"] - c["quarantined"]
        stats.update(art.manifest.get("llm") or {})
        if name in LLM_STAGES:
            quarantined.update(c["quarantine_reasons"])
    sent, client_calls = sum(log.values()), stats["calls"] + evo["calls"]
    if evo["raw_missing"]:
        failed.append(f"skill evolution: {evo['raw_missing']} quarantine rows without the raw answer")
    return {"rate": rate, "trajectories": units, "calls_proxy": sent, "calls_client": client_calls,
            "reconciled": sent == client_calls, "faults": {k: log.get(k, 0) for k in FAULTS},
            "retries": stats["retries"] + evo["retries"], "repairs": stats["repairs"] + evo["repairs"],
            "quarantined": dict(sorted(quarantined.items())),
            "evolution": evo, "rows_lost": lost + evo["rows_lost"], "failed": failed, "wall_s": time.monotonic() - t0}


def table(rows: list[dict]) -> str:
    """The storm's Markdown table, one row per fault rate."""
    out = io.StringIO()
    head = ["fault rate", "trajectories", "calls (proxy = client)", "faults injected", "retried", "repair calls",
            "quarantined (reasons)", "skill evolution: requests = answered + quarantined (reasons)", "rows lost",
            "stage failures", "wall s"]
    out.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
    for r in rows:
        faults = ", ".join(f"{k}={v}" for k, v in r["faults"].items() if v)
        q = ", ".join(f"{k}={v}" for k, v in r["quarantined"].items()) or "0"
        e = r["evolution"]
        eq = ", ".join(f"{k}={v}" for k, v in e["quarantined"].items())
        evolution = f"{e['requests']} = {e['answered']} + {sum(e['quarantined'].values())}" + (f" ({eq})" if eq else "")
        out.write(f"| {r['rate']:.0%} | {r['trajectories']} | {r['calls_proxy']} = {r['calls_client']} "
                  f"({'reconciled' if r['reconciled'] else 'MISMATCH'}) | {sum(r['faults'].values())}: {faults} | "
                  f"{r['retries']} | {r['repairs']} | {sum(r['quarantined'].values())}: {q} | {evolution} | "
                  f"{r['rows_lost']} | "
                  f"{'; '.join(r['failed']) or 'none'} | {r['wall_s']:.0f} |\n")
    return out.getvalue()


def storm_section(work: str, a: argparse.Namespace) -> tuple[str, bool]:
    """Section 4: the storm at each rate of ``a.rates`` on ``a.trajectories`` generated SkillRL
    rollouts (``tests/fixtures/tools/make_skillrl_rollouts.py``; 0 = ``data/samples``)."""
    from bench.reliability_stub import SchemaStub
    input_path = os.path.join(REPO, "data", "samples")
    if a.trajectories:
        input_path = os.path.join(work, "rollouts")
        subprocess.run([sys.executable, os.path.join(REPO, "tests", "fixtures", "tools", "make_skillrl_rollouts.py"),
                        input_path, "--envs", str((a.trajectories + 3) // 4), "--tests", "4", "--seed", str(a.seed)],
                       check=True, capture_output=True, timeout=600)
    with contextlib.ExitStack() as stack:
        if a.upstream == "embedded":
            upstream, model = stack.enter_context(EmbeddedServer(log_dir=work, ctx_size=8192, model=EMBEDDED_MODEL_ALIAS)), EMBEDDED_MODEL_ALIAS
        elif a.upstream == "stub":
            upstream, model = stack.enter_context(SchemaStub()).base_url, "stub-model"
        else:
            upstream, model = a.upstream, "upstream"
        memo: dict[str, bytes] = {}
        rows = [storm(work, upstream, float(r), a.seed, memo, input_path, model, stub=a.upstream == "stub")
                for r in a.rates.split(",")]
    ok = all(r["reconciled"] and not r["rows_lost"] and not r["failed"] for r in rows)
    return table(rows), ok


SECTIONS = ("kill", "corrupt", "secrets", "storm", "soak")


def kill_tasks_section(work: str, dag_kill: bool = False) -> tuple[str, str, str]:
    """Section 1b: kills of DAG task processes (:mod:`bench.reliability_taskkill`); with
    ``dag_kill`` also one kill of a whole ``airflow dags test`` run (minutes more)."""
    from bench import reliability_taskkill as tk
    for d in ("taskkill", "dagkill"):
        os.makedirs(os.path.join(work, d), exist_ok=True)
    res = tk.matrix(os.path.join(work, "taskkill"))
    if dag_kill:
        try:
            res.append(tk.dag_kill(os.path.join(work, "dagkill")))
        except Exception as e:  # the bench's own failure (Airflow DB, timeout): a FAIL row, not a lost table
            res.append(tk.TaskKill("local", "airflow dags test (whole run)", "request", 0, "?", -1, False, False,
                                   tk.CallClasses(), 0, 0, [f"{type(e).__name__}: {e}"[:200]]))
    calls = [r.calls for r in res]
    return ("1b. kill -9 matrix: DAG task processes (`run_task`, 3 shards; local root and s3 on moto)",
            tk.table(res),
            f"{len(res)} kills ({sum(r.root == 's3' for r in res)} on s3), "
            f"{sum(r.hit not in ('before task', 'task done') for r in res)} landed inside a running task, {sum(not r.ok for r in res)} failed, "
            f"{sum(c.repeated for c in calls)} repeated calls, in flight at the kill "
            f"{sum(c.in_flight_at_kill for c in calls)} (asked again {sum(c.in_flight for c in calls)}), "
            f"uncheckpointed asked again {sum(c.uncheckpointed for c in calls)}")


def run_sections(work: str, a: argparse.Namespace) -> list[tuple[str, str, str]]:
    """Run the chosen sections; returns (title, table, verdict line) per section."""
    from bench import reliability_corrupt, reliability_kill, reliability_secrets
    from bench.reliability_stub import SchemaStub
    out = []
    chosen = a.sections.split(",")
    if "kill" in chosen:
        res = reliability_kill.matrix(os.path.join(work, "kill"), seeds=a.kill_seeds)
        out.append(("1. kill -9 matrix: `skillpipe run`", reliability_kill.table(res),
                    f"{len(res)} kills, {sum(r.landed for r in res)} landed in a running stage, "
                    f"{sum(not r.ok for r in res)} failed, extra LLM calls {sum(r.extra_calls for r in res)}, "
                    f"{sum(r.calls.repeated for r in res)} repeated calls, in flight at the kill "
                    f"{sum(r.calls.in_flight_at_kill for r in res)} (asked again {sum(r.calls.in_flight for r in res)})"))
        out.append(kill_tasks_section(work, a.dag_kill))
    if "corrupt" in chosen:
        with SchemaStub() as stub:
            res = reliability_corrupt.matrix(os.path.join(work, "corrupt"), stub.base_url)
        bad = [r.kind for r in res if r.outcome == "FAIL"]
        out.append(("2. corrupt-input matrix", reliability_corrupt.table(res),
                    f"{len(res)} kinds, {sum(r.rc != 0 for r in res)} crashes, FAIL: {', '.join(bad) or 'none'}"))
    if "secrets" in chosen:
        sec = [reliability_secrets.secret_case(os.path.join(work, "secrets"), e) for e in ("answer", "error")]
        with SchemaStub() as stub:
            esc = reliability_secrets.escapes(os.path.join(work, "escape"), stub.base_url)
        out.append(("3. secrets and path escape", reliability_secrets.secrets_table(sec) + "\n"
                    + reliability_secrets.escape_table(esc),
                    f"secret hits {sum(sum(r.hits.values()) for r in sec)}, "
                    f"escape attempts {len(esc)}, FAIL {sum(r.outcome != 'ok' for r in esc)}"))
    if "storm" in chosen:
        text, ok = storm_section(os.path.join(work, "storm"), a)
        out.append(("4. LLM fault storm", text, "rows lost 0, calls reconciled" if ok else "see the table: NOT clean"))
    if "soak" in chosen:
        from bench.soak import reliability_section
        os.makedirs(os.path.join(work, "soak"))
        out.append(reliability_section(os.path.join(work, "soak"), runs=a.soak_runs))
    return out


def main() -> None:
    """Command line: run the chosen sections, print their tables, optionally save them."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset of " + ",".join(SECTIONS))
    ap.add_argument("--rates", default="0.3,0.6", help="storm: comma-separated fault rates")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--upstream", default="stub",
                    help="storm upstream: stub (the schema stub) | embedded (the SmolLM2 server) | an OpenAI URL")
    ap.add_argument("--trajectories", type=int, default=200,
                    help="storm: generated SkillRL rollouts to run (0 = data/samples)")
    ap.add_argument("--kill-seeds", type=int, default=2, help="kill matrix: random kill moments per stage")
    ap.add_argument("--soak-runs", type=int, default=20, help="soak: watched parse + remove_loops runs (bench/soak.py)")
    ap.add_argument("--dag-kill", action="store_true",
                    help="kill matrix: also kill -9 a whole `airflow dags test` run and rerun it (minutes)")
    ap.add_argument("--save", default="", help="also write the tables to this Markdown file (docs/reliability.md)")
    a = ap.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="skillpipe-reliability-") as work:
        for d in ("kill", "corrupt", "secrets", "escape", "storm"):
            os.makedirs(os.path.join(work, d))
        sections = run_sections(work, a)
    for title, text, verdict in sections:
        print(f"\n## {title}\n\n{text}\n{verdict}")
    print(f"wall_s={time.monotonic() - t0:.0f}")
    from bench.results import write_result  # the result file (bench/results.py)
    write_result("reliability", {"wall_s": round(time.monotonic() - t0), "verdicts": {t: v for t, _, v in sections}}, vars(a))
    if a.save:
        save(a.save, sections, a, time.monotonic() - t0)


def save(path: str, sections: list[tuple[str, str, str]], a: argparse.Namespace, wall: float) -> None:
    """Write the sections' tables to ``path`` with the date, commit, machine and command."""
    import platform
    # outside a git checkout (e.g. a copy made with git archive, run while the checkout changes)
    # the caller names the commit in SKILLPIPE_COMMIT
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True, timeout=30).stdout.strip() or os.environ.get("SKILLPIPE_COMMIT", "unknown")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    saved = saved_sections(path)
    kept = kept_blocks(saved)
    # keep blocks of the header (above the first section) and of the footer stay where they were
    saved.pop(PREAMBLE, None)
    saved.pop(FOOTER_TITLE, None)
    made = {title: f"{text}\n**{verdict}**\n\n{kept.get(title, '')}" for title, text, verdict in sections}
    # a section not run this time (--sections) stays whole, as does a hand-written one (1c)
    earlier = {t: body for t, body in saved.items() if t not in made}
    made.update(earlier)
    note = (f"Kept as the previous file had them (not run by this command): {', '.join(sorted(earlier))}.\n\n"
            if earlier else "")
    body = "".join(f"## {title}\n\n{made[title]}" for title in sorted(made))
    with open(path, "w", encoding="utf-8") as f:
        f.write(HEADER.format(now=now, commit=commit, machine=machine, wall=wall, cmd=" ".join(sys.argv[1:]),
                              upstream=a.upstream)
                + kept.get(PREAMBLE, "") + note + body + FOOTER + ("\n" + kept[FOOTER_TITLE] if FOOTER_TITLE in kept else ""))


def saved_sections(path: str) -> dict[str, str]:
    """``{section title: its text}`` of the Markdown file at ``path`` written by :func:`save`
    ({} when it does not exist); the text above the first section is under :data:`PREAMBLE` and
    the footer's under :data:`FOOTER_TITLE`; each text ends in one blank line."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    head, *parts = text.split("\n## ")
    out = {PREAMBLE: head.strip("\n") + "\n\n"}
    for part in parts:
        title, _, body = part.partition("\n")
        out[title.strip()] = body.strip("\n") + "\n\n"
    return out


#: Text between these markers in the saved file is hand-written (measurements made outside this
#: script, notes on a run): :func:`save` keeps it under its section's title (a block above the
#: first section stays below the header, one in the footer stays at the end).
KEEP_OPEN, KEEP_CLOSE = "<!-- keep -->", "<!-- /keep -->"
#: :func:`saved_sections` keys of the text above the first section and of the footer section.
PREAMBLE = ""
FOOTER_TITLE = "How to read the tables"  # FOOTER's title (checked where FOOTER is defined)


def kept_blocks(sections: dict[str, str]) -> dict[str, str]:
    """``{section title: its kept blocks, markers included}`` of ``sections`` (:func:`saved_sections`)."""
    out = {}
    for title, body in sections.items():
        blocks = re.findall(re.escape(KEEP_OPEN) + r".*?" + re.escape(KEEP_CLOSE), body, flags=re.S)
        if blocks:
            out[title] = "\n\n".join(blocks) + "\n\n"
    return out


HEADER = """# Reliability suite

Last run of `bench/reliability.py {cmd}` on {now}, commit `{commit}`, {machine}, {wall:.0f} s (a
shared machine: wall times are indicative). The LLM of sections 1-3 is the schema stub
(`bench/reliability_stub.py`; the storm's upstream: `{upstream}`): it answers each structured
request with a valid instance of the request's schema, so every stage runs in seconds and the
content rules are only counted (`quality.flag_rules`). What each section
does and checks is in the docstrings of `bench/reliability_kill.py`, `bench/reliability_taskkill.py`, `bench/reliability_corrupt.py`,
`bench/reliability_secrets.py` and `bench/reliability.py`.

"""

FOOTER = """## How to read the tables

- kill -9: *stage hit* is read back from the run folder after the kill (the first stage without a
  complete artifact). *Identical to reference*: every stage's files, quarantine included, equal
  those of an uninterrupted run (the dataset card's title, which names the run id, excepted).
  *Extra LLM calls*: calls of the killed run and its rerun together beyond the reference run's.
  The requests sent after a kill are classified from the stub's log and the LLM cache read right
  after the kill (the run's SQLite cache; on s3 also the committed remote cache parts), by cache
  key: *repeated*: its answer was where the rerun looks (must be 0); *in flight at kill*: sent by
  the killed process, answer not stored (answered and lost in transit, or still being
  generated), in brackets how many of them were asked again (unavoidable); *uncheckpointed*
  (s3): stored in the dead worker's local cache, not yet in a remote cache part (bounded by
  `SKILLPIPE_LLM_CHECKPOINT_ANSWERS`, 2 here); *new*: never sent before.
  *missed*: the run (task) had finished before the kill moment (the checks still ran).
- kill -9 of task processes: *hit*: *in task* (its task lock was taken and its artifact not
  written), *before task* (still importing: outcome *early*), *task done* (outcome *missed*). The retry is the same
  `run_task` call; on s3 it runs on a fresh mirror after the lease (3 s) expired. *Rows
  identical*: rows and quarantine rows of every stage equal the unkilled local reference run's.
  *Temp left*: temporary folders in the run folders (on s3: also attempt folders not named by a
  committed manifest).
- corrupt input: *rows out / good expected*: trajectories parse kept versus the valid records in
  the folder (three in `good.jsonl` plus the valid records inside the bad file). FAIL = a crash, a
  valid record not read, or a bad item without a quarantine row.
- storm: rows lost = units in - units out - quarantined, summed over the stages, plus skill
  evolution's requests neither answered nor quarantined. Calls reconcile when the proxy's count
  of requests equals the sum of the clients' `calls` counters in the manifests plus the skill
  evolution client's count.
"""

assert FOOTER.startswith(f"## {FOOTER_TITLE}\n")


if __name__ == "__main__":
    main()

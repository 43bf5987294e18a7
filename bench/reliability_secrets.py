"""Section 3 of the reliability suite: secrets and path escape.

Secrets: a full ``skillpipe run`` on ``data/samples`` with a fake API key in the environment
(``llm.api_key_env``), against the schema stub acting as a careless endpoint, once per echo
case: the key repeated inside every answer (``answer``), and the key at the end of a 500 error
body after 270 filler characters (``error``: the first attempt of every request, and every
attempt of one request in 20, which end quarantined). Then every file under the run root is
scanned (bytes; Parquet files also decoded row by row; the SQLite cache also dumped as SQL),
plus the run's stdout/stderr and the output of ``skillpipe report``, for the whole key and for
its first and last 16 characters. Hits must be 0.

Path escape: run ids and inputs that try to leave their folders. Each must be refused with a
one-line error (no traceback, exit code 1 or 2), or, for a record field, end inside the run
folder; nothing may appear under the work folder outside ``root/runs/``.
"""
from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass

import pyarrow.parquet as pq

from bench.reliability_common import (FAKE_KEY, SAMPLES, SKILLPIPE, cli_args, md_table, rows, run_cli, run_state,
                                      write_config)
from bench.reliability_corrupt import GOOD, chat
from bench.reliability_stub import SchemaStub

NEEDLES = {"whole key": FAKE_KEY, "first 16": FAKE_KEY[:16], "last 16": FAKE_KEY[-16:]}


def decoded(path: str) -> bytes:
    """What a reader of ``path`` sees besides its bytes: Parquet rows as JSON, an SQLite
    database as its SQL dump (``b""`` for other files or an unreadable one)."""
    try:
        if path.endswith(".parquet"):
            return json.dumps(pq.read_table(path).to_pylist(), default=str, ensure_ascii=False).encode()
        if path.endswith((".sqlite", ".db")):
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
                return "\n".join(con.iterdump()).encode("utf-8", "replace")
    except Exception as e:  # an undecodable file is reported, not skipped silently
        return f"<undecodable {path}: {e}>".encode()
    return b""


def scan(root: str, texts: dict[str, str]) -> tuple[int, dict[str, int]]:
    """Scan every file under ``root`` (bytes + :func:`decoded`) and the named ``texts``; returns
    (files scanned, ``{"<needle> in <file>": hits}`` for each hit)."""
    hits: dict[str, int] = {}
    n = 0
    blobs = [(name, t.encode("utf-8")) for name, t in texts.items()]
    for folder, _, files in os.walk(root):
        for f in files:
            p = os.path.join(folder, f)
            with open(p, "rb") as fh:
                blobs.append((os.path.relpath(p, root), fh.read() + decoded(p)))
            n += 1
    for name, data in blobs:
        for label, needle in NEEDLES.items():
            if needle.encode() in data:
                hits[f"{label} in {name}"] = data.count(needle.encode())
    return n, hits


@dataclass
class SecretResult:
    """One echo case: run exit code, files scanned, hits per needle and file, quarantined rows."""
    case: str
    rc: int
    files: int
    hits: dict[str, int]
    quarantined: int
    calls: int
    key_sent: bool  # the endpoint received the key (else the scan proves nothing)


def secret_case(work: str, echo: str, stages: str = "") -> SecretResult:
    """One run (``stages``: all by default) with the stub echoing the key per ``echo``; the scan
    of its root."""
    root = os.path.join(work, f"secrets-{echo}")
    with SchemaStub(echo=echo) as stub:
        config = write_config(os.path.join(work, f"secrets-{echo}.yaml"), stub.base_url,
                              llm={"max_retries": 1, "concurrency": 8})
        res = run_cli(cli_args(root, "s", config, stages=stages), timeout_s=300)
        calls, key_sent = len(stub.requests), FAKE_KEY in stub.keys
    report = run_cli([SKILLPIPE, "report", "s", "--root", root], timeout_s=120)
    n, hits = scan(root, {"stdout+stderr": res.stdout + res.stderr,
                          "skillpipe report": report.stdout + report.stderr})
    q = sum(c["quarantined"] for c in run_state(root, "s").counts.values())
    return SecretResult(echo, res.returncode, n, hits, q, calls, key_sent)


@dataclass
class EscapeResult:
    """One escape attempt: exit code, the CLI's message (or what happened), ok / FAIL: why."""
    attempt: str
    rc: int
    message: str
    outcome: str


def _outside(work: str, before: set[str]) -> list[str]:
    """Entries of ``work`` and of ``work/root`` that were not there before, other than runs/."""
    root = os.path.join(work, "root")
    now = {os.path.join(d, f) for d in (work, root) if os.path.isdir(d) for f in os.listdir(d)}
    return sorted(p for p in now - before if p not in (root, os.path.join(root, "runs")))


def first_message(text: str) -> str:
    """The first line of text inside the CLI's error box (or the last output line)."""
    inside = [ln.strip(" │╭╮╰╯─") for ln in text.splitlines() if ln.startswith("│")]
    inside = [ln for ln in inside if ln]
    return " ".join(inside[:2]) if inside else (text.splitlines()[-1] if text else "")


def escape_attempts(work: str, config: str) -> list[tuple[str, list[str], str]]:
    """(label, CLI args, expectation) per attempt: ``refused`` or ``contained``."""
    root = os.path.join(work, "root")
    inp = os.path.join(work, "in-symlink")
    os.makedirs(inp, exist_ok=True)
    outside = os.path.join(work, "outside.jsonl")
    with open(outside, "w", encoding="utf-8") as f:
        f.write(GOOD)
    if not os.path.lexists(os.path.join(inp, "link.jsonl")):
        os.symlink(outside, os.path.join(inp, "link.jsonl"))
    fields = os.path.join(work, "in-fields")
    os.makedirs(fields, exist_ok=True)
    with open(os.path.join(fields, "evil..name.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps(chat("put a mug on the desk", "go to desk 1", id="../../../escaped",
                                trajectory_id="/etc/escaped")) + "\n")

    def run(run_id: str, input_path: str = SAMPLES, stages: str = "parse") -> list[str]:
        return cli_args(root, run_id, config, input_path=input_path, stages=stages)
    return [
        ("run id ../escape (with --input)", run("../escape"), "refused"),
        ("run id ../escape (no --input)", run("../escape", input_path=""), "refused"),
        ("run id absolute /tmp/escape", run("/tmp/escape"), "refused"),
        ("run id a/b", run("a/b"), "refused"),
        ("run id .hidden", run(".hidden"), "refused"),
        ("run id empty", run(""), "refused"),
        ("run id of 300 characters", run("r" * 300), "refused"),
        ("run id with a newline", run("a\nb"), "refused"),
        ("stage name ../x", run("ok", stages="../x"), "refused"),
        ("input path that does not exist", run("ok", input_path=os.path.join(work, "..", "nope")), "refused"),
        ("record id and file name with ..", run("fields", input_path=fields), "contained"),
        # followed on purpose: a folder of links to dataset folders is a normal input
        # (pipeline.formats.discover.list_input_files); what must hold is that nothing is written there
        ("symlink out of the input folder", run("symlink", input_path=inp), "followed"),
    ]


def escapes(work: str, base_url: str) -> list[EscapeResult]:
    """Try each of :func:`escape_attempts`; check refusal/containment and that nothing was
    written outside ``root/runs/``."""
    config = write_config(os.path.join(work, "escape.yaml"), base_url)
    results = []
    for label, args, expect in escape_attempts(work, config):
        before = {os.path.join(d, f) for d in (work, os.path.join(work, "root")) if os.path.isdir(d)
                  for f in os.listdir(d)}
        res = run_cli(args, timeout_s=120)
        text = (res.stdout + res.stderr).strip()
        msg = first_message(text)
        new = _outside(work, before)
        problems = []
        if "Traceback" in text:
            problems.append("traceback")
        if new:
            problems.append(f"wrote outside runs/: {new}")
        if expect == "refused" and res.returncode not in (1, 2):
            problems.append(f"not refused (rc {res.returncode})")
        if expect == "followed":
            n = len(rows(os.path.join(work, "root"), "symlink", "parse")) if res.returncode == 0 else 0
            msg = f"followed: {n} trajectories read through the link (list_input_files follows links by design)"
            if res.returncode != 0 or n == 0:
                problems.append(f"link not read (rc {res.returncode}, {n} trajectories)")
        if expect == "contained" and res.returncode == 0:
            ids = [r["trajectory_id"] for r in rows(os.path.join(work, "root"), "fields", "parse")]
            msg = f"read into the run folder only, as trajectory_id {ids}"
        results.append(EscapeResult(label, res.returncode, msg[:160], "FAIL: " + "; ".join(problems) if problems
                                    else "ok"))
    return results


def secrets_table(results: list[SecretResult]) -> str:
    """The key scans as a Markdown table."""
    head = ["key echoed by the endpoint", "run rc", "LLM calls", "key sent to the endpoint",
            "files scanned (+ stdout/stderr, report)", "quarantined rows", "secret hits"]
    return md_table(head, [[r.case, r.rc, r.calls, "yes" if r.key_sent else "NO", r.files, r.quarantined,
                            sum(r.hits.values()) if not r.hits else f"{sum(r.hits.values())}: {r.hits}"]
                           for r in results])


def escape_table(results: list[EscapeResult]) -> str:
    """The escape attempts as a Markdown table."""
    return md_table(["attempt", "rc", "message", "outcome"], [[r.attempt, r.rc, r.message, r.outcome] for r in results])

"""Transport faults at the endpoint, through the memory stage on the stub.

* An HTTP 200 whose body is not a chat completion (an HTML error page, garbage typed as JSON, JSON
  without ``choices``) is a transport error: retried, then quarantined as ``http_error`` with the
  endpoint named; before, the SDK's ``Expecting value`` crashed the stage.
* The API key never reaches disk: not from an error body that echoes it across the 300-character
  cut of the detail, nor from a valid answer that echoes it (plain or ``\\u``-escaped). Every file
  of the run is scanned, with the SQLite cache and the Parquet files decoded.
"""
from __future__ import annotations

import json
import os
import secrets
import string
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.engine.runner import run_stage
from tests.helpers.llm_stage_data import cool_apple, write_trajectories
from bench.chat_stub import ChatStub
from tests.helpers.llm_faults import GOOD_B, SUCCESS, llm_counts, stage_ctx, stub_llm_config

HTML = {"body_text": "<html><body><h1>502 Bad Gateway</h1></body></html>", "content_type": "text/html"}
GARBAGE_JSON = {"body_text": "upstream connect error or disconnect/reset before headers"}  # typed as JSON
NO_CHOICES = {"body_text": json.dumps({"error": {"message": "model overloaded"}})}


def run_memory(tmp_path, script, **llm):
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [cool_apple("success", "traj-A"), cool_apple("failure", "traj-B")])
    with ChatStub(script + [GOOD_B]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub, max_endpoint_failure_rate=1.0, **llm))
        res = run_stage("memory", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    return res, store.require("memory"), stub


@pytest.mark.parametrize("fault", [HTML, GARBAGE_JSON, NO_CHOICES], ids=["html", "garbage_json", "no_choices"])
def test_non_completion_200_is_retried_then_quarantined(tmp_path, fault):
    res, art, stub = run_memory(tmp_path, [fault] * 3)
    c = res.manifest["counts"]
    assert (c["in"], c["out"], c["quarantined"], c["quarantine_reasons"]) == (2, 1, 1, {"http_error": 1})
    assert llm_counts(res.manifest) == {"calls": 4, "retries": 2, "repairs": 0, "failures": 1, "cache_hits": 0,
                                        "prompt_tokens": 10}
    [q] = art.read_rows(quarantine=True)
    assert q["item_id"] == "traj-A"
    why = "no choices" if fault is NO_CHOICES else "not JSON"
    assert q["detail"].startswith(f"HTTP 200 from {stub.base_url}/chat/completions is not a chat completion ({why}): ")
    assert ("502 Bad Gateway" if fault is HTML else "model overloaded" if fault is NO_CHOICES
            else "upstream connect error") in q["detail"]


def test_non_json_200_then_a_good_answer_loses_nothing(tmp_path):
    res, art, _ = run_memory(tmp_path, [GARBAGE_JSON, {"content": json.dumps(SUCCESS)}])
    c = res.manifest["counts"]
    assert (c["out"], c["quarantined"]) == (2, 0)
    assert llm_counts(res.manifest)["retries"] == 1
    assert [r["trajectory_id"] for r in art.read_rows()] == ["traj-A", "traj-B"]


# ---- the API key never reaches disk ------------------------------------------------------------

KEY_ENV = "SKILLPIPE_TEST_SECRET_KEY"


def files_containing(root: Path, needles: list[str]) -> list[str]:
    """Paths under ``root`` whose bytes, decoded Parquet rows or SQLite rows contain a needle."""
    hits = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        texts = [path.read_bytes().decode("latin-1")]
        if path.suffix == ".parquet":
            texts.append(json.dumps(pq.read_table(path).to_pylist(), default=str))
        if path.suffix == ".sqlite":
            db = sqlite3.connect(path)
            tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            texts += [json.dumps(db.execute(f"SELECT * FROM {t}").fetchall()) for t in tables]
            db.close()
        if any(n in t for t in texts for n in needles):
            hits.append(str(path.relative_to(root)))
    return hits


def error_message(pad: int, key: str) -> str:
    """``str(openai.APIStatusError)`` for the stub's echo body: what the client cuts to 300 chars."""
    return f"Error code: 401 - {'x' * pad}invalid credentials: Bearer {key} "  # the SDK shows error.message


def test_key_echoed_in_an_error_body_across_the_cut_is_not_stored(tmp_path, monkeypatch):
    key = "sk-test-" + secrets.token_hex(20)
    monkeypatch.setenv(KEY_ENV, key)
    pad = 300 - 15 - error_message(0, key).index(key)  # the key starts 15 characters before the cut
    start = error_message(pad, key).index(key)
    assert start < 300 < start + len(key)  # the case that leaked key[:15] when cutting first
    res, art, stub = run_memory(tmp_path, [{"status": 401, "echo_auth": True, "pad": pad}], api_key_env=KEY_ENV)
    assert stub.auth[0] == f"Bearer {key}"  # the stub did see (and echo) the key
    [q] = art.read_rows(quarantine=True)
    assert q["reason"] == "http_error" and "invalid credentials: Bearer ***" in q["detail"]
    assert files_containing(tmp_path, [key[:12], key[-12:]]) == []


def test_key_echoed_in_a_valid_answer_is_not_stored(tmp_path, monkeypatch):
    # letters only: a hex key's digits can outnumber the planning pattern's letters, and then
    # no_words rejects the answer before redaction is tested (one run in a few). The pattern names
    # every step: a short one next to 40 random letters fell under the off_topic threshold in
    # about 7 % of keys (22 of 300), and this one in none of 1,000.
    key = "sk-test-" + "".join(secrets.choice(string.ascii_letters) for _ in range(40))
    monkeypatch.setenv(KEY_ENV, key)
    pattern = ("Find the apple -> Take the apple -> Cool the apple in the fridge -> "
               "Put the apple on the countertop -> ")
    answer = dict(SUCCESS, contextual_description=f"Cool an apple; session {key}.",
                  planning_pattern=pattern + "KEYESC")
    # the second copy is \u-escaped in the raw text: only the parsed value shows it
    raw = json.dumps(answer).replace("KEYESC", "".join(f"\\u{ord(ch):04x}" for ch in key))
    # One trajectory, and the stub gives every call the same answer: on a loaded machine a
    # request can be retried after the stub answered it (a stale keep-alive connection), and an
    # ordered script would then hand the retry another trajectory's answer.
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [cool_apple("success", "traj-A")])
    with ChatStub([], default={"content": raw}) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub, api_key_env=KEY_ENV))
        res = run_stage("memory", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    art = store.require("memory")
    assert res.manifest["counts"]["out"] == 1
    row = next(r for r in art.read_rows() if r["trajectory_id"] == "traj-A")
    assert row["contextual_description"] == "Cool an apple; session ***."
    assert row["planning_pattern"] == pattern + "***"
    escaped = "".join(f"\\u{ord(ch):04x}" for ch in key[:12])
    assert files_containing(tmp_path, [key[:12], key[-12:], escaped]) == []
    assert os.path.exists(tmp_path / "runs" / "r1" / "llm_cache.sqlite")  # the cache was scanned

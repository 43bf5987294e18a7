"""Batch mode (pipeline/llm/batch.py) against the loopback Files + Batches stub (bench/stub_endpoint.py):
the same results as online, nothing submitted twice, repairs as a second job, expiry, cancel, error
lines, and a job whose id never reached the ledger."""
from __future__ import annotations

import json
import threading
import time
from collections import Counter

from bench.stub_endpoint import StubEndpoint
from pipeline.core.config import LLMConfig
from pipeline.llm.batch import LEDGER_PREFIX
from pipeline.llm.cache import ResponseCache
from pipeline.llm.client import LLMClient
from pipeline.llm.types import JSONRequest

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city"],
          "properties": {"city": {"type": "string", "maxLength": 20}}}


def requests(n: int, check=None) -> list[JSONRequest]:
    return [JSONRequest(f"r{i}", [{"role": "user", "content": f"Name city number {i}."}], SCHEMA, "city", check)
            for i in range(n)]


def client(stub: StubEndpoint, tmp_path, mode: str = "batch", **over) -> LLMClient:
    cfg = dict(base_url=stub.base_url, model="stub-model", structured_output="json_schema", mode=mode,
               batch_poll_s=0.02, max_retries=2, max_repairs=1, timeout_s=5.0, concurrency=4)
    return LLMClient(LLMConfig(**{**cfg, **over}), cache_path=str(tmp_path / f"{mode}.sqlite"),
                     backoff_initial_s=0.01, backoff_max_s=0.05)


def outcome(results) -> list[tuple]:
    return [(r.key, r.ok, r.value, r.error, r.raw) for r in results]


def counts(c: LLMClient, *names: str) -> dict:
    s = c.stats_snapshot()
    return {k: s[k] for k in names}


def test_batch_gives_the_online_results_and_counts(tmp_path):
    def reject_odd(v):  # the stub's answers are "city <seed>: ...": some repaired, some failing twice
        return "odd seed" if int(v["city"].split()[1].rstrip(":")) % 2 else None

    with StubEndpoint() as online_stub:
        online = client(online_stub, tmp_path, "online")
        want = online.complete_json_many(requests(8, reject_odd), desc="t")
    with StubEndpoint(batch={"line_s": 0.0}) as stub:
        batch = client(stub, tmp_path)
        got = batch.complete_json_many(requests(8, reject_odd), desc="t")
        jobs = [stub.batches.view(b) for b in sorted(stub.batches.jobs)]
    assert outcome(got) == outcome(want)
    assert {r.error for r in got} >= {"", "check_failed"}  # both kinds present: the test means something
    names = ("calls", "repairs", "failures", "prompt_tokens", "completion_tokens")
    assert counts(batch, *names) == counts(online, *names)
    assert stub.online_calls() == 0 and counts(batch, "batches") == {"batches": 2}
    # the repairs went out as a second, smaller job, with the online repair message
    assert [j["request_counts"]["total"] for j in jobs] == [8, counts(batch, "repairs")["repairs"]]
    sent = lambda bills: sorted(json.dumps(b["messages"]) for b in bills)  # noqa: E731  (online order varies)
    assert sent(stub.bills) == sent(online_stub.bills)


def test_cached_answers_are_not_submitted_and_the_ledger_is_kept(tmp_path):
    with StubEndpoint() as stub:
        batch = client(stub, tmp_path)
        first = batch.complete_json_many(requests(3), desc="t")
        again = batch.complete_json_many(requests(5), desc="t")
        job = stub.batches.view(sorted(stub.batches.jobs)[-1])
    assert [r.cached for r in again] == [True, True, True, False, False]
    assert outcome(again)[:3] == outcome(first)
    assert job["request_counts"]["total"] == 2 and len(stub.batches.lines_run) == 5
    ledger = ResponseCache(str(tmp_path / "batch.sqlite")).entries_under(LEDGER_PREFIX)
    assert [len(rec["custom_ids"]) for _, rec in ledger] == [3, 2]
    assert all(rec["batch_id"].startswith("batch_") and rec["stage"] == "t" for _, rec in ledger)


def test_expired_job_keeps_its_answers_and_resends_the_rest(tmp_path):
    with StubEndpoint(batch={"expire_after": [3]}) as stub:
        batch = client(stub, tmp_path)
        got = batch.complete_json_many(requests(5), desc="t")
        jobs = [stub.batches.view(b) for b in sorted(stub.batches.jobs)]
    assert all(r.ok for r in got)
    assert [(j["status"], j["request_counts"]["total"], j["request_counts"]["completed"]) for j in jobs] == \
        [("expired", 5, 3), ("completed", 2, 2)]
    assert Counter(Counter(stub.batches.lines_run).values()) == {1: 5}  # each line ran (was paid) once
    assert counts(batch, "calls", "retries", "batches") == {"calls": 5, "retries": 2, "batches": 2}


def test_a_job_that_keeps_expiring_fails_its_requests_as_timeouts(tmp_path):
    with StubEndpoint(batch={"expire_after": [1, 0, 0]}) as stub:
        batch = client(stub, tmp_path, max_retries=2)
        got = batch.complete_json_many(requests(2), desc="t")
    assert [(r.ok, r.error) for r in got] == [(True, ""), (False, "timeout")]
    assert "expired before this request ran (3 jobs)" in got[1].detail
    assert counts(batch, "calls", "failures", "batches") == {"calls": 1, "failures": 1, "batches": 3}


def test_error_lines_are_resent_and_a_client_error_is_final(tmp_path):
    cids: dict[str, int] = {}

    def line_error(cid: str, seen: int) -> int | None:
        n = cids.setdefault(cid, len(cids))
        return {0: 500 if seen == 1 else None, 1: 400}.get(n)

    with StubEndpoint(batch={"line_error": line_error}) as stub:
        batch = client(stub, tmp_path)
        got = batch.complete_json_many(requests(3), desc="t")
    assert [(r.ok, r.error) for r in got] == [(True, ""), (False, "http_error"), (True, "")]
    assert got[1].detail.startswith("HTTP 400 in batch batch_")
    assert counts(batch, "retries", "batches", "failures") == {"retries": 1, "batches": 2, "failures": 1}


def test_cancelled_job_is_resent(tmp_path):
    with StubEndpoint(batch={"line_s": 0.2}) as stub:
        def cancel_when_running():
            while not stub.batches.jobs or stub.batches.view("batch_000002")["request_counts"]["completed"] < 1:
                time.sleep(0.01)
            stub.batches.cancel("batch_000002")
        threading.Thread(target=cancel_when_running, daemon=True).start()
        batch = client(stub, tmp_path)
        got = batch.complete_json_many(requests(4), desc="t")
        first = stub.batches.view("batch_000002")
    assert first["status"] == "cancelled" and 1 <= first["request_counts"]["completed"] < 4
    assert all(r.ok for r in got)
    assert Counter(stub.batches.lines_run).most_common(1)[0][1] == 1 and len(stub.batches.lines_run) == 4


def test_a_job_created_before_its_id_was_recorded_is_adopted(tmp_path):
    """Killed between batches.create and the ledger's update: the rerun finds the job by its input
    file in batches.list and polls it instead of submitting the requests again."""
    with StubEndpoint(batch={"line_s": 0.05}) as stub:
        first = client(stub, tmp_path)
        body_lines = []
        for r in requests(2):
            body = first.request_body(r, r.messages)
            from pipeline.llm.batch import ENDPOINT, custom_id
            body_lines.append(json.dumps({"custom_id": custom_id(body), "method": "POST", "url": ENDPOINT,
                                          "body": body}))
        oai = first.open_sync()
        upload = oai.files.create(file=("t.jsonl", "\n".join(body_lines).encode()), purpose="batch")
        first.cache.put(LEDGER_PREFIX + upload.id, first.model_id,
                        {"input_file_id": upload.id, "batch_id": "", "stage": "t", "created": 0.0,
                         "custom_ids": [json.loads(x)["custom_id"] for x in body_lines]}, "", {})
        oai.batches.create(input_file_id=upload.id, endpoint=ENDPOINT, completion_window="24h")
        got = client(stub, tmp_path).complete_json_many(requests(2), desc="t")
        assert len(stub.batches.jobs) == 1 and len(stub.batches.lines_run) == 2
    assert all(r.ok for r in got)

"""Rate-limit budgets (pipeline/llm/ratelimit.py) in the client, against endpoints that state and
enforce RPM/TPM limits: the loopback stub of bench/stub_endpoint.py (real 429s and x-ratelimit-*
headers) and the scripted stub for single answers."""
from __future__ import annotations

import json
import time

import pytest

from bench.stub_endpoint import StubEndpoint
from pipeline.core.config import LLMConfig
from pipeline.llm.client import LLMClient
from pipeline.llm.ratelimit import limit_headers, parse_duration
from pipeline.llm.types import JSONRequest
from bench.chat_stub import ChatStub

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city"],
          "properties": {"city": {"type": "string", "maxLength": 20}}}
ANSWER = {"content": json.dumps({"city": "Paris"})}


def requests(n: int) -> list[JSONRequest]:
    return [JSONRequest(f"r{i}", [{"role": "user", "content": f"Name city {i}."}], SCHEMA) for i in range(n)]


def client(url: str, **over) -> LLMClient:
    cfg = dict(base_url=url, model="stub-model", structured_output="json_schema", max_retries=4, timeout_s=10.0,
               concurrency=16, max_tokens=50)
    return LLMClient(LLMConfig(**{**cfg, **over}), backoff_initial_s=0.01, backoff_max_s=0.05)


@pytest.mark.parametrize("text, seconds", [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1.5s", 1.5),
                                           ("1h2m3s", 3723.0), ("7", 7.0), ("", None), ("soon", None)])
def test_reset_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_limit_headers_read_case_insensitively():
    facts = limit_headers({"X-RateLimit-Limit-Tokens": "200000", "x-ratelimit-remaining-requests": "499",
                           "x-ratelimit-reset-tokens": "530ms"})
    assert facts == {"limit_requests": None, "limit_tokens": 200000, "remaining_requests": 499,
                     "remaining_tokens": None, "reset_requests": None, "reset_tokens": 0.53}


def test_configured_rpm_paces_the_calls_with_no_429():
    with StubEndpoint(rpm=240, burst_s=2.0) as stub:  # 4 per second; the stub lets 8 through at once
        c = client(stub.base_url, rpm=240)
        t0 = time.monotonic()
        out = c.complete_json_many(requests(20), desc="t")
        wall = time.monotonic() - t0
        starts = [t for t, _ in stub.admitted]
    assert all(r.ok for r in out)
    stats = c.stats_snapshot()
    assert (stats["rate_limited"], stats["calls"]) == (0, 20)
    assert wall >= 3.5  # 3.8 at once, then 16 at 3.8 per second (95 %); without the budget: all 20 at once
    assert stats["limit_wait_s"] > 10  # summed over the calls held back
    assert max(sum(1 for t in starts if s <= t < s + 1.0) for s in starts) <= 8  # the stub's 8 + 4/s


def test_limits_are_learned_from_the_headers_and_429s_stay_few():
    # 12,000 tokens per minute = 200 per second, 400 at once; a call counts ~80 prompt + 50 max_tokens
    with StubEndpoint(tpm=12000, burst_s=2.0) as stub:
        c = client(stub.base_url)
        out = c.complete_json_many(requests(16), desc="t")
        n_429 = stub.counts["rate_limited"]
    stats = c.stats_snapshot()
    assert all(r.ok for r in out)
    assert c.budget.tpm == 12000 and c.budget.rpm == 0  # learned; no request limit stated
    assert stats["rate_limited"] == n_429 and n_429 <= 16  # only the first wave, before any header came back
    assert 0.15 < c.budget.tokens_per_char < 0.4  # learned from usage.prompt_tokens


def test_429_halves_the_window_and_holds_every_call_back():
    throttle = {"status": 429, "headers": {"retry-after-ms": "300", "x-ratelimit-limit-requests": "600"},
                "body": {"error": {"message": "Rate limit reached"}}}
    with ChatStub([throttle, ANSWER, ANSWER], default=ANSWER) as stub:
        c = client(stub.base_url, concurrency=8)
        out = c.complete_json_many(requests(2), desc="t")
    stats = c.stats_snapshot()
    assert all(r.ok for r in out)
    assert (stats["rate_limited"], stats["retries"], stats["calls"]) == (1, 1, 3)
    assert c.budget.width <= 8 and c.budget.rpm == 600  # halved to 4, widened by each answer since
    assert stats["limit_wait_s"] >= 0.3  # the 429's own retry-after at least


def test_low_remaining_tokens_hold_the_next_call():
    completion = {"id": "c1", "object": "chat.completion", "created": 0, "model": "stub-model",
                  "choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": ANSWER["content"]}}],
                  "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
    low = {"status": 200, "body": completion, "headers": {
        "x-ratelimit-limit-tokens": "6000", "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1s"}}
    with ChatStub([low], default=ANSWER) as stub:
        c = client(stub.base_url, concurrency=1, max_tokens=20)
        t0 = time.monotonic()
        out = c.complete_json_many(requests(2), desc="t")
        wall = time.monotonic() - t0
    assert all(r.ok for r in out)
    # the second call needs ~25 tokens that the endpoint refills at 100/s: held ~0.25 s, no 429
    assert wall >= 0.2 and c.stats_snapshot()["rate_limited"] == 0

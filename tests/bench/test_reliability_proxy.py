"""The fault proxy of bench/reliability.py, in front of the scripted stub: each fault kind, injected
on every call, ends as the client's documented outcome, and the proxy's count of calls equals the
client's ``calls`` counter (the reconciliation the benchmark reports)."""
from __future__ import annotations

import json

import pytest

from bench.reliability import FAULTS, FaultProxy
from pipeline.core.config import LLMConfig
from pipeline.llm.client import LLMClient
from pipeline.llm.types import JSONRequest
from bench.chat_stub import ChatStub

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city"],
          "properties": {"city": {"type": "string", "maxLength": 20}}}
ANSWER = {"content": json.dumps({"city": "Paris"})}

# fault -> (ok, error, calls) with max_retries=2, max_repairs=1, every call faulted
EXPECTED = {
    "http_500": (False, "http_error", 3), "http_429": (False, "http_error", 3),
    "reset": (False, "connection_error", 3), "non_json": (False, "http_error", 3),
    "slow": (True, "", 1), "garbage": (False, "not_json", 2), "fenced": (True, "", 1),
    "truncated": (False, "length", 1),
}


def test_every_fault_kind_is_covered():
    assert set(EXPECTED) == set(FAULTS)


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_outcome_and_calls_reconcile(fault):
    with ChatStub([], default=ANSWER) as upstream, FaultProxy(upstream.base_url, 1.0, 0, {}, kinds=(fault,)) as proxy:
        cfg = LLMConfig(base_url=proxy.base_url, model="stub-model", structured_output="json_object",
                        max_retries=2, max_repairs=1, timeout_s=5.0, concurrency=1)
        client = LLMClient(cfg, backoff_initial_s=0.01, backoff_max_s=0.05)
        [res] = client.complete_json_many([JSONRequest("q", [{"role": "user", "content": "Capital?"}], SCHEMA)])
        log = dict(proxy.log)
    ok, error, calls = EXPECTED[fault]
    assert (res.ok, res.error) == (ok, error), res.detail
    if ok:
        assert res.value == {"city": "Paris"}
    assert log == {fault: calls}
    assert client.stats_snapshot()["calls"] == calls
    # one upstream call at most however often the request was retried or repaired (memoised by body)
    assert len(upstream.requests) <= (2 if fault == "garbage" else 1)

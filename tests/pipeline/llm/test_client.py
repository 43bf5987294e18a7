"""LLMClient against the scripted stub (bench/chat_stub.py): each fault, exact counters and results."""
import time

import pytest

from pipeline.core.config import LLMConfig
from pipeline.llm.client import LLMClient
from pipeline.llm.types import JSONRequest
from bench.chat_stub import ChatStub

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city"],
          "properties": {"city": {"type": "string", "maxLength": 20}}}
MSGS = [{"role": "user", "content": "Capital of France as JSON."}]


def make_client(stub, tmp_path=None, **over):
    cfg = dict(base_url=stub.base_url, model="stub-model", structured_output="json_object",
               max_retries=2, max_repairs=1, timeout_s=2.0, concurrency=1)
    cfg.update(over)
    cache = str(tmp_path / "cache.sqlite") if tmp_path is not None else None
    # Tiny backoff keeps the suite fast; Retry-After is still honoured as sent.
    return LLMClient(LLMConfig(**cfg), cache_path=cache, backoff_initial_s=0.01, backoff_max_s=0.05)


def run_one(client, check=None, key="k1"):
    [res] = client.complete_json_many([JSONRequest(key, MSGS, SCHEMA, "city", check)], desc="test")
    return res


def counters(client):
    s = client.stats_snapshot()
    return {k: s[k] for k in ("calls", "retries", "repairs", "failures", "cache_hits")}


def test_fenced_json_with_trailing_comma():
    with ChatStub([{"content": 'Sure:\n```json\n{"city": "Paris",}\n```'}]) as stub:
        client = make_client(stub)
        res = run_one(client)
    assert (res.ok, res.value, res.attempts) == (True, {"city": "Paris"}, 1)
    assert res.usage == {"prompt_tokens": 10, "completion_tokens": 5, "cached_prompt_tokens": 0}
    assert counters(client) == {"calls": 1, "retries": 0, "repairs": 0, "failures": 0, "cache_hits": 0}
    assert client.stats_snapshot()["prompt_tokens"] == 10
    # The json_object dialect carries the grammar form of the schema (llama.cpp): the string gets a
    # length-bounded pattern without quote, backslash or control characters.
    city = {"type": "string", "maxLength": 20, "pattern": '^[^"\\\\\\x00-\\x1f]{0,20}$'}
    assert stub.requests[0]["response_format"] == {"type": "json_object", "schema": {**SCHEMA, "properties": {"city": city}}}
    assert (stub.requests[0]["temperature"], stub.requests[0]["max_tokens"], stub.requests[0]["seed"]) == (0.0, 1536, 0)


def test_wrong_schema_then_repaired():
    with ChatStub([{"content": '{"town": "Paris"}'}, {"content": '{"city": "Paris"}'}]) as stub:
        client = make_client(stub)
        res = run_one(client)
    assert (res.ok, res.value, res.attempts) == (True, {"city": "Paris"}, 2)
    assert counters(client) == {"calls": 2, "retries": 0, "repairs": 1, "failures": 0, "cache_hits": 0}
    repair = stub.requests[1]["messages"]
    assert repair[:2] == [MSGS[0], {"role": "assistant", "content": '{"town": "Paris"}'}]
    assert repair[2]["content"] == ("Your answer was rejected (schema_invalid): at <root>: Additional properties"
                                    " are not allowed ('town' was unexpected)\n"
                                    "Reply again with only the corrected JSON, nothing else.")


def test_schema_invalid_after_repair_budget():
    with ChatStub([{"content": "no json here"}, {"content": '{"city": 7}'}]) as stub:
        client = make_client(stub)
        res = run_one(client)
    assert (res.ok, res.error, res.raw) == (False, "schema_invalid", '{"city": 7}')
    assert res.detail == "at city: 7 is not of type 'string'"
    assert counters(client) == {"calls": 2, "retries": 0, "repairs": 1, "failures": 1, "cache_hits": 0}


def test_check_failure_is_repaired():
    check = lambda v: None if v["city"] == "Paris" else f"wrong city {v['city']}"  # noqa: E731
    with ChatStub([{"content": '{"city": "Lyon"}'}, {"content": '{"city": "Paris"}'}]) as stub:
        client = make_client(stub)
        res = run_one(client, check=check)
    assert (res.ok, res.value) == (True, {"city": "Paris"})
    assert "check_failed): wrong city Lyon" in stub.requests[1]["messages"][2]["content"]
    assert counters(client) == {"calls": 2, "retries": 0, "repairs": 1, "failures": 0, "cache_hits": 0}


def test_finish_length_is_failure_not_data():
    # Valid JSON, but cut by max_tokens: never accepted, never repaired.
    with ChatStub([{"content": '{"city": "Par"}', "finish_reason": "length"}]) as stub:
        client = make_client(stub)
        res = run_one(client)
    assert (res.ok, res.error, res.raw, res.value) == (False, "length", '{"city": "Par"}', None)
    assert counters(client) == {"calls": 1, "retries": 0, "repairs": 0, "failures": 1, "cache_hits": 0}


def test_429_honours_retry_after():
    script = [{"status": 429, "headers": {"Retry-After": "1"}, "body": {"error": {"message": "slow down"}}},
              {"content": '{"city": "Paris"}'}]
    with ChatStub(script) as stub:
        client = make_client(stub)
        t0 = time.monotonic()
        res = run_one(client)
        waited = time.monotonic() - t0
    assert (res.ok, res.value, res.attempts) == (True, {"city": "Paris"}, 2)
    assert waited >= 1.0  # backoff alone would be ~0.01-0.05 s
    assert counters(client) == {"calls": 2, "retries": 1, "repairs": 0, "failures": 0, "cache_hits": 0}


def test_500_then_ok():
    with ChatStub([{"status": 500}, {"content": '{"city": "Paris"}'}]) as stub:
        client = make_client(stub)
        res = run_one(client)
    assert (res.ok, res.value) == (True, {"city": "Paris"})
    assert counters(client) == {"calls": 2, "retries": 1, "repairs": 0, "failures": 0, "cache_hits": 0}


def test_connection_reset_then_ok():
    with ChatStub([{"reset": True}, {"content": '{"city": "Paris"}'}]) as stub:
        client = make_client(stub)
        res = run_one(client)
    assert (res.ok, res.value) == (True, {"city": "Paris"})
    assert counters(client) == {"calls": 2, "retries": 1, "repairs": 0, "failures": 0, "cache_hits": 0}


def test_timeout_then_ok():
    with ChatStub([{"sleep": 1.0, "content": '{"city": "Late"}'}, {"content": '{"city": "Paris"}'}]) as stub:
        client = make_client(stub, timeout_s=0.3)
        res = run_one(client)
    assert (res.ok, res.value) == (True, {"city": "Paris"})
    assert counters(client) == {"calls": 2, "retries": 1, "repairs": 0, "failures": 0, "cache_hits": 0}


def test_retry_budget_exhausted():
    with ChatStub([{"status": 503}] * 3) as stub:
        client = make_client(stub, max_retries=2)
        res = run_one(client)
    assert (res.ok, res.error, res.raw, res.attempts) == (False, "http_error", "", 3)
    assert res.detail.startswith("HTTP 503:")
    assert counters(client) == {"calls": 3, "retries": 2, "repairs": 0, "failures": 1, "cache_hits": 0}


def test_4xx_is_not_retried():
    with ChatStub([{"status": 400, "body": {"error": {"message": "bad request"}}}]) as stub:
        client = make_client(stub)
        res = run_one(client)
    assert (res.ok, res.error) == (False, "http_error")
    assert counters(client) == {"calls": 1, "retries": 0, "repairs": 0, "failures": 1, "cache_hits": 0}


def test_auto_dialect_falls_back_once_and_remembers():
    rejection = {"status": 500, "body": {"error": {"message": "('body', 'response_format', 'type'): "
                                                              "Input should be 'text' or 'json_object'"}}}
    script = [rejection, {"content": '{"city": "Paris"}'}, {"content": '{"city": "Rome"}'}]
    with ChatStub(script) as stub:
        client = make_client(stub, structured_output="auto")
        assert client.dialect == "json_schema"
        first = run_one(client)
        second = client.complete_json_many([JSONRequest("k2", [{"role": "user", "content": "Italy?"}], SCHEMA)])[0]
    assert (first.value, second.value) == ({"city": "Paris"}, {"city": "Rome"})
    assert [r["response_format"]["type"] for r in stub.requests] == ["json_schema", "json_object", "json_object"]
    assert stub.requests[0]["response_format"]["json_schema"] == {"name": "city", "schema": SCHEMA}
    assert counters(client) == {"calls": 3, "retries": 0, "repairs": 0, "failures": 0, "cache_hits": 0}


def test_explicit_json_schema_rejection_is_not_retried():
    rejection = {"status": 500, "body": {"error": {"message": "response_format: json_schema unsupported"}}}
    with ChatStub([rejection]) as stub:
        client = make_client(stub, structured_output="json_schema")
        res = run_one(client)
    assert (res.ok, res.error, client.dialect) == (False, "http_error", "json_schema")
    assert counters(client) == {"calls": 1, "retries": 0, "repairs": 0, "failures": 1, "cache_hits": 0}


def test_sync_call_from_inside_event_loop():
    import asyncio

    async def caller(client):
        return client.complete_json_many([JSONRequest("k", MSGS, SCHEMA)])

    with ChatStub([{"content": '{"city": "Paris"}'}]) as stub:
        [res] = asyncio.run(caller(make_client(stub)))
    assert (res.ok, res.value) == (True, {"city": "Paris"})


def test_cache_hit_costs_no_call_and_failures_are_not_cached(tmp_path):
    with ChatStub([{"content": '{"city": "Paris"}'}, {"content": "oops"}, {"content": "oops"}]) as stub:
        first = make_client(stub, tmp_path)
        assert run_one(first).value == {"city": "Paris"}
        bad = JSONRequest("k2", [{"role": "user", "content": "other"}], SCHEMA)
        assert first.complete_json_many([bad])[0].error == "not_json"
        # A fresh client on the same file (a rerun after a crash) pays nothing for the success...
        second = make_client(stub, tmp_path)
        hit = run_one(second)
        assert (hit.ok, hit.value, hit.cached, hit.attempts) == (True, {"city": "Paris"}, True, 0)
        assert counters(second) == {"calls": 0, "retries": 0, "repairs": 0, "failures": 0, "cache_hits": 1}
        # ...but asks again for the failure (the exhausted script answers 599 -> http_error).
        assert second.complete_json_many([bad])[0].error == "http_error"
    assert len(stub.requests) == 3 + 3


def test_many_keep_order_and_delta(tmp_path):
    script = [{"content": '{"city": "A"}'}, {"content": '{"city": "B"}'}, {"content": '{"city": "C"}'}]
    with ChatStub(script) as stub:
        client = make_client(stub, concurrency=1)
        snap = client.stats_snapshot()
        reqs = [JSONRequest(f"r{i}", [{"role": "user", "content": str(i)}], SCHEMA) for i in range(3)]
        out = client.complete_json_many(reqs, desc="order")
    assert [(r.key, r.value["city"]) for r in out] == [("r0", "A"), ("r1", "B"), ("r2", "C")]
    assert client.stats_delta(snap) == {"calls": 3, "cache_hits": 0, "prompt_tokens": 30, "completion_tokens": 15,
                                        "retries": 0, "repairs": 0, "failures": 0, "cached_prompt_tokens": 0,
                                        "rate_limited": 0, "limit_wait_s": 0.0, "batches": 0}


def test_api_key_only_from_named_env(monkeypatch):
    monkeypatch.setenv("SKILLPIPE_TEST_KEY", "sk-test-123")
    with ChatStub([{"content": '{"city": "Paris"}'}]) as stub:
        client = make_client(stub, api_key_env="SKILLPIPE_TEST_KEY")
        run_one(client)
        assert stub.auth == ["Bearer sk-test-123"]
        assert "sk-test-123" not in repr(vars(client))
        monkeypatch.delenv("SKILLPIPE_TEST_KEY")
        with pytest.raises(ValueError, match="SKILLPIPE_TEST_KEY"):
            make_client(stub, api_key_env="SKILLPIPE_TEST_KEY")


def test_local_endpoint_gets_placeholder_key():
    with ChatStub([{"content": '{"city": "Paris"}'}]) as stub:
        run_one(make_client(stub))
    assert stub.auth == ["Bearer sk-no-key"]


def test_none_dialect_puts_the_schema_in_the_prompt():
    # endpoints without structured output (DeepSeek preset): no response_format, schema in the prompt
    with ChatStub([{"content": 'Here you go: {"city": "Paris"}'}]) as stub:
        res = run_one(make_client(stub, structured_output="none"))
    assert (res.ok, res.value) == (True, {"city": "Paris"})
    body = stub.requests[0]
    assert "response_format" not in body
    assert body["messages"][0]["content"] == (
        MSGS[0]["content"] + "\n\nAnswer with only one JSON value, no prose and no code fence, that matches this "
        'JSON Schema:\n{"type":"object","additionalProperties":false,"required":["city"],'
        '"properties":{"city":{"type":"string","maxLength":20}}}')


def test_an_answer_accepted_after_a_repair_is_a_cache_hit_next_time(tmp_path):
    """The accepted answer is stored under the key of the ORIGINAL request (not of the repair
    conversation), so a rerun pays nothing for it."""
    with ChatStub([{"content": '{"town": "Paris"}'}, {"content": '{"city": "Paris"}'}]) as stub:
        first = run_one(make_client(stub, tmp_path))
    with ChatStub([]) as stub:  # an empty script: any call would get HTTP 599
        client = make_client(stub, tmp_path)
        again = run_one(client)
        assert stub.requests == []
    assert (first.ok, first.attempts, again.ok, again.cached, again.value) == (True, 2, True, True, {"city": "Paris"})
    assert counters(client) == {"calls": 0, "retries": 0, "repairs": 0, "failures": 0, "cache_hits": 1}


def test_an_endpoint_that_refuses_every_connection_is_not_asked_for_each_request():
    """A real closed loopback port (connection refused): once max(2, concurrency) requests have
    failed with connection_error after their retries and nothing was answered, the rest of the
    batch is not sent. Each still gets its own connection_error result, so the stage's endpoint
    check fails it as before (18 refused memory requests once took 2 min 41 s)."""
    import socket
    with socket.socket() as s:  # a port nobody listens on once the socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="stub-model", structured_output="json_object",
                    max_retries=1, max_repairs=0, timeout_s=2.0, concurrency=2)
    client = LLMClient(cfg, backoff_initial_s=0.01, backoff_max_s=0.05)
    results = client.complete_json_many([JSONRequest(f"k{i}", MSGS, SCHEMA, "city") for i in range(12)], desc="t")
    assert [r.error for r in results] == ["connection_error"] * 12
    sent = [r for r in results if not r.detail.startswith("not sent:")]
    # the first wave (2 in flight) is sent; a third may start before the second one fails
    assert 2 <= len(sent) <= 3 and all(r.attempts == 0 for r in results if r not in sent)
    assert sent == results[:len(sent)]  # requests start in order: the not-sent ones are the later ones
    assert client.stats_snapshot()["failures"] == 12


def test_embedded_model_calls_carry_the_repeat_penalty_both_servers_share():
    """llama-cpp-python's server defaults to repeat_penalty 1.1, llama-server to 1.0: the client
    sends 1.1 to the embedded model so either program samples alike; hosted calls get no such field."""
    from pipeline.llm.client import EMBEDDED_REPEAT_PENALTY
    from pipeline.llm.server import EMBEDDED_MODEL_ALIAS
    req = JSONRequest("k", MSGS, SCHEMA, "city")
    embedded = LLMClient(LLMConfig(base_url="http://127.0.0.1:9/v1", model=EMBEDDED_MODEL_ALIAS, api_key_env=""))
    hosted = LLMClient(LLMConfig(base_url="http://127.0.0.1:9/v1", model="gpt-4o-mini", api_key_env=""))
    assert embedded.request_body(req, MSGS)["repeat_penalty"] == EMBEDDED_REPEAT_PENALTY == 1.1
    assert "repeat_penalty" not in hosted.request_body(req, MSGS)


def test_the_embedded_model_gets_no_more_requests_at_once_than_its_slots():
    """The embedded server decodes one request at a time: a second one sent would only queue and
    spend its timeout waiting. An endpoint's model keeps ``llm.concurrency``."""
    from pipeline.llm.server import EMBEDDED_SLOTS
    embedded = LLMClient(LLMConfig(base_url="http://127.0.0.1:9/v1", model="", concurrency=4), cache_path=None)
    assert embedded.embedded and embedded.cfg.concurrency == EMBEDDED_SLOTS == 1
    remote = LLMClient(LLMConfig(base_url="http://127.0.0.1:9/v1", model="gpt-4o-mini", concurrency=4,
                                 api_key_env=""), cache_path=None)
    assert not remote.embedded and remote.cfg.concurrency == 4


def test_repairs_default_to_none_for_the_greedy_embedded_model_and_one_elsewhere():
    """``llm.max_repairs: -1`` (the default) resolves per endpoint: the embedded model at
    temperature 0 gets no repair round, a sampled or hosted model one; a set value stays."""
    def repairs(**kw):
        return LLMClient(LLMConfig(base_url="http://127.0.0.1:9/v1", api_key_env="", **kw), cache_path=None).cfg.max_repairs
    assert LLMConfig().max_repairs == -1
    assert repairs(model="") == 0
    assert repairs(model="", temperature=0.7) == 1
    assert repairs(model="gpt-4o-mini") == 1
    assert repairs(model="", max_repairs=2) == 2

"""LLMStage: the request/answer loop shared by the LLM stages, on a toy stage and a scripted client."""
from __future__ import annotations

import pyarrow as pa

from pipeline.core.config import PipelineConfig
from pipeline.stage.llmstage import Job, LLMStage, send
from pipeline.stage.stage import StageContext, reject
from pipeline.llm.types import JSONRequest, JSONResult

UNITS = {"a": ["a#0"], "b": ["b#0", "b#1", "b#2"], "c": [], "d": ["d#0"], "e": ["e#0"]}


class Scripted:
    """A client whose answer to each request key is scripted: a value, or an error code."""
    model_id = "scripted@1"

    def __init__(self, script: dict):
        self.script, self.batches = script, []

    def complete_json_many(self, requests, desc=""):
        self.batches.append((desc, [r.key for r in requests]))
        return [JSONResult(r.key, True, value=self.script[r.key]) if not str(self.script[r.key]).startswith("!")
                else JSONResult(r.key, False, raw=f"raw {r.key}", error=self.script[r.key][1:], detail=f"{r.key} bad")
                for r in requests]


class Echo(LLMStage):
    name = "echo"
    schema = pa.schema([("unit", pa.string()), ("n", pa.int64()), ("model", pa.string())])
    units = UNITS

    def requests(self, run):
        return [Job(u, u, [JSONRequest(k, [], {}) for k in keys], "src.jsonl", i) if u != "e" else
                Job(u, u, rejected=reject(self.name, "not_wanted", "e is skipped", u))
                for i, (u, keys) in enumerate(self.units.items())]

    def format_output(self, item, values, run):
        if item == "d":
            return reject(self.name, "odd_answer", "d answered", item, raw=str(values))
        return [{"unit": item, "n": sum(values), "model": run.model or "none"}]


def ctx_with(client) -> StageContext:
    return StageContext(None, PipelineConfig(), llm_factory=lambda: client)


def test_the_loop_turns_answers_into_rows_and_failures_into_quarantine():
    client = Scripted({"a#0": 1, "b#0": 2, "b#1": "!not_json", "b#2": "!length", "d#0": 7, "e#0": 0})
    out = Echo().run(ctx_with(client))
    assert client.batches == [("echo", ["a#0", "b#0", "b#1", "b#2", "d#0"])]  # one batch, job order
    assert out.rows == [{"unit": "a", "n": 1, "model": "scripted@1"}, {"unit": "c", "n": 0, "model": "scripted@1"}]
    # the unit rejected before asking first; b keeps its first failed request, d was rejected by format_output
    units = [q for q in out.quarantine if q.kind == "unit"]
    assert [(q.item_id, q.reason, q.detail, q.raw, q.source_uri, q.line) for q in units] == [
        ("e", "not_wanted", "e is skipped", "", "", None),
        ("b", "not_json", "b#1 bad", "raw b#1", "src.jsonl", 1),
        ("d", "odd_answer", "d answered", "[7]", "", None)]
    # b's second failure is a request row (not a unit), keeping its own raw output
    assert [(q.item_id, q.reason, q.detail, q.raw, q.kind) for q in out.quarantine if q.kind != "unit"] == [
        ("b#2", "length", "call b#2 failed: b#2 bad", "raw b#2", "request")]
    assert [r.key for r in out.failed_requests] == ["b#1", "b#2"]
    assert out.rows_in == 5 and len(out.rows) + len(units) == 5
    assert out.counters == {"quality": {"items": 5, "quarantined": {}, "rate": {}, "rejected_answers": {},
                                        "flagged": {}, "repaired": {}}}


def test_nothing_to_ask_never_starts_the_llm():
    class Nothing(Echo):
        units = {"c": []}

    def no_llm():
        raise AssertionError("the LLM must not be started when no job has a request")
    out = StageContext(None, PipelineConfig(), llm_factory=no_llm)
    res = Nothing().run(out)
    assert res.rows == [{"unit": "c", "n": 0, "model": "none"}] and res.failed_requests == []


def test_a_content_rule_reason_becomes_the_quarantine_reason():
    client = Scripted({"a#0": "!check_failed"})
    client.complete_json_many = lambda reqs, desc="": [JSONResult("a#0", False, raw="{}", error="check_failed",
                                                                  detail="off_topic: 'x' is off topic")]
    jobs = [Job("a", "a", [JSONRequest("a#0", [], {})])]
    send(client, jobs, "t")
    assert [r.detail for r in jobs[0].failed] == ["off_topic: 'x' is off topic"]

    class One(Echo):
        units = {"a": ["a#0"]}
    [q] = One().run(ctx_with(client)).quarantine
    assert (q.reason, q.raw) == ("off_topic", "{}")

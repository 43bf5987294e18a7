"""A failed LLM request is never lost: it leaves a quarantine row with its raw
output, the manifest lists it, the stage is not recorded as complete-and-fresh, and a plain rerun
sends exactly the failed requests again (the successful answers come from the LLM cache).

Runs aggregate and distill through ``runner.run_stage`` on the scripted stub (bench/chat_stub.py),
requests sequential (concurrency 1), so the script is consumed in call order.
"""
from __future__ import annotations

import json
import os

from pipeline.core.artifacts import ArtifactStore
from pipeline.cli import print_summary
from pipeline.core.config import PipelineConfig
from pipeline.core.records import MEMORY_SCHEMA, SKILL_SCHEMA
from pipeline.engine.runner import run_stage
from pipeline.stage.llmstage import answers_repeat, failed_request_facts
from tests.helpers.llm_stage_data import heat_mug, write_trajectories, write_upstream
from bench.chat_stub import ChatStub
from tests.helpers.skills_data import MEMORIES, write_dedupe
from tests.helpers.llm_faults import stage_ctx, stub_llm_config

SKILL = {"title": "Search Then Act", "principle": "Find the object first.", "when_to_apply": "Object unseen."}
MISTAKES = json.dumps({"mistakes": [{"description": "Wrong appliance", "why_it_happens": "Verb misread",
                                     "how_to_avoid": "Reread the goal"}]})
TRUNCATED = MISTAKES[:30]
SKILL_ANSWERS = [{"content": json.dumps({"skills": [SKILL]})},                                 # general
                 {"content": json.dumps({"skills": [dict(SKILL, title="Cool In Fridge")]})},   # task_specific cool
                 {"content": json.dumps({"skills": [dict(SKILL, title="Heat In Microwave")]})}]  # task_specific heat


def _aggregate(store: ArtifactStore, script: list[dict]) -> tuple:
    with ChatStub(script) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.export.val_fraction = 0.0
        res = run_stage("skills", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    return res, stub


def _bank(res) -> dict:
    with open(os.path.join(res.uri, "skill_bank.json"), encoding="utf-8") as f:
        return json.load(f)


def test_failed_mistakes_call_is_quarantined_and_retried_on_rerun(tmp_path, capsys):
    store = ArtifactStore(str(tmp_path), "r1")
    write_dedupe(store, {m["trajectory_id"]: f"kitchen-{i}" for i, m in enumerate(MEMORIES, 1)})
    write_upstream(store, "memory", MEMORIES, MEMORY_SCHEMA)
    # the mistakes call (last) is cut at max_tokens: a 'length' failure, never repaired
    first, stub = _aggregate(store, SKILL_ANSWERS + [{"content": TRUNCATED, "finish_reason": "length"}])
    assert len(stub.requests) == 4 and _bank(first)["common_mistakes"] == []
    # mem-4 also fed the (successful) cool call, so no memory is quarantined for it: the request row is
    [q] = store.require("skills").read_rows(quarantine=True)
    assert (q["stage"], q["kind"], q["reason"], q["item_id"], q["raw"]) == ("skills", "request", "length",
                                                                           "alfworld/mistake/", TRUNCATED)
    assert "mistake call alfworld/mistake/ failed" in q["detail"]
    failed = first.manifest["failed_requests"]
    assert (failed["total"], failed["by_reason"], failed["keys"]) == (1, {"length": 1}, ["alfworld/mistake/"])
    c = first.manifest["counts"]  # request rows are not units: the count invariant is unchanged
    assert (c["units_in"], c["units_out"], c["quarantined"], c["quarantine_kinds"]) == (4, 4, 0, {"request": 1})
    assert first.manifest["fingerprint_complete"] != first.fingerprint  # recorded as incomplete
    print_summary([first], 0.1)  # the CLI exits 0 (the stage was written) but says it is incomplete
    out = capsys.readouterr().out
    assert "incomplete" in out, out

    # plain rerun (no --force), stub fixed: only the mistakes request is sent, the rest is cached
    second, stub = _aggregate(store, [{"content": MISTAKES}])
    assert not second.skipped and len(stub.requests) == 1
    assert list(stub.requests[0]["response_format"]["schema"]["properties"]) == ["mistakes"]
    assert (second.manifest["llm"]["calls"], second.manifest["llm"]["cache_hits"]) == (1, 3)
    assert [m["description"] for m in _bank(second)["common_mistakes"]] == ["Wrong appliance"]
    assert second.manifest["failed_requests"]["total"] == 0
    assert second.fingerprint == first.manifest["fingerprint_complete"]
    assert store.require("skills").read_rows(quarantine=True) == []

    # complete now: a third plain run is skipped and sends nothing
    third, stub = _aggregate(store, [])
    assert third.skipped and len(stub.requests) == 0


def test_every_failed_distill_chunk_keeps_its_raw_output(tmp_path):
    """Two chunks of one trajectory both fail: the trajectory's quarantine row keeps the first
    chunk's raw output, a request row keeps the second's."""
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [heat_mug("traj-A")])  # 3 actions + synthetic done: step_index 0..3
    write_upstream(store, "memory", [], MEMORY_SCHEMA)
    write_upstream(store, "skills", [], SKILL_SCHEMA)
    with ChatStub([{"content": "no0"}, {"content": "no1"}, {"content": "no2"}, {"content": "no3"}]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.distill.max_steps_per_call = 2  # two chunks: traj-A#0 and traj-A#1
        res = run_stage("distill", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    rows = store.require("distill").read_rows(quarantine=True)
    assert [(q["item_id"], q["kind"], q["reason"], q["raw"]) for q in rows] == [
        ("traj-A", "unit", "not_json", "no1"), ("traj-A#1", "request", "not_json", "no3")]
    assert res.manifest["counts"]["quarantined"] == 1  # units: trajectories
    assert res.manifest["counts"]["quarantine_kinds"] == {"request": 1, "unit": 1}  # = the folder's rows by kind
    assert res.manifest["failed_requests"] == {"total": 2, "by_reason": {"not_json": 2},
                                               "keys": ["traj-A#0", "traj-A#1"], "final": 0}


def test_retry_failed_off_records_the_stage_complete(tmp_path):
    """llm.retry_failed = false: the failures stay quarantined and listed, but a plain rerun
    skips the stage (for a greedy local model whose failures would repeat)."""
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [heat_mug("traj-A")])
    write_upstream(store, "memory", [], MEMORY_SCHEMA)
    write_upstream(store, "skills", [], SKILL_SCHEMA)
    results = []
    for script in ([{"content": "no"}, {"content": "still no"}], []):
        with ChatStub(script) as stub:
            cfg = PipelineConfig(llm=stub_llm_config(stub, retry_failed=False))
            results.append(run_stage("distill", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None))
    first, again = results
    assert first.manifest["failed_requests"]["total"] == 1 and "fingerprint_complete" not in first.manifest
    assert again.skipped and len(stub.requests) == 0


def test_with_a_greedy_embedded_model_only_transport_failures_are_retried():
    """The embedded llama.cpp server at temperature 0 answers a request the same way every time:
    a request whose answer failed (length, not_json, schema, content rules) is final, and the
    stage is incomplete only for transport failures (a rerun of make run used to re-send 28
    such requests, ~13 min, to get the same failures)."""
    from pipeline.core.config import LLMConfig
    from pipeline.llm.types import JSONResult
    assert answers_repeat(LLMConfig()) and not answers_repeat(LLMConfig(temperature=0.7))
    assert not answers_repeat(LLMConfig(base_url="http://127.0.0.1:1/v1"))
    from pipeline.llm.server import EMBEDDED_MODEL_ALIAS  # the DAG's detached embedded server
    assert answers_repeat(LLMConfig(base_url="http://127.0.0.1:1/v1", model=EMBEDDED_MODEL_ALIAS))
    failed = [JSONResult("a", False, error="check_failed"), JSONResult("b", False, error="length")]
    final = failed_request_facts(failed, "fp", retry=True, only_transport=True)
    assert final == {"fingerprint": "fp", "failed_requests": {
        "total": 2, "by_reason": {"check_failed": 1, "length": 1}, "keys": ["a", "b"], "final": 2}}
    failed.append(JSONResult("c", False, error="timeout"))
    partly = failed_request_facts(failed, "fp", retry=True, only_transport=True)
    assert partly["fingerprint_complete"] == "fp" and partly["fingerprint"] != "fp"
    assert partly["failed_requests"]["final"] == 2 and partly["failed_requests"]["total"] == 3
    # a hosted endpoint (or temperature > 0): every failure is retried, as before
    every = failed_request_facts(failed, "fp", retry=True)
    assert every["failed_requests"]["final"] == 0 and every["fingerprint"] not in ("fp", partly["fingerprint"])

"""Fault injection at the STAGE level: memory and distill run through ``runner.run_stage`` with an
LLMClient on the scripted stub (bench/chat_stub.py). For each fault: counts reconcile (in = out +
quarantined), the quarantine row keeps the model's raw output and the reason, and the manifest's
LLM counters (calls, retries, repairs, failures, cache hits, tokens) are exact.

Requests are sequential (concurrency 1, retries and repairs happen inside the request's slot), so
the script is consumed in trajectory order: trajectory A (a success) meets the fault, trajectory B
(a failure) gets a good answer.
"""
from __future__ import annotations

import json

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.records import MEMORY_SCHEMA, SKILL_SCHEMA
from pipeline.engine.runner import StageFailed, run_stage
from tests.helpers.llm_stage_data import cool_apple, heat_mug, write_trajectories, write_upstream
from tests.helpers.llm_faults import GOOD_B, SUCCESS, TRUNCATED, llm_counts, stage_ctx, stub_llm_config
from bench.chat_stub import ChatStub


# (fault, script for trajectory A, A's quarantine (reason, raw) or None, counters)
SCENARIOS = [
    ("fenced_trailing_comma", [{"content": "```json\n" + json.dumps(SUCCESS)[:-1] + ",}\n```"}], None,
     {"calls": 2, "retries": 0, "repairs": 0, "failures": 0, "cache_hits": 0, "prompt_tokens": 20}),
    ("wrong_schema", [{"content": '{"summary": "x"}'}, {"content": '{"summary": "y"}'}],
     ("schema_invalid", '{"summary": "y"}'),
     {"calls": 3, "retries": 0, "repairs": 1, "failures": 1, "cache_hits": 0, "prompt_tokens": 30}),
    ("truncated", [{"content": TRUNCATED, "finish_reason": "length"}], ("length", TRUNCATED),
     {"calls": 2, "retries": 0, "repairs": 0, "failures": 1, "cache_hits": 0, "prompt_tokens": 20}),
    ("rate_limited", [{"status": 429, "headers": {"Retry-After": "1"}}, {"content": json.dumps(SUCCESS)}], None,
     {"calls": 3, "retries": 1, "repairs": 0, "failures": 0, "cache_hits": 0, "prompt_tokens": 20}),
    ("server_error", [{"status": 500}] * 3, ("http_error", ""),
     {"calls": 4, "retries": 2, "repairs": 0, "failures": 1, "cache_hits": 0, "prompt_tokens": 10}),
    ("slow", [{"sleep": 0.8, "content": json.dumps(SUCCESS)}] * 3, ("timeout", ""),
     {"calls": 4, "retries": 2, "repairs": 0, "failures": 1, "cache_hits": 0, "prompt_tokens": 10}),
    ("connection_reset", [{"reset": True}] * 3, ("connection_error", ""),
     {"calls": 4, "retries": 2, "repairs": 0, "failures": 1, "cache_hits": 0, "prompt_tokens": 10}),
]


@pytest.mark.parametrize("fault, script, quarantined, counters", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_memory_stage_under_fault(tmp_path, fault, script, quarantined, counters):
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [cool_apple("success", "traj-A"), cool_apple("failure", "traj-B")])
    with ChatStub(script + [GOOD_B]) as stub:
        # tolerate endpoint failures here to see them quarantined (the default fails the stage: below)
        cfg = PipelineConfig(llm=stub_llm_config(stub, max_endpoint_failure_rate=1.0))
        res = run_stage("memory", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    c = res.manifest["counts"]
    n_q = 0 if quarantined is None else 1
    assert (c["in"], c["out"], c["quarantined"]) == (2, 2 - n_q, n_q)
    assert c["quarantine_reasons"] == ({} if quarantined is None else {quarantined[0]: 1})
    assert llm_counts(res.manifest) == counters
    art = store.require("memory")
    assert [r["trajectory_id"] for r in art.read_rows()] == (["traj-A", "traj-B"] if n_q == 0 else ["traj-B"])
    if quarantined:
        [q] = art.read_rows(quarantine=True)
        assert (q["item_id"], q["reason"], q["raw"]) == ("traj-A", *quarantined)
        assert q["detail"]  # e.g. "HTTP 500: ..." or the schema error


def test_endpoint_outage_fails_the_stage_and_writes_nothing(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [cool_apple("success", "traj-A"), cool_apple("failure", "traj-B")])
    with ChatStub([{"status": 500}] * 3 + [GOOD_B]) as stub:  # A never gets an answer: 1 of 2 > 10 %
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        with pytest.raises(StageFailed, match=r"\[memory\] 1 of 2 items failed at the LLM endpoint after "
                                              r"retries \(http_error=1\)"):
            run_stage("memory", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    assert store.load("memory") is None  # not marked complete: a rerun retries it
    with ChatStub([{"content": json.dumps(SUCCESS)}]) as stub:  # endpoint back: only A is paid again
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        res = run_stage("memory", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    assert (res.manifest["counts"]["out"], res.manifest["llm"]["calls"], res.manifest["llm"]["cache_hits"]) == (2, 1, 1)


def test_rerun_pays_only_for_the_failures(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [cool_apple("success", "traj-A"), cool_apple("failure", "traj-B")])
    with ChatStub([{"content": "no"}, {"content": "still no"}, GOOD_B, {"content": json.dumps(SUCCESS)}]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        first = run_stage("memory", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
        # a rerun (fresh context = fresh client, as after a crash): B comes from the cache, A is asked again
        again = run_stage("memory", stage_ctx(store, cfg), model_id="stub-model", force=True, log=lambda s: None)
    assert first.manifest["counts"]["quarantine_reasons"] == {"not_json": 1}
    assert llm_counts(again.manifest) == {"calls": 1, "retries": 0, "repairs": 0, "failures": 0, "cache_hits": 1,
                                          "prompt_tokens": 10}
    assert (again.manifest["counts"]["out"], again.manifest["counts"]["quarantined"]) == (2, 0)
    assert len(stub.requests) == 4


def distill_run(tmp_path, script):
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [heat_mug("traj-A")])  # 3 actions + synthetic done: step_index 0..3
    write_upstream(store, "memory", [], MEMORY_SCHEMA)
    write_upstream(store, "skills", [], SKILL_SCHEMA)
    with ChatStub(script) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.distill.source_thoughts = "ignore"  # heat_mug records a thought at step 3: ask the LLM for all 4
        res = run_stage("distill", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    return res, store.require("distill"), stub


def thinks(indices, text="reason"):
    return json.dumps({"thinks": [{"step_index": i, "think": f"{text} {i}"} for i in indices]})


@pytest.mark.parametrize("indices", [[0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 1, 2], [0, 1, 3, 2]],
                         ids=["missing", "extra", "duplicated", "out_of_order"])
def test_distill_step_indices_repair_then_quarantine(tmp_path, indices):
    bad = thinks(indices)
    res, art, stub = distill_run(tmp_path, [{"content": bad}, {"content": bad}])
    assert res.manifest["counts"]["quarantine_reasons"] == {"schema_invalid": 1} and res.rows == 0
    [q] = art.read_rows(quarantine=True)
    assert (q["item_id"], q["raw"]) == ("traj-A", bad) and q["detail"].startswith("call traj-A#0: at thinks")
    assert llm_counts(res.manifest) == {"calls": 2, "retries": 0, "repairs": 1, "failures": 1, "cache_hits": 0,
                                        "prompt_tokens": 20}
    # the repair request fed the validation error back to the model
    assert stub.requests[1]["messages"][-1]["content"].startswith("Your answer was rejected (schema_invalid): at thinks")


def test_distill_repaired_answer_and_never_an_empty_think(tmp_path):
    empty = json.dumps({"thinks": [{"step_index": i, "think": "" if i == 2 else "ok"} for i in range(4)]})
    # (an on-topic text that names each action's object or receptacle: a think unrelated to its
    # step is quarantined off_topic or think_unrelated, pipeline.quality)
    res, art, _ = distill_run(tmp_path, [{"content": empty},
                                         {"content": thinks(range(4), "heat\nthe mug from the cabinet, step")}])
    assert (res.manifest["counts"]["out"], res.manifest["counts"]["quarantined"]) == (1, 0)
    [row] = art.read_rows()
    assert row["thinks"] == [{"step_index": i, "think": f"heat the mug from the cabinet, step {i}"} for i in range(4)]
    assert row["synthetic_done"] is True
    assert llm_counts(res.manifest)["repairs"] == 1

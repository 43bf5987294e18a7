"""Stage memory: schema per outcome, semantic check, trajectory rendering, rows, and one run on
the real embedded model (counts and lineage, not the model's wording)."""
from __future__ import annotations

import os

import jsonschema
import pytest

from tests.helpers.llm_stage_data import ROOM, cool_apple, embedded_llm, heat_mug, write_trajectories
from pipeline.core import lineage
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import MemoryConfig, PipelineConfig
from pipeline.llm.schemas import grammar_schema, load_schema
from pipeline.llm.types import JSONResult
from pipeline.engine.runner import run_stage
from pipeline.stage.llmstage import TRANSPORT_REASONS
from pipeline.stage.stage import StageContext
from pipeline.stages import memory
from pipeline.llm import templates as _templates

SUCCESS_VALUE = {
    "contextual_description": "Cool an apple, then place it on the countertop.",
    "refined_trajectory": [{"step_index": 2, "action": " take apple 1 from countertop 1",
                            "critical_observation": "apple 1 on countertop 1", "reasoning": "the goal object"}],
    "planning_pattern": " Search [Location] for [Object] -> Take [Object] -> Cool [Object] -> Place at [Target] ",
}
FAILURE_VALUE = {
    "contextual_description": "Cooling task failed: the agent went to the microwave.",
    "mistakes_to_avoid": [{"trigger_condition": "holding an object that must be cooled",
                           "bad_action": "went to the microwave instead of the fridge"}],
}


def test_schema_is_outcome_specific_and_bounds_step_numbers():
    ok = jsonschema.Draft202012Validator(memory.memory_schema("success", 6))
    assert ok.is_valid(SUCCESS_VALUE)
    # step 7 does not exist in a 6-action episode; a failure-shaped answer is not a success memory
    assert not ok.is_valid({**SUCCESS_VALUE, "refined_trajectory": [{**SUCCESS_VALUE["refined_trajectory"][0],
                                                                     "step_index": 7}]})
    assert not ok.is_valid(FAILURE_VALUE)
    bad = jsonschema.Draft202012Validator(memory.memory_schema("failure", 3))
    assert bad.is_valid(FAILURE_VALUE)
    assert not bad.is_valid({**FAILURE_VALUE, "mistakes_to_avoid": []})
    # the file form lets a real model write quotes and newlines; the grammar form sent to llama.cpp
    # bounds each string and keeps raw quotes/control characters out
    quoted = {**FAILURE_VALUE, "contextual_description": 'took the "wrong" door\nthen stopped'}
    assert bad.is_valid(quoted)
    assert not jsonschema.Draft202012Validator(grammar_schema(memory.memory_schema("failure", 3))).is_valid(quoted)
    assert not bad.is_valid({**FAILURE_VALUE, "contextual_description": "x" * 301})  # bound from the file
    assert memory.memory_schema("success", 2)["properties"]["refined_trajectory"]["items"]["properties"][
        "step_index"] == {"type": "integer", "enum": [0, 1, 2]}
    with pytest.raises(ValueError, match="unknown outcome 'partial'"):
        memory.memory_schema("partial", 3)


def test_check_enforces_outcome_content():
    assert memory.check_memory("success")(SUCCESS_VALUE) is None
    assert memory.check_memory("success")({**SUCCESS_VALUE, "planning_pattern": "   "}) == \
        "a successful episode needs a non-empty planning_pattern"
    assert memory.check_memory("failure")(FAILURE_VALUE) is None
    blank = {**FAILURE_VALUE, "mistakes_to_avoid": [{"trigger_condition": " ", "bad_action": "x"}]}
    assert memory.check_memory("failure")(blank) == \
        "a failed episode needs at least one mistake with trigger_condition and bad_action"
    assert memory.check_memory("failure")({**FAILURE_VALUE, "contextual_description": " "}) == \
        "contextual_description is blank"


def test_render_trajectory_full_and_elided():
    full = memory.render_trajectory(heat_mug(), 6000)
    assert full == (f"0 | start\nObs: {ROOM}\n\n"
                    "1 | Action: go to cabinet 1 | Reward: 0.0 | Done: False\n"
                    "Obs: The cabinet 1 is open. In it, you see a mug 1.\n\n"
                    "2 | Action: take mug 1 from cabinet 1 | Reward: 0.0 | Done: False\n"
                    "Obs: You pick up the mug 1 from the cabinet 1.\n\n"
                    "3 | Action: heat mug 1 with microwave 1 | Reward: 10.0 | Done: True\n"
                    "Obs: You heat the mug 1 using the microwave 1.")
    # 400 chars: observations clipped to 80 (start and end of each kept), the start and the last two actions kept
    short = memory.render_trajectory(cool_apple(), 400)
    assert short == ("0 | start\nObs: You are in the middle of a room. Looking ... microwave 1, and a sinkbasin 1."
                     "\n\n... (steps 1-4 elided) ...\n\n"
                     "5 | Action: go to countertop 1 | Reward: 0.0 | Done: False\n"
                     "Obs: On the countertop 1, you see a knife 1.\n\n"
                     "6 | Action: put apple 1 in/on countertop 1 | Reward: 10.0 | Done: True\n"
                     "Obs: You put the apple 1 in/on the countertop 1.")
    assert len(short) <= 400


def test_request_and_row_lineage():
    traj = cool_apple("failure", "traj-f")
    req = memory.build_request(traj, MemoryConfig())
    assert req.key == "traj-f" and req.schema_name == "memory_failure"
    assert "Goal: cool some apple and put it in countertop.\nOutcome: Failure" in req.messages[1]["content"]
    assert "The episode FAILED." in req.messages[0]["content"]
    row = memory.memory_row(traj, FAILURE_VALUE, "m@1")
    content = {"contextual_description": FAILURE_VALUE["contextual_description"], "refined_trajectory": [],
               "planning_pattern": "", "mistakes_to_avoid": FAILURE_VALUE["mistakes_to_avoid"]}
    assert row["memory_id"] == lineage.memory_id("traj-f", content)
    assert (row["trajectory_id"], row["category"], row["outcome"], row["model"]) == ("traj-f", "cool", "failure", "m@1")
    assert row["prompt_sha"] == _templates.load("memory", "alfworld").sha
    srow = memory.memory_row(cool_apple(), SUCCESS_VALUE, "m@1")
    assert srow["planning_pattern"] == "Search [Location] for [Object] -> Take [Object] -> Cool [Object] -> Place at [Target]"
    assert srow["refined_trajectory"][0]["action"] == "take apple 1 from countertop 1"


class OneFailure:
    """A client that answers the failure's request and fails the success's (``not_json``)."""
    model_id = "m@1"

    def complete_json_many(self, requests, desc=""):
        return [JSONResult(r.key, True, value=FAILURE_VALUE) if r.key == "traj-f" else
                JSONResult(r.key, False, raw="{oops", error="not_json", detail="no JSON") for r in requests]


def test_stage_rows_and_quarantine(tmp_path):
    store = ArtifactStore(str(tmp_path), "r")
    write_trajectories(store, [cool_apple("failure", "traj-f"), cool_apple("success", "traj-s")])
    out = memory.STAGE.run(StageContext(store, PipelineConfig(), llm_factory=OneFailure))
    assert [(r["trajectory_id"], r["model"]) for r in out.rows] == [("traj-f", "m@1")]
    [q] = out.quarantine  # the unit's row keeps the one failed request's raw output: no request row
    assert (q.stage, q.kind, q.reason, q.detail, q.item_id, q.raw, q.source_uri, q.line) == \
        ("memory", "unit", "not_json", "no JSON", "traj-s", "{oops", "rollouts/env001/test1.txt", 1)
    assert [r.key for r in out.failed_requests] == ["traj-s"]
    assert (out.rows_in, out.counters["success"], out.counters["failure"], out.counters["quality"]["items"]) == \
        (2, 0, 1, 2)


def test_schema_is_derived_from_the_file():
    # one source of truth: the per-outcome schema reuses the file's field schemas verbatim
    file_props = load_schema("memory")["properties"]
    derived = memory.memory_schema("failure", 3)["properties"]
    assert derived == {k: {**file_props[k], **({"minItems": 1} if k == "mistakes_to_avoid" else {})}
                       for k in ("contextual_description", "mistakes_to_avoid")}
    assert file_props["contextual_description"]["maxLength"] == 300


def test_prompt_files_cover_every_env_template_and_the_schema():
    names = [p.split("/pipeline/templates/")[-1].split("/schemas/")[-1] for p in memory.STAGE.prompt_files(None)]
    assert names == ["memory.txt", "memory.alfworld.txt", "memory.default.txt", "memory.search.txt",
                     "memory.textworld.txt", "memory.webshop.txt", "memory.schema.json"]
    # unique basenames: the runner keys template hashes by basename
    assert len({p.rsplit("/", 1)[1] for p in memory.STAGE.prompt_files(None)}) == 7


def test_empty_input_needs_no_llm(tmp_path):
    store = ArtifactStore(str(tmp_path), "r")
    write_trajectories(store, [])

    def no_llm():
        raise AssertionError("the LLM must not be started for an empty input")
    res = run_stage("memory", StageContext(store, PipelineConfig(), llm_factory=no_llm), log=lambda s: None)
    assert res.manifest["counts"] == {"in": 0, "units_in": 0, "units_out": 0, "out": 0, "quarantined": 0,
                                      "quarantine_reasons": {}, "quarantine_kinds": {}}


@pytest.mark.slow
def test_run_on_embedded_model(tmp_path):
    store = ArtifactStore(str(tmp_path / "art"), "r1")
    trajs = [cool_apple("success", "traj-s1"), heat_mug("traj-s2"), cool_apple("failure", "traj-f1")]
    write_trajectories(store, trajs)
    with embedded_llm(str(tmp_path / "log")) as client:
        ctx = StageContext(store, PipelineConfig(), llm_factory=lambda: client)
        res = run_stage("memory", ctx, model_id=client.model_id, log=lambda s: None)
        again = run_stage("memory", ctx, model_id=client.model_id, log=lambda s: None)
    counts = res.manifest["counts"]
    assert counts["in"] == 3 and counts["out"] + counts["quarantined"] == 3
    # the embedded server samples greedily: a request whose answer failed would get the same
    # answer again, so such failures are final and the plain rerun is skipped (only a transport
    # failure would make the stage incomplete)
    failed = res.manifest["failed_requests"]
    transport = sum(n for reason, n in failed["by_reason"].items() if reason in TRANSPORT_REASONS)
    assert counts["quarantined"] == failed["total"] and failed["final"] == failed["total"] - transport
    assert ("fingerprint_complete" in res.manifest) == (transport > 0)
    assert again.skipped == (transport == 0)
    art = store.require("memory")
    rows, quarantined = art.read_rows(), art.read_rows(quarantine=True)
    by_traj = {t.trajectory_id: t for t in trajs}
    assert sorted([r["trajectory_id"] for r in rows] + [q["item_id"] for q in quarantined]) == sorted(by_traj)
    for r in rows:
        content = {k: r[k] for k in ("contextual_description", "refined_trajectory", "planning_pattern",
                                     "mistakes_to_avoid")}
        assert r["memory_id"] == lineage.memory_id(r["trajectory_id"], content)
        assert r["outcome"] == by_traj[r["trajectory_id"]].outcome
        assert r["model"] == client.model_id and r["prompt_sha"] == _templates.load("memory", "alfworld").sha
        if r["outcome"] == "success":
            assert r["planning_pattern"].strip() and r["mistakes_to_avoid"] == []
        else:
            assert r["mistakes_to_avoid"] and r["refined_trajectory"] == [] and r["planning_pattern"] == ""
    assert res.manifest["llm"]["calls"] >= 3


"""Stage distill: the per-call schema that forces step indices, the 1:1 check, step entries
with the synthetic done, chunking, and one run on the real embedded model."""
from __future__ import annotations

import json
import os

import jsonschema
import pytest

from pipeline import prompts, quality, rules
from pipeline.bank import rows as skillbank
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import DistillConfig, PipelineConfig
from pipeline.llm.schemas import grammar_schema
from pipeline.core.records import MEMORY_SCHEMA, SKILL_SCHEMA
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext
from pipeline.stages import distill
from pipeline.llm import templates as _templates
from tests.helpers.llm_stage_data import cool_apple, embedded_llm, heat_mug, write_trajectories, write_upstream
from bench.chat_stub import ChatStub
from tests.helpers.llm_faults import stage_ctx, stub_llm_config
from tests.helpers.paths import FIXTURES

ALFWORLD_BANK = os.path.join(FIXTURES, "skillrl-memory", "alfworld",
                             "claude_style_skills.json")


def test_schema_forces_exact_indices():
    v = jsonschema.Draft202012Validator(distill.thinks_schema([3, 4], 20))
    assert v.is_valid({"thinks": [{"step_index": 3, "think": "find the apple"}, {"step_index": 4, "think": "done"}]})
    for bad in ([{"step_index": 3, "think": "a"}],                                               # missing
                [{"step_index": 4, "think": "a"}, {"step_index": 3, "think": "b"}],              # order
                [{"step_index": 3, "think": "a"}, {"step_index": 4, "think": "b"}, {"step_index": 5, "think": "c"}],
                [{"step_index": 3, "think": "a"}, {"step_index": 4, "think": ""}],               # empty
                [{"step_index": 3, "think": "a"}, {"step_index": 4, "think": "x" * 21}],         # too long
                ):
        assert not v.is_valid({"thinks": bad}), bad
    # tags and newlines: refused by the grammar form (llama.cpp) only; the check rejects tags everywhere
    tagged = {"thinks": [{"step_index": 3, "think": "a"}, {"step_index": 4, "think": "<action>go</action>"}]}
    assert v.is_valid(tagged)
    g = jsonschema.Draft202012Validator(grammar_schema(distill.thinks_schema([3, 4], 20)))
    assert not g.is_valid(tagged)
    assert not g.is_valid({"thinks": [{"step_index": 3, "think": "a"}, {"step_index": 4, "think": "line\nbreak"}]})
    assert distill.check_thinks([3, 4], 20)(tagged) == "think for step 4 contains a tag; write plain text"
    think = distill.thinks_schema([3, 4], 20)["properties"]["thinks"]["prefixItems"][1]["properties"]["think"]
    assert (think["maxLength"], think["x-grammar-forbid"]) == (20, "<>{}")  # x-grammar-forbid from the file


def test_check_reports_alignment_and_content_errors():
    check = distill.check_thinks([0, 1, 2], 50)
    ok = {"thinks": [{"step_index": i, "think": f"reason {i}"} for i in range(3)]}
    assert check(ok) is None
    assert check({"thinks": [{"step_index": 1, "think": "a"}, {"step_index": 2, "think": "b"},
                             {"step_index": 3, "think": "c"}]}) == \
        "step_index must be exactly [0, 1, 2]: duplicate [], missing [0], extra [3]"
    assert check({"thinks": [{"step_index": 0, "think": "a"}, {"step_index": 0, "think": "b"},
                             {"step_index": 1, "think": "c"}, {"step_index": 2, "think": "d"}]}) == \
        "step_index must be exactly [0, 1, 2]: duplicate [0], missing [], extra []"
    assert check({"thinks": [{"step_index": 1, "think": "a"}, {"step_index": 0, "think": "b"},
                             {"step_index": 2, "think": "c"}]}) == "step_index must be in order [0, 1, 2], got [1, 0, 2]"
    bad = json.loads(json.dumps(ok))
    bad["thinks"][1]["think"] = "I will <think>"
    assert check(bad) == "think for step 1 contains a tag; write plain text"
    bad["thinks"][1]["think"] = "去拿苹果"
    assert check(bad) == "think for step 1 contains CJK characters; write English"
    bad["thinks"][1]["think"] = "  "
    assert check(bad) == "think for step 1 is blank"


def test_step_entries_index_convention_and_synthetic_done():
    traj = heat_mug()
    entries = distill.step_entries(traj, ["look", "done"])
    # entry i shows steps[i] and the action steps[i+1].action; the synthetic done gets index n_actions
    assert [(e["step_index"], e["action"]) for e in entries] == [
        (0, "go to cabinet 1"), (1, "take mug 1 from cabinet 1"), (2, "heat mug 1 with microwave 1"), (3, "done")]
    assert entries[1]["observation"] == "The cabinet 1 is open. In it, you see a mug 1."
    assert entries[2]["hint"] == "I need to heat the mug first."  # the recorded ReAct thought of action 2
    assert entries[3]["observation"] == "You heat the mug 1 using the microwave 1."
    assert entries[3]["admissible"] == ["look", "done"]
    # where things stand before each action, from the observations so far
    assert entries[0]["state"].startswith("in the middle of the room, holding nothing; no mug seen yet.")
    assert entries[1]["state"] == ("at cabinet 1, holding nothing; mug 1 was seen at cabinet 1. "
                                   "Still to do: take it, heat it with a microwave, put it in/on a cabinet.")
    assert len(distill.step_entries(traj, None)) == 3
    # the action comes first: shown after the observation, the teacher explained the observation's action
    assert distill.render_entry(entries[2]) == (
        "[step_index 2] Action to explain: heat mug 1 with microwave 1\n"
        "What it does: heats mug 1 with microwave 1\n"
        "Where things stand: at cabinet 1, holding mug 1. Still to do: heat it with a microwave, put it in/on a cabinet.\n"
        "Observation before it: You pick up the mug 1 from the cabinet 1.\n"
        "Admissible actions: go to microwave 1, put mug 1 in/on cabinet 1\n"
        "Recorded thought (hint): I need to heat the mug first.")


def test_long_trajectories_are_chunked():
    traj = cool_apple()  # 6 actions + synthetic done = 7 entries
    entries = distill.step_entries(traj, prompts.synthetic_done_admissible(traj, 0))
    reqs = distill.build_requests(traj, entries, "", max_steps=3, max_chars=100)
    assert [r.key for r in reqs] == ["traj-cool-1#0", "traj-cool-1#1", "traj-cool-1#2"]
    assert [[p["properties"]["step_index"]["const"] for p in r.schema["properties"]["thinks"]["prefixItems"]]
            for r in reqs] == [[0, 1, 2], [3, 4, 5], [6]]
    user = reqs[1].messages[1]["content"]
    assert "Earlier actions (already explained): go to countertop 1; take apple 1 from countertop 1; " \
           "go to fridge 1\n\nSteps:\n[step_index 3]" in user
    assert "Retrieved skills:\n(none)" in user and "Task: cool some apple and put it in countertop." in user
    assert reqs[2].check({"thinks": [{"step_index": 6, "think": "the apple is in place, so finish"}]}) is None


def test_a_step_asked_after_a_recorded_thought_sees_that_action_among_the_earlier_ones():
    """Step 2 of the heat-mug trajectory has a recorded thought and is not asked; the call for the
    synthetic done after it still lists the heat among the earlier actions (without it, a WebShop
    buy asked alone after a recorded product click was explained as a new search)."""
    traj = heat_mug()
    entries = distill.step_entries(traj, ["look", "done"])
    asked = [e for e in entries if not e["hint"]]
    assert [e["step_index"] for e in asked] == [0, 1, 3]
    reqs = distill.build_requests(traj, asked, "", max_steps=2, max_chars=100)
    assert "Earlier actions" not in reqs[0].messages[1]["content"]
    assert "Earlier actions (already explained): go to cabinet 1; take mug 1 from cabinet 1; heat mug 1 with " \
           "microwave 1\n\nSteps:\n[step_index 3]" in reqs[1].messages[1]["content"]
    assert distill.earlier_actions(traj, 1) == ["go to cabinet 1"]



def test_a_step_asked_alone_is_judged_against_the_thinks_kept_from_other_calls():
    """The one-step request for step 1 rejects a think that repeats the think its trajectory keeps
    for step 0 (from another call), and takes one that explains its own step."""
    traj = heat_mug()
    entries = distill.step_entries(traj, ["look", "done"])
    ep = distill.Episode(traj, [], True, {}, chunks=[entries])
    kept = ((0, "I need a mug first; cabinets often hold mugs, so I go to cabinet 1 to look."),)
    qcfg = PipelineConfig().quality
    req = distill.step_request(ep, entries[1], 200, qcfg, quality.Tally(qcfg.flag_rules), others=kept)
    assert req.key == "traj-heat-1#s1"
    assert "reused_think" in str(req.check({"thinks": [{"step_index": 1, "think": kept[0][1]}]}))
    assert req.check({"thinks": [{"step_index": 1, "think": "Cabinet 1 holds a mug, so I take mug 1 to heat "
                                                            "it."}]}) is None


def test_one_step_answers_that_repeat_each_other_are_asked_again():
    """One-step calls are answered side by side and cannot see each other: when the later answer
    repeats an earlier one (or a think kept from another call), it becomes a failed check that
    sampling asks again; an answer of its own stays."""
    from pipeline.llm.types import JSONResult
    from pipeline.stage.llmstage import Job
    traj = heat_mug()
    ep = distill.Episode(traj, [], True, {})
    same = "Drawer 4 is the last place left, so I will look at drawer 4 for the mug."

    def answer(i, think):
        return JSONResult(f"{traj.trajectory_id}#s{i}", True, value={"thinks": [{"step_index": i, "think": think}]})
    job = Job(ep, traj.trajectory_id, results=[answer(0, same), answer(1, same),
                                               answer(3, "The mug is hot and in the cabinet, so I am done.")])
    tally = quality.Tally(frozenset())
    distill.reject_repeats(job, (), tally)
    assert [(r.ok, r.error) for r in job.results] == [(True, ""), (False, "check_failed"), (True, "")]
    assert job.results[1].detail.startswith("reused_think: the think for step 1 repeats the think for step 0")
    assert tally.rejected["reused_think"] == 1
    assert distill.answered_steps(job) == ((0, same), (3, "The mug is hot and in the cabinet, so I am done."))
    # against a think kept from a chunk, the first one-step answer is the repeat
    job.results = [answer(1, same)]
    distill.reject_repeats(job, ((0, same),), quality.Tally(frozenset()))
    assert not job.results[0].ok

def test_failures_are_not_distilled_and_need_no_llm(tmp_path):
    store = ArtifactStore(str(tmp_path), "r")
    write_trajectories(store, [cool_apple("failure", "traj-f")])
    write_upstream(store, "memory", [], MEMORY_SCHEMA)
    write_upstream(store, "skills", [], SKILL_SCHEMA)

    def no_llm():
        raise AssertionError("no success: the LLM must not be started")
    res = run_stage("distill", StageContext(store, PipelineConfig(), llm_factory=no_llm), log=lambda s: None)
    assert res.manifest["counts"]["quarantine_reasons"] == {"not_success": 1} and res.rows == 0
    q = store.require("distill").read_rows(quarantine=True)[0]
    assert (q["item_id"], q["detail"]) == ("traj-f", "outcome failure: used for memories, not SFT")


def test_cjk_punctuation_is_rejected_as_build_pairs_would(tmp_path):
    """A think with an ideographic comma (U+3001, CJK punctuation) was accepted by distill's own
    regex and then quarantined by build_pairs as think_has_cjk; distill now uses pipeline.rules:
    the answer is sent back once for repair, then the trajectory is quarantined with the raw."""
    thinks = ["I go to the cabinet 1 to look for the mug、it may be there.", "I take the mug 1 from the cabinet 1.",
              "I heat the mug 1 with the microwave 1.", "The mug is heated and in place, so I am done."]
    answer = json.dumps({"thinks": [{"step_index": i, "think": t} for i, t in enumerate(thinks)]})
    assert rules.has_cjk(thinks[0])  # what build_pairs would quarantine as think_has_cjk
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [heat_mug("traj-A")])  # 3 actions + synthetic done: step_index 0..3
    write_upstream(store, "memory", [], MEMORY_SCHEMA)
    write_upstream(store, "skills", [], SKILL_SCHEMA)
    with ChatStub([{"content": answer}, {"content": answer}]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.distill.source_thoughts = "ignore"
        res = run_stage("distill", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    assert len(stub.requests) == 2 and res.rows == 0  # the first answer and one repair
    [q] = store.require("distill").read_rows(quarantine=True)
    assert (q["item_id"], q["reason"], q["raw"]) == ("traj-A", "check_failed", answer)
    assert q["detail"] == "call traj-A#0: think for step 0 contains CJK characters; write English"


@pytest.mark.slow
def test_run_on_embedded_model(tmp_path):
    store = ArtifactStore(str(tmp_path / "art"), "r1")
    trajs = [cool_apple("success", "traj-s1"), heat_mug("traj-s2"), cool_apple("failure", "traj-f1")]
    write_trajectories(store, trajs)
    memories = [{"memory_id": f"mem-{t.trajectory_id}", "trajectory_id": t.trajectory_id, "env": "alfworld",
                 "category": t.category, "outcome": t.outcome, "task": t.task, "contextual_description": "d",
                 "refined_trajectory": [], "planning_pattern": "p" if t.success else "",
                 "mistakes_to_avoid": [], "model": "m", "prompt_sha": "s"} for t in trajs]
    write_upstream(store, "memory", memories, MEMORY_SCHEMA)
    with open(ALFWORLD_BANK, encoding="utf-8") as f:
        bank = skillbank.from_skillrl_json(json.load(f), "alfworld")
    write_upstream(store, "skills", bank, SKILL_SCHEMA)
    cfg = PipelineConfig(distill=DistillConfig(max_steps_per_call=4, max_think_chars=120))
    with embedded_llm(str(tmp_path / "log")) as client:
        res = run_stage("distill", StageContext(store, cfg, llm_factory=lambda: client),
                        model_id=client.model_id, log=lambda s: None)
    counts = res.manifest["counts"]
    assert counts["in"] == 3 and counts["out"] + counts["quarantined"] == 3
    assert counts["quarantine_reasons"].get("not_success") == 1
    assert res.manifest["counters"]["calls"] == 3  # 7 entries -> 2 chunks of 4; 4 entries -> 1 chunk
    rows = store.require("distill").read_rows()
    by_id = {t.trajectory_id: t for t in trajs}
    for r in rows:
        t = by_id[r["trajectory_id"]]
        n = len(t.steps) - 1 + (1 if r["synthetic_done"] else 0)
        assert r["synthetic_done"] is True  # both successes end with an admissible list
        assert [x["step_index"] for x in r["thinks"]] == list(range(n))
        assert all(0 < len(x["think"]) <= 120 for x in r["thinks"])
        assert r["memory_ids"] == [f"mem-{t.trajectory_id}"] and r["bank_version"] == bank[0]["bank_version"]
        expected = prompts.select_skills(bank, "alfworld", t.category, cfg.prompt)
        assert r["skill_ids_used"] == [s["skill_id"] for s in expected] and r["skill_ids_used"]
        assert r["model"] == client.model_id and r["prompt_sha"] == _templates.load("distill", "alfworld").sha


def test_prompt_keeps_when_to_apply_and_why_it_happens():
    # the single renderer (prompts.render_skills_block) is what distill puts in its prompt (D-K3)
    with open(ALFWORLD_BANK, encoding="utf-8") as f:
        bank = skillbank.from_skillrl_json(json.load(f), "alfworld")
    traj = heat_mug()
    skills = prompts.select_skills(bank, "alfworld", "heat", PipelineConfig().prompt)
    [req] = distill.build_requests(traj, distill.step_entries(traj, None), prompts.render_skills_block(skills), 8, 200)
    user = req.messages[1]["content"]
    first = next(s for s in skills if s["kind"] == "general")
    mistake = next(s for s in skills if s["kind"] == "mistake")
    assert f"- **{first['title']}**: {first['principle']}\n  _Apply when: {first['when_to_apply']}_" in user
    assert f"_Why it happens: {mistake['why_it_happens']}_" in user


def test_textworld_worked_example_agrees_with_the_map_line_and_passes_the_think_rules():
    """The TextWorld distill template's worked example is a real game state: its "Where things
    stand" lines are what :mod:`pipeline.verify.textworld_progress` writes for those observations,
    and its good answer breaks none of the rules a teacher's answer is judged by."""
    import re
    from pipeline.core.records import Step, Trajectory
    living = ("You are in the living room. In one part of the room you see a sofa, that has nothing on it. "
              "To the East you see the bathroom. To the North you see the kitchen.")
    moves = [(None, living),
             ("move east", "You are in the bathroom. In one part of the room you see a toilet. There is also a "
                           "bath mat. To the West you see the living room."),
             ("move west", living),
             ("move north", "You are in the kitchen. In one part of the room you see a stove. There is also a coin. "
                            "To the South you see the living room."),
             ("take coin", "You take the coin.")]
    traj = Trajectory("tw-example", "textworld", "coin-train-0",
                      "search the environment and find the coin.  Once you find the coin, take it.", "find_coin",
                      "success", 1.0, [Step(i, a, o) for i, (a, o) in enumerate(moves)], "", "", 0)
    text = open(os.path.join(_templates.TEMPLATE_DIR, "distill.textworld.txt")).read()
    shown = re.findall(r"^Where things stand: (.*)$", text, re.M)
    entries = distill.step_entries(traj, None)
    assert shown == [e["state"] for e in entries]
    answer = json.loads(text[text.index('{"thinks"'):])
    assert [t["step_index"] for t in answer["thinks"]] == [0, 1, 2, 3]
    found = distill.think_violations(answer["thinks"], {e["step_index"]: e for e in entries}, traj,
                                     PipelineConfig().quality)
    # each think copies the worked example, of course; nothing else may fire
    assert [v.reason for v in found if "worked example" in v.detail] == ["echo_prompt"] * 4
    assert [v for v in found if "worked example" not in v.detail] == []

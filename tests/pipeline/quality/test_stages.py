"""Content rules inside the LLM stages: real sample trajectories (the SkillRL rollouts
of ``data/samples/skillrl-rollouts/env000``: a success, "cool some cup and put it in
diningtable", 6 actions; a failure, "cool some vase and put it in fridge") and crafted answers
served by the scripted stub. Each case asserts the exact quarantine reason, the repair round and
the manifest's quality record; counts reconcile (runner's invariant)."""
from __future__ import annotations

import json

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.records import MEMORY_SCHEMA
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext
from tests.helpers.llm_stage_data import write_upstream
from bench.chat_stub import ChatStub
from tests.helpers.llm_faults import stage_ctx, stub_llm_config
from tests.helpers.quality_data import answer, distill_store, parsed_sample

COOL_CUP, VASE = "cool some cup and put it in diningtable.", "cool some vase and put it in fridge."


@pytest.fixture()
def sample_store(tmp_path):
    """parse + dedupe of the real env000 rollouts into a tmp store; returns (store, {task: trajectory id})
    (ids hash the source path, so the tests name the two trajectories by their task)."""
    store, trajs = parsed_sample(tmp_path, "skillrl-rollouts/env000", "env000")
    assert [(t.task, t.outcome, len(t.steps) - 1) for t in trajs] == [(COOL_CUP, "success", 6), (VASE, "failure", 6)]
    return store, {t.task: t.trajectory_id for t in trajs}


def run_with(store, stage, script):
    with ChatStub(script) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        res = run_stage(stage, stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    return res, store.require(stage), stub


GROUNDED = {"contextual_description": "Cool a cup: found it on the countertop and moved it to the dining table.",
            "refined_trajectory": [{"step_index": 4, "action": "take cup 3 from countertop 2",
                                    "critical_observation": "On the countertop 2, you see a cup 3",
                                    "reasoning": "the cup is the object of the task"}],
            "planning_pattern": "Search [Location] for [Object] -> Take [Object] -> Go to [Target] -> Place [Object]"}
# the 135M model's answer: an action that never happened, at a step index that does not hold it
UNGROUNDED = dict(GROUNDED, refined_trajectory=[dict(GROUNDED["refined_trajectory"][0],
                                                     action="take toiletpaper 1 from toilet 1's trash can")])
GOOD_FAILURE = {"contextual_description": "Cooling a vase failed: the agent never used the fridge.",
                "mistakes_to_avoid": [{"trigger_condition": "holding the vase that must be cooled",
                                       "bad_action": "examined the desk instead of cooling the vase in the fridge"}]}
DIET = dict(GOOD_FAILURE, mistakes_to_avoid=[{"trigger_condition": "eating as a child",
                                              "bad_action": "a childhood diet with too much sugar"}])


def test_memory_ungrounded_step_is_repaired_and_an_off_topic_mistake_quarantined(sample_store):
    store, ids = sample_store
    res, art, stub = run_with(store, "memory", [answer(UNGROUNDED), answer(GROUNDED), answer(DIET), answer(DIET)])
    counts = res.manifest["counts"]
    assert (counts["in"], counts["out"], counts["quarantine_reasons"]) == (2, 1, {"off_topic": 1})
    [row] = art.read_rows()
    assert row["trajectory_id"] == ids[COOL_CUP] and row["refined_trajectory"][0]["action"] == "take cup 3 from countertop 2"
    [q] = art.read_rows(quarantine=True)
    assert (q["item_id"], q["raw"]) == (ids[VASE], json.dumps(DIET))
    assert q["detail"].startswith("off_topic: mistakes_to_avoid[0] 'eating as a child: a childhood diet with too much "
                                  "sugar' is off topic (similarity ")
    # the repair request fed the grounding error back, naming the recorded action
    assert stub.requests[1]["messages"][-1]["content"].startswith(
        "Your answer was rejected (check_failed): ungrounded_step: refined_trajectory[0]: step 4's recorded action "
        "is 'take cup 3 from countertop 2', not \"take toiletpaper 1 from toilet 1's trash can\"")
    assert res.manifest["counters"]["quality"] == {
        "items": 2, "quarantined": {"off_topic": 1}, "rate": {"off_topic": 0.5},
        "rejected_answers": {"off_topic": 2, "ungrounded_step": 1}, "flagged": {}, "repaired": {}}
    assert res.manifest["llm"]["repairs"] == 2


def test_memory_quarantines_ungrounded_and_degenerate_answers(sample_store):
    store, ids = sample_store
    soup = dict(GOOD_FAILURE, contextual_description="1.25 }]} 3.75")
    res, art, _ = run_with(store, "memory", [answer(UNGROUNDED)] * 2 + [answer(soup)] * 2)
    assert res.manifest["counts"]["quarantine_reasons"] == {"no_words": 1, "ungrounded_step": 1}
    q = {r["item_id"]: r for r in art.read_rows(quarantine=True)}
    assert q[ids[COOL_CUP]]["reason"] == "ungrounded_step" and q[ids[COOL_CUP]]["raw"] == json.dumps(UNGROUNDED)
    assert q[ids[VASE]]["detail"] == "no_words: contextual_description is not text (numbers or symbols): '1.25 }]} 3.75'"
    assert res.manifest["counters"]["quality"]["rate"] == {"no_words": 0.5, "ungrounded_step": 0.5}


def test_flag_rules_count_instead_of_quarantining(sample_store):
    store, _ = sample_store
    with ChatStub([answer(UNGROUNDED), answer(GOOD_FAILURE)]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.quality.flag_rules = ["ungrounded_step"]
        res = run_stage("memory", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    assert (res.manifest["counts"]["out"], res.manifest["counts"]["quarantined"]) == (2, 0)
    assert res.manifest["counters"]["quality"]["flagged"] == {"ungrounded_step": 1}


# distill: 6 actions + the synthetic done (ALFWorld with admissible lists) = entries 0..6, one call
ACTIONS = ["go to desk 4", "go to sidetable 4", "go to countertop 2", "take cup 3 from countertop 2",
           "go to diningtable 4", "move cup 3 to diningtable 4", "done"]


def thinks(over=None):
    texts = [f"To progress, I {a} now." for a in ACTIONS]  # distinct: no shared run of 6 tokens
    for i, t in (over or {}).items():
        texts[i] = t
    return answer({"thinks": [{"step_index": i, "think": t} for i, t in enumerate(texts)]})


def test_distill_future_leak_repaired(sample_store):
    store, _ = sample_store
    # entry 0 sees only the room: "cup 3" first appears in the observation after "go to desk 4"
    leak = thinks({0: "Go to desk 4 to pick up cup 3."})
    res, art, stub = run_with(distill_store(store), "distill", [leak, thinks()])
    assert res.manifest["counts"]["quarantine_reasons"] == {"not_success": 1}
    assert [t["think"] for t in art.read_rows()[0]["thinks"]][0] == "To progress, I go to desk 4 now."
    assert "future_leak: the think for step 0 names cup 3, which the agent has not seen yet" in \
        stub.requests[1]["messages"][-1]["content"]
    assert res.manifest["counters"]["quality"]["rejected_answers"] == {"future_leak": 1}


# the off_topic think shares "see" with the observations ("you see a ..."), so ungrounded_think
# passes it and the embedding rule is the one that rejects it; it explains the synthetic done (a
# command's think that names neither its verb nor its arguments is think_unrelated first)
@pytest.mark.parametrize("over,reason", [({2: "1.25"}, "no_words"),
                                         ({3: "To progress, I go to desk 4 now."}, "reused_think"),
                                         ({4: "take take take take take take"}, "ngram_loop"),
                                         ({6: "The weather is nice today and I like football, you see."}, "off_topic"),
                                         ({5: "The weather is nice today and I like football, you see."},
                                          "think_unrelated")])
def test_distill_degenerate_think_quarantines_the_trajectory(sample_store, over, reason):
    store, ids = sample_store
    bad = thinks(over)
    res, art, _ = run_with(distill_store(store), "distill", [bad, bad])
    assert res.manifest["counts"]["quarantine_reasons"] == {"not_success": 1, reason: 1}
    q = {r["item_id"]: r for r in art.read_rows(quarantine=True)}
    assert q[ids[COOL_CUP]]["reason"] == reason and q[ids[COOL_CUP]]["raw"] == bad["content"]
    assert res.manifest["counters"]["quality"]["quarantined"] == {reason: 1}
    assert res.manifest["counters"]["quality"]["rate"] == {reason: 0.5}


# distill.source_thoughts on the real ETO sample: every step of "put a toiletpaper in
# toiletpaperhanger" carries the thought the ETO agent recorded (5 actions, no admissible lists)
@pytest.fixture()
def eto_store(tmp_path):
    store, rows = parsed_sample(tmp_path, "eto-alfworld", "eto")
    trajs = {t.task: t for t in rows}
    return distill_store(store), trajs["put a toiletpaper in toiletpaperhanger."]


def test_recorded_thoughts_are_preferred_and_flagged(eto_store):
    store, traj = eto_store
    assert [bool(s.thought) for s in traj.steps[1:]] == [True] * 5

    def no_llm():
        raise AssertionError("every step has a usable recorded thought: no LLM call")
    cfg = PipelineConfig()
    res = run_stage("distill", StageContext(store, cfg, llm_factory=no_llm), log=lambda s: None)
    row = next(r for r in store.require("distill").read_rows() if r["trajectory_id"] == traj.trajectory_id)
    assert row["model"] == "source"
    assert [t["think"] for t in row["thinks"]] == [" ".join(s.thought.split()) for s in traj.steps[1:]]
    assert res.manifest["counters"]["recorded_thoughts"] == sum(
        len(r["thinks"]) for r in store.require("distill").read_rows())
    run_stage("build_pairs", StageContext(store, cfg), log=lambda s: None)
    pairs = [p for p in store.require("build_pairs").read_rows() if p["trajectory_id"] == traj.trajectory_id]
    assert pairs and all("recorded_thought" in p["flags"] for p in pairs)


def test_source_thoughts_ignore_asks_the_llm(eto_store):
    store, traj = eto_store
    texts = ["I go to the toiletpaperhanger 1 to check it", "I go to toilet 1 to look for paper",
             "The toiletpaper 1 is here, so I take it", "I return to the toiletpaperhanger 1 with it",
             "I put the toiletpaper 1 on the hanger"]
    good = answer({"thinks": [{"step_index": i, "think": t} for i, t in enumerate(texts)]})
    with ChatStub([good], default={"status": 500}) as stub:  # concurrency 1: the toiletpaper trajectory first
        cfg = PipelineConfig(llm=stub_llm_config(stub, max_retries=0))
        cfg.distill.source_thoughts = "ignore"
        cfg.llm.max_endpoint_failure_rate = 1.0
        res = run_stage("distill", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    row = next(r for r in store.require("distill").read_rows() if r["trajectory_id"] == traj.trajectory_id)
    assert [t["think"] for t in row["thinks"]] == texts and row["model"] == "stub-model"
    assert res.manifest["counters"]["recorded_thoughts"] == 0
    # the other three ETO trajectories got the stub's HTTP 500: quarantined, not given their recorded thoughts
    assert res.manifest["counts"]["quarantine_reasons"] == {"http_error": 3}


def skills_case(tmp_path):
    """A store with the memories of the skills fixtures, and the stub's answers: a general call in
    markdown soup, a mistake about a childhood diet, one good cool and one good heat skill."""
    from tests.helpers.skills_data import MEMORIES, write_dedupe

    store = ArtifactStore(str(tmp_path), "r1")
    write_dedupe(store, {m["trajectory_id"]: f"kitchen-{i}" for i, m in enumerate(MEMORIES, 1)})
    write_upstream(store, "memory", MEMORIES, MEMORY_SCHEMA)
    soup = answer({"skills": [{"title": "**1**", "principle": "2 _Apply when: 3 },_", "when_to_apply": "4"}]})
    diet = answer({"mistakes": [{"description": "A childhood diet", "why_it_happens": "Too much sugar as a child",
                                 "how_to_avoid": "Eat more vegetables every day"}]})
    cool = answer({"skills": [{"title": "Cool In Fridge", "principle": "Cool the object with the fridge before "
                               "placing it.", "when_to_apply": "The goal says cool."}]})
    heat = answer({"skills": [{"title": "Heat In Microwave", "principle": "Heat the object with the microwave "
                               "before placing it.", "when_to_apply": "The goal says heat."}]})
    return store, soup, diet, cool, heat


def test_aggregate_quarantines_the_issue_skills_and_keeps_the_bank_worded(tmp_path):
    """The general skills of the issue (``**1**: 2 _Apply when: 3 },_``) and a mistake about a
    childhood diet: both calls are repaired once, then quarantined; the bank keeps only worded,
    on-topic skills from the category calls."""
    from pipeline.bank.merge import skill_text

    store, soup, diet, cool, heat = skills_case(tmp_path)
    with ChatStub([soup, soup, cool, heat, diet, diet]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.export.val_fraction = 0.0
        res = run_stage("skills", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    rows = store.require("skills").read_rows()
    assert [r["title"] for r in rows] == ["Cool In Fridge", "Heat In Microwave"]
    q = store.require("skills").read_rows(quarantine=True)
    # memory rows: none (every memory also fed a category call); one row per failed call
    assert sorted((r["item_id"], r["reason"]) for r in q) == [("alfworld/general/", "no_words"),
                                                              ("alfworld/mistake/", "off_topic")]
    assert res.manifest["counters"]["quality"] == {
        "items": 4, "quarantined": {"no_words": 1, "off_topic": 1}, "rate": {"no_words": 0.25, "off_topic": 0.25},
        "rejected_answers": {"no_words": 2, "off_topic": 2}, "flagged": {}, "repaired": {}}
    assert stub.requests[1]["messages"][-1]["content"].startswith(
        "Your answer was rejected (check_failed): no_words: skills[0].title is not text")
    assert all(len(skill_text(r).split()) >= 3 for r in rows)


def test_a_call_rejected_whole_is_sampled_again(tmp_path):
    """skills.sampled_retries: the general call whose every item broke a rule is asked once more
    at temperature 0.7, seed 1, and its passing answer replaces the rejected one (kept in the
    quarantine with its rule); the mistakes call fails its retry too and stays quarantined."""
    store, soup, diet, cool, heat = skills_case(tmp_path)
    opened = answer({"skills": [{"title": "Open Before Taking", "principle": "Open a closed cabinet or fridge "
                                 "before taking an object from it.", "when_to_apply": "The receptacle is closed."}]})
    with ChatStub([soup, soup, cool, heat, diet, diet, opened, diet, diet]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.export.val_fraction = 0.0
        cfg.skills.sampled_retries = 1
        res = run_stage("skills", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    assert len(stub.requests) == 9
    assert [(r.get("temperature"), r.get("seed")) for r in stub.requests[6:8]] == [(0.7, 1), (0.7, 1)]
    assert stub.requests[6]["messages"] == stub.requests[0]["messages"]  # the same prompt, sampled
    rows = store.require("skills").read_rows()
    assert [r["title"] for r in rows] == ["Open Before Taking", "Cool In Fridge", "Heat In Microwave"]
    q = store.require("skills").read_rows(quarantine=True)
    assert sorted((r["item_id"], r["reason"]) for r in q) == [
        ("alfworld/general/", "no_words"), ("alfworld/mistake/", "off_topic"), ("alfworld/mistake/", "off_topic")]
    counters = res.manifest["counters"]
    assert counters["sampled_retry"] == {"calls": 2, "saved": 1}
    assert counters["calls_failed"] == {"mistake": 1}


def test_a_degenerate_recorded_thought_is_not_used(tmp_path):
    """heat_mug's recorded thought for action 3 replaced by "1.25": it fails no_words, so the LLM
    is asked for all four steps (0-2 and the synthetic done) and the rejection is counted."""
    import dataclasses

    from tests.helpers.llm_stage_data import heat_mug, write_trajectories
    traj = heat_mug("traj-A")
    traj.steps[3] = dataclasses.replace(traj.steps[3], thought="1.25")
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [traj])
    texts = ["go to cabinet 1 to find the mug", "the mug is in the cabinet, so I take it",
             "the task wants a hot mug, so I heat it in the microwave 1", "the mug is heated, so the task is done"]
    res, art, stub = run_with(distill_store(store), "distill",
                              [answer({"thinks": [{"step_index": i, "think": t} for i, t in enumerate(texts)]})])
    assert [t["think"] for t in art.read_rows()[0]["thinks"]] == texts
    assert res.manifest["counters"]["recorded_thoughts"] == 0
    assert res.manifest["counters"]["quality"]["rejected_answers"] == {"no_words": 1}
    assert len(stub.requests) == 1


def test_a_recorded_thought_repeated_for_a_later_step_goes_to_the_llm(tmp_path):
    """heat_mug with the same recorded thought before actions 2 and 3: the first is used, the
    repeat is not (reused_think), so the LLM writes steps 0, 2 and the synthetic done instead of
    the whole trajectory being quarantined."""
    import dataclasses

    from tests.helpers.llm_stage_data import heat_mug, write_trajectories
    traj = heat_mug("traj-A")
    said = "The mug 1 is in the cabinet 1 and must be heated, so I pick it up first."
    traj.steps[2] = dataclasses.replace(traj.steps[2], thought=said)
    traj.steps[3] = dataclasses.replace(traj.steps[3], thought=said)
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [traj])
    texts = {0: "the mug should be in a cabinet, so I go to cabinet 1", 2: "I hold the mug 1, so I heat it with "
             "the microwave 1", 3: "the mug 1 is hot, which is what the task asks, so I finish"}
    res, art, stub = run_with(distill_store(store), "distill",
                              [answer({"thinks": [{"step_index": i, "think": t} for i, t in texts.items()]})])
    assert [t["think"] for t in art.read_rows()[0]["thinks"]] == [texts[0], said, texts[2], texts[3]]
    assert res.manifest["counters"]["recorded_thoughts"] == 1 and len(stub.requests) == 1
    assert res.manifest["counts"]["quarantined"] == 0


def _heat_mug_store(tmp_path):
    from tests.helpers.llm_stage_data import heat_mug, write_trajectories
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [heat_mug("traj-A")])
    return distill_store(store)


# heat_mug: step 2's think is the recorded thought, so the LLM is asked for steps 0, 1 and the synthetic done (3)
HEAT_THINKS = {0: "the mug should be in a cabinet, so I go to cabinet 1 to look for it",
               1: "the mug 1 is here in the cabinet 1, so I take it to heat it",
               3: "the mug 1 is hot, which is what the task asks, so I finish"}
BAD_STEP_1 = answer({"thinks": [{"step_index": i, "think": "1.25" if i == 1 else t} for i, t in HEAT_THINKS.items()]})


def test_a_step_rejected_after_repair_is_asked_again_alone(tmp_path):
    """The chunk's answer and its repair both give step 1 a think with no words: steps 0 and 3
    pass on their own and are kept, step 1 gets a call of its own (the earlier action shown),
    and the trajectory is kept with the new think; the rejected answer stays in the quarantine."""
    one = answer({"thinks": [{"step_index": 1, "think": HEAT_THINKS[1]}]})
    res, art, stub = run_with(_heat_mug_store(tmp_path), "distill", [BAD_STEP_1, BAD_STEP_1, one])
    row = art.read_rows()[0]
    assert [t["think"] for t in row["thinks"]] == [HEAT_THINKS[0], HEAT_THINKS[1], "I need to heat the mug first.",
                                                   HEAT_THINKS[3]]
    assert row["model"] == "stub-model"
    assert len(stub.requests) == 3
    alone = stub.requests[2]["messages"][1]["content"]
    assert "[step_index 1]" in alone and "[step_index 0]" not in alone and "[step_index 3]" not in alone
    assert "Earlier actions (already explained): go to cabinet 1" in alone
    counters = res.manifest["counters"]
    assert counters["step_retry"] == {"calls": 1, "replaced_chunks": 1, "trajectories": 1, "saved": 1,
                                      "sampled_calls": 0, "sampled_ok": 0}
    assert res.manifest["counts"]["quarantined"] == 0 and res.manifest["failed_requests"]["total"] == 0
    q = art.read_rows(quarantine=True)
    assert [(r["item_id"], r["reason"]) for r in q] == [("traj-A#0", "no_words")]
    assert "1.25" in q[0]["raw"]


def test_a_step_that_fails_alone_too_quarantines_the_trajectory(tmp_path):
    """Same answer, and the one-step call (and its repair) fails as well, greedy and in every
    retry (greedy without the worked examples, then seeds 2..4 at the retry temperature, the
    examples in even rounds): the trajectory is quarantined on the chunk's reason; every
    rejected answer is kept."""
    alone_bad = answer({"thinks": [{"step_index": 1, "think": "1.25"}]})
    res, art, stub = run_with(_heat_mug_store(tmp_path), "distill", [BAD_STEP_1, BAD_STEP_1] + [alone_bad] * 10)
    assert art.read_rows() == [] and len(stub.requests) == 12
    assert [(r["temperature"], r["seed"]) for r in stub.requests[2:12:2]] == [(0.0, 0), (0.0, 1), (0.7, 2), (0.7, 3),
                                                                            (0.7, 4)]
    shown = ["Good answer:" in r["messages"][0]["content"] for r in stub.requests[2:12:2]]
    assert shown == [True, False, True, False, True]
    assert res.manifest["counters"]["step_retry"] == {"calls": 1, "replaced_chunks": 0, "trajectories": 1, "saved": 0,
                                                      "sampled_calls": 4, "sampled_ok": 0}
    q = art.read_rows(quarantine=True)
    assert sorted((r["item_id"], r["reason"]) for r in q) == [("traj-A", "no_words")] + [("traj-A#s1", "no_words")] * 5


def test_a_sampled_retry_saves_a_step_that_greedy_decoding_got_wrong(tmp_path):
    """The greedy one-step call fails; the first retry (greedy, seed 1, no worked examples)
    passes every rule: the trajectory is kept with that think and no second round is sent."""
    alone_bad = answer({"thinks": [{"step_index": 1, "think": "1.25"}]})
    one = answer({"thinks": [{"step_index": 1, "think": HEAT_THINKS[1]}]})
    store = _heat_mug_store(tmp_path)
    res, art, stub = run_with(store, "distill", [BAD_STEP_1, BAD_STEP_1, alone_bad, alone_bad, one])
    assert [t["think"] for t in art.read_rows()[0]["thinks"]][1] == HEAT_THINKS[1]
    assert len(stub.requests) == 5 and (stub.requests[4]["temperature"], stub.requests[4]["seed"]) == (0.0, 1)
    assert "Good answer:" in stub.requests[2]["messages"][0]["content"]
    assert "Good answer:" not in stub.requests[4]["messages"][0]["content"]
    assert res.manifest["counters"]["step_retry"] == {"calls": 1, "replaced_chunks": 1, "trajectories": 1, "saved": 1,
                                                      "sampled_calls": 1, "sampled_ok": 1}
    q = art.read_rows(quarantine=True)
    assert sorted((r["item_id"], r["reason"]) for r in q) == [("traj-A#0", "no_words"), ("traj-A#s1", "no_words")]


def test_step_retry_off_quarantines_at_once(tmp_path):
    store = _heat_mug_store(tmp_path)
    with ChatStub([BAD_STEP_1, BAD_STEP_1]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.distill.step_retry = False
        res = run_stage("distill", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    assert len(stub.requests) == 2 and res.manifest["counts"]["quarantine_reasons"] == {"no_words": 1}
    assert res.manifest["counters"]["step_retry"]["calls"] == 0


def test_a_loop_across_a_mistakes_fields_is_caught():
    """A mistake the embedded model wrote on the shipped sample: each field alone is prose;
    joined, "eat the same" occurs 3 times (off_topic is judged in tests/pipeline/quality/test_topic.py)."""
    from pipeline.core.config import QualityConfig
    from pipeline.stages.skills import skill_violations
    item = {"description": "When I was a child, I would always eat the same thing twice. When I am hungry, I will "
                           "eat the same thing again tomorrow.",
            "why_it_happens": "I'm going to eat the same thing again tomorrow.",
            "how_to_avoid": "Eat something different every day"}
    got = skill_violations("mistake", [item], [], QualityConfig())  # no sources: off_topic not checked
    assert [v.message() for v in got] == ["ngram_loop: mistakes[0] repeats 'eat the same' 3+ times across its "
                                          "fields; write it once"]

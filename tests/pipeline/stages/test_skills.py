"""Stage skills: pattern dedupe, call planning, answer checks, quarantine of unused memories,
embedding merge (real sentence-transformers), runs on empty input and on the real model, and the
train-only bank (memories of val instances held out, pipeline.core.split)."""
from __future__ import annotations

import json
import os

import pytest

from pipeline.bank import rows as skillbank
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import SkillsConfig, PipelineConfig
from pipeline.stage.llmstage import Job
from pipeline.llm.types import JSONResult
from pipeline.core.records import MEMORY_SCHEMA
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext
from pipeline.bank import merge as _skillmerge
from pipeline.llm import templates as _templates
from pipeline.stages import skills
from tests.helpers.llm_stage_data import embedded_llm, write_upstream
from tests.helpers.skills_data import COOL, HEAT, MEMORIES, aggregate_with_val_instance, write_dedupe


def test_dedupe_items_counts_and_cap():
    items = [("A  b", "m1"), ("c", "m2"), ("a B", "m3"), ("", "m4"), ("d", "m5")]
    assert skills.dedupe_items(items, 0) == ([("A b", 2), ("c", 1), ("d", 1)], {"m1", "m2", "m3", "m5"})
    # cap 2: most frequent first, ties by text ("c" < "d"), so m5 feeds nothing
    assert skills.dedupe_items(items, 2) == ([("A b", 2), ("c", 1)], {"m1", "m2", "m3"})
    assert skills.dedupe_items([], 5) == ([], set())


def test_plan_calls_feeds_successes_and_failures():
    calls = skills.plan_calls(MEMORIES, "alfworld", SkillsConfig())
    assert [(c.kind, c.category, [m["memory_id"] for m in c.memories]) for c in calls] == [
        ("general", "", ["mem-1", "mem-2", "mem-3"]),
        ("task_specific", "cool", ["mem-1", "mem-3", "mem-4"]),
        ("task_specific", "heat", ["mem-2"]),
        ("mistake", "", ["mem-4"])]
    general = calls[0].request.messages[1]["content"]
    assert f"- (x2) {COOL}\n- (x1) {HEAT}" in general and "at most 6 GENERAL skills" in general
    cool = calls[1].request.messages[1]["content"]
    assert "category \"Cool\"" in cool and "- (x1) when holding an object to cool: went to the microwave" in cool
    assert calls[0].prompt_sha == _templates.load("skills", "alfworld").sha
    # D-M7: no success patterns -> no general call; no failures -> no mistake call
    only_fail = skills.plan_calls([MEMORIES[3]], "alfworld", SkillsConfig())
    assert [(c.kind, c.category) for c in only_fail] == [("task_specific", "cool"), ("mistake", "")]
    assert skills.plan_calls([], "alfworld", SkillsConfig()) == []


def test_answer_schema_and_check():
    schema = skills.answer_schema("mistake", 3)
    arr = schema["properties"]["mistakes"]
    assert (arr["minItems"], arr["maxItems"], arr["items"]["required"]) == \
        (1, 3, ["description", "why_it_happens", "how_to_avoid"])
    check = skills.check_answer("general")
    assert check({"skills": [{"title": "T", "principle": "P", "when_to_apply": "W"}]}) is None
    assert check({"skills": [{"title": "T", "principle": " ", "when_to_apply": ""}]}) == \
        "skills[0] has blank principle, when_to_apply"


def test_unused_memories_are_quarantined_with_the_failed_call():
    jobs = [Job(c, c.request.key, [c.request]) for c in skills.plan_calls(MEMORIES, "alfworld", SkillsConfig())]
    for j in jobs:  # every category call fails, the general and mistake calls succeed
        ok = j.item.kind != "task_specific"
        j.results = [JSONResult(j.item_id, ok, raw="" if ok else "{bad", error="" if ok else "schema_invalid",
                                detail="" if ok else "at <root>: x")]
    used, quarantine = skills.unused_quarantine(MEMORIES, jobs)
    assert used == {"mem-1", "mem-2", "mem-3", "mem-4"}  # every memory fed a successful call
    for j in jobs:  # now the general and the heat calls fail: mem-2 fed only those two
        failed = j.item.kind == "general" or j.item.category == "heat"
        j.results = [JSONResult(j.item_id, not failed, raw="{x" if failed else "", error="length" if failed else "",
                                detail="cut" if failed else "")]
    used, quarantine = skills.unused_quarantine(MEMORIES, jobs)
    assert used == {"mem-1", "mem-3", "mem-4"}
    assert [(q.item_id, q.reason, q.raw) for q in quarantine] == [("mem-2", "length", "{x")]
    assert quarantine[0].detail == "general call alfworld/general/ failed: cut"


def _skill(sid: str, title: str, principle: str, when: str, mem_id: str, kind="general", category="") -> dict:
    return {"skill_id": sid, "kind": kind, "category": category, "title": title, "principle": principle,
            "when_to_apply": when, "source_memory_ids": [mem_id], "source_trajectory_ids": ["traj-" + mem_id]}


def test_merge_by_embedding_similarity():
    rows = [_skill("a", "Explore Systematically", "Visit each location once before revisiting any.",
                   "When searching for an object.", "m1"),
            _skill("b", "Systematic Exploration", "Visit every location once before going back to any of them.",
                   "When looking for an object.", "m2"),
            _skill("c", "Heat With Microwave", "Use the microwave to heat food items.",
                   "When the goal asks for a hot object.", "m3"),
            # the same task-specific text in two categories: never merged across categories
            _skill("d", "Open The Fridge First", "Open the fridge before you take the object out.",
                   "When the object is in the fridge.", "m4", kind="task_specific", category="cool"),
            _skill("e", "Open The Fridge First", "Open the fridge before you take the object out.",
                   "When the object is in the fridge.", "m5", kind="task_specific", category="heat")]
    kept, merges = _skillmerge.merge_similar(rows, 0.85)
    assert [r["skill_id"] for r in kept] == ["a", "c", "d", "e"]
    assert kept[0]["source_memory_ids"] == ["m1", "m2"] and kept[0]["source_trajectory_ids"] == ["traj-m1", "traj-m2"]
    assert merges == [{"kept": "a", "dropped": "b", "kind": "general", "category": "",
                       "similarity": pytest.approx(0.8763, abs=2e-3),
                       "exact_duplicate": False}]
    kept, merges = _skillmerge.merge_similar(rows, 0.9)  # paraphrases stay apart at 0.9
    assert [r["skill_id"] for r in kept] == ["a", "b", "c", "d", "e"] and merges == []
    assert rows[0]["source_memory_ids"] == ["m1"]  # inputs are not mutated


def test_one_principle_under_two_titles_is_one_skill():
    """The teacher's heat bank: "Heat Eggs" and "Heat Water" with the same principle and condition
    (whole-text similarity 0.89, under the 0.9 threshold because of the titles)."""
    principle = ("When the goal asks for a hot object, take it first, carry it to the microwave and heat it "
                 "there before going to the target.")
    when = "As soon as the goal names a state change and the object is in hand."
    rows = [_skill("h1", "Heat Eggs", principle, when, "m1", kind="task_specific", category="heat"),
            _skill("h2", "Heat Water", principle, when, "m2", kind="task_specific", category="heat"),
            _skill("h3", "Cool With Fridge", "Carry the object to the fridge and cool it there.", when, "m3",
                   kind="task_specific", category="heat")]
    kept, merges = _skillmerge.merge_similar(rows, 0.9)
    assert [r["skill_id"] for r in kept] == ["h1", "h3"]
    assert kept[0]["source_memory_ids"] == ["m1", "m2"]
    assert [(m["kept"], m["dropped"]) for m in merges] == [("h1", "h2")]
    assert merges[0]["similarity"] == pytest.approx(0.9, abs=1e-4)  # recorded at the threshold it reached


def test_exact_duplicates_merge_without_encoder():
    rows = [_skill("a", "T", "P", "W", "m1"), _skill("a", "T", "P", "W", "m2")]

    def no_encoder(texts):
        raise AssertionError("a single distinct skill needs no embedding")
    kept, merges = _skillmerge.merge_similar(rows, 0.9, encoder=no_encoder)
    assert [r["source_memory_ids"] for r in kept] == [["m1", "m2"]]
    assert merges == [{"kept": "a", "dropped": "a", "kind": "general", "category": "", "similarity": 1.0,
                       "exact_duplicate": True}]


def test_empty_input_writes_an_empty_bank_without_llm(tmp_path):
    store = ArtifactStore(str(tmp_path), "r")
    write_dedupe(store, {})
    write_upstream(store, "memory", [], MEMORY_SCHEMA)

    def no_llm():
        raise AssertionError("the LLM must not be started for an empty input")
    ctx = StageContext(store, PipelineConfig(), env="alfworld", llm_factory=no_llm)
    res = run_stage("skills", ctx, log=lambda s: None)
    assert (res.manifest["counts"]["units_in"], res.manifest["counts"]["out"]) == (0, 0)
    with open(os.path.join(res.uri, "skill_bank.json"), encoding="utf-8") as f:
        bank = json.load(f)
    assert bank["general_skills"] == [] and bank["common_mistakes"] == [] and bank["metadata"]["env"] == "alfworld"
    assert "split" not in res.manifest["counters"]  # the split is an artifact of its own


@pytest.mark.slow
def test_run_on_embedded_model(tmp_path):
    store = ArtifactStore(str(tmp_path / "art"), "r1")
    write_dedupe(store, {m["trajectory_id"]: "kitchen-1" for m in MEMORIES})  # one instance: all train
    write_upstream(store, "memory", MEMORIES, MEMORY_SCHEMA)
    cfg = PipelineConfig(skills=SkillsConfig(n_general=2, n_task_specific=2, n_mistakes=2))
    with embedded_llm(str(tmp_path / "log")) as client:
        res = run_stage("skills", StageContext(store, cfg, llm_factory=lambda: client),
                        model_id=client.model_id, log=lambda s: None)
    counts, counters = res.manifest["counts"], res.manifest["counters"]
    assert counts["units_in"] == 4 and counts["units_out"] + counts["quarantined"] == 4
    assert counters["calls"] == {"general": 1, "task_specific": 2, "mistake": 1}
    art = store.require("skills")
    rows = art.read_rows()
    fed = {("general", ""): {"mem-1", "mem-2", "mem-3"}, ("task_specific", "cool"): {"mem-1", "mem-3", "mem-4"},
           ("task_specific", "heat"): {"mem-2"}, ("mistake", ""): {"mem-4"}}
    for r in rows:  # a skill names exactly the memories of its call (a merge may add those of another)
        assert fed[(r["kind"], r["category"])] <= set(r["source_memory_ids"])
        assert r["source_trajectory_ids"] == sorted("traj-" + m[4:] for m in r["source_memory_ids"])
        assert r["model"] == client.model_id and r["prompt_sha"] == _templates.load("skills", "alfworld").sha
    # the 135M model's items may all fail the content rules: an empty bank still has its version
    assert {r["bank_version"] for r in rows} <= {skillbank.bank_version(rows)} == {counters["bank_version"]}
    with open(os.path.join(art.path, "skill_bank.json"), encoding="utf-8") as f:
        bank = json.load(f)
    def key(r):
        return r["skill_id"], r["source_memory_ids"]
    assert sorted(map(key, skillbank.from_skillrl_json(bank, "alfworld"))) == sorted(map(key, rows))
    assert bank["metadata"]["task_distribution"] == {"cool": {"success": 2, "failure": 1},
                                                     "heat": {"success": 1, "failure": 0}}
    assert len(counters["merges"]) == counters["merged"] + counters["exact_duplicates"]


def test_stage_on_stub_unique_ids_lineage_and_bank_version(tmp_path):
    """Through run_stage on the stub: a call that repeats a skill yields one row (ids are content
    hashes, so within-call duplicates merge), every skill names its memories and trajectories,
    the SkillRL export validates, and the bank is registered in <root>/banks."""
    from pipeline.bank.store import BankStore
    from pipeline.llm.schemas import load_schema
    from bench.chat_stub import ChatStub
    from tests.helpers.llm_faults import stage_ctx, stub_llm_config
    import jsonschema

    store = ArtifactStore(str(tmp_path), "r1")
    write_dedupe(store, {m["trajectory_id"]: f"kitchen-{i}" for i, m in enumerate(MEMORIES, 1)})
    write_upstream(store, "memory", MEMORIES, MEMORY_SCHEMA)
    skill = {"title": "Search Then Act", "principle": "Find the object first.", "when_to_apply": "Object unseen."}
    script = [{"content": json.dumps({"skills": [skill, skill]})},                       # general (repeated)
              {"content": json.dumps({"skills": [dict(skill, title="Cool In Fridge")]})},  # task_specific cool
              {"content": json.dumps({"skills": [dict(skill, title="Heat In Microwave")]})},
              {"content": json.dumps({"mistakes": [{"description": "Wrong appliance", "why_it_happens": "Verb "
                                                    "misread", "how_to_avoid": "Reread the goal"}]})}]
    with ChatStub(script) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.export.val_fraction = 0.0  # no val instance: this test covers the whole bank path
        res = run_stage("skills", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    rows = store.require("skills").read_rows()
    assert res.manifest["counts"]["quarantine_reasons"] == {}  # no val instance: nothing held out
    assert [(r["kind"], r["category"], r["title"] or r["description"]) for r in rows] == [
        ("general", "", "Search Then Act"), ("task_specific", "cool", "Cool In Fridge"),
        ("task_specific", "heat", "Heat In Microwave"), ("mistake", "", "Wrong appliance")]
    assert len({r["skill_id"] for r in rows}) == 4
    assert [r["source_memory_ids"] for r in rows] == [["mem-1", "mem-2", "mem-3"], ["mem-1", "mem-3", "mem-4"],
                                                      ["mem-2"], ["mem-4"]]
    assert rows[1]["source_trajectory_ids"] == ["traj-1", "traj-3", "traj-4"]
    counters = res.manifest["counters"]
    assert counters["merges"] == [{"kept": rows[0]["skill_id"], "dropped": rows[0]["skill_id"], "kind": "general",
                                   "category": "", "similarity": 1.0, "exact_duplicate": True}]
    assert res.manifest["counts"]["units_out"] == 4 and res.manifest["llm"]["calls"] == 4
    with open(os.path.join(res.uri, "skill_bank.json"), encoding="utf-8") as f:
        bank = json.load(f)
    jsonschema.Draft202012Validator(load_schema("skill_bank")).validate(bank)
    assert all(e["source_memory_ids"] for e in bank["general_skills"] + bank["common_mistakes"]
               + [e for v in bank["task_specific_skills"].values() for e in v])
    banks = BankStore(str(tmp_path))
    assert banks.head() == counters["bank_version"] == bank["metadata"]["bank_version"]
    assert (banks.get("HEAD").record["run_id"], counters["bank_parent"]) == ("r1", None)


def test_val_instance_memories_are_held_out_of_the_bank(tmp_path):
    """Leak guard: the split is decided here, by instance, and a val instance's memory feeds no
    call (else its skills would quote that instance into train and into its own val prompts)."""
    store, res, stub = aggregate_with_val_instance(tmp_path)
    # mem-2 (heat, kitchen-4) is gone, so is the heat call: 3 calls, not 4
    assert len(stub.requests) == 3 and res.manifest["counters"]["calls"] == {"general": 1, "task_specific": 1,
                                                                              "mistake": 1}
    assert not any("Heat [Object]" in m["content"] for r in stub.requests for m in r["messages"])
    rows = store.require("skills").read_rows()
    assert [r["source_memory_ids"] for r in rows] == [["mem-1", "mem-3"], ["mem-1", "mem-3", "mem-4"], ["mem-4"]]
    assert [r["source_trajectory_ids"] for r in rows] == [["traj-1", "traj-3"], ["traj-1", "traj-3", "traj-4"],
                                                          ["traj-4"]]
    quarantine = store.require("skills").read_rows(quarantine=True)
    assert [(q["item_id"], q["reason"], q["detail"]) for q in quarantine] == [
        ("mem-2", "held_out_val", "instance kitchen-4 is in the validation split: kept out of the skill bank")]
    counts = res.manifest["counts"]
    assert (counts["units_in"], counts["units_out"], counts["quarantined"]) == (4, 3, 1)
    assert counts["quarantine_reasons"] == {"held_out_val": 1}
    assert {r["env_instance"]: r["split"] for r in store.require("split").read_rows()} == {
        "kitchen-1": "train", "kitchen-2": "train", "kitchen-3": "train", "kitchen-4": "val"}
    with open(os.path.join(res.uri, "skill_bank.json"), encoding="utf-8") as f:
        meta = json.load(f)["metadata"]
    assert (meta["total_memories_analyzed"], meta["task_distribution"]) == (3, {"cool": {"success": 2, "failure": 1}})


def test_memories_of_val_instances_are_held_out():
    """hold_out_val follows the split artifact; a memory whose trajectory is unknown is train."""
    from pipeline.stages.skills import hold_out_val
    instance_of = {"t1": "a", "t2": "b", "t3": "c"}
    mems = [{"memory_id": f"m{i}", "trajectory_id": f"t{i}"} for i in range(1, 5)]
    train, held = hold_out_val(mems, instance_of, {"a": "train", "b": "val", "c": "train"})
    assert [m["memory_id"] for m in train] == ["m1", "m3", "m4"] and [q.item_id for q in held] == ["m2"]
    assert held[0].reason == "held_out_val"


def test_a_bad_item_is_quarantined_and_the_good_items_of_its_answer_kept(tmp_path):
    """Content rules judge each skill: a restated command and a duplicated mistake go to the
    quarantine with their rule; the other items of the same answers make the bank."""
    from bench.chat_stub import ChatStub
    from tests.helpers.llm_faults import stage_ctx, stub_llm_config

    store = ArtifactStore(str(tmp_path), "r1")
    write_dedupe(store, {m["trajectory_id"]: f"kitchen-{i}" for i, m in enumerate(MEMORIES, 1)})
    write_upstream(store, "memory", MEMORIES, MEMORY_SCHEMA)
    good = {"title": "Transform Before Placing", "principle": "Take the object, then cool it in the fridge before "
            "going to the target.", "when_to_apply": "The goal asks for a cool object."}
    restated = {"title": "Go To Cabinet", "principle": "Navigate to the specified cabinet by following the sequence "
                "of steps.", "when_to_apply": "When a cabinet is needed."}
    cause = "The agent did not remember where the {} is located in the kitchen."
    mistakes = [{"description": f"The {o} is not found.", "why_it_happens": cause.format(o),
                 "how_to_avoid": f"Search the usual places of a {o} first."} for o in ("mug", "apple")]
    script = [{"content": json.dumps({"skills": [good, restated]})},
              {"content": json.dumps({"skills": [dict(good, title="Cool Before Placing")]})},
              {"content": json.dumps({"skills": [dict(good, title="Heat Before Placing", principle="Take the object, "
                                                      "then heat it in the microwave before going to the target.")]})},
              {"content": json.dumps({"mistakes": mistakes})}]
    with ChatStub(script) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.export.val_fraction = 0.0
        res = run_stage("skills", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    assert len(stub.requests) == 4  # no repair: each answer had a good item
    rows = store.require("skills").read_rows()
    assert [r["title"] or r["description"] for r in rows] == [
        "Transform Before Placing", "Cool Before Placing", "Heat Before Placing", "The mug is not found."]
    quarantine = store.require("skills").read_rows(quarantine=True)
    assert sorted(q["reason"] for q in quarantine) == ["duplicate_mistake", "restated_action"]
    assert json.loads(next(q["raw"] for q in quarantine if q["reason"] == "restated_action"))["title"] == "Go To Cabinet"
    counters = res.manifest["counters"]
    assert counters["items_answered"] == 6
    assert counters["items_quarantined"] == {"duplicate_mistake": 1, "restated_action": 1}
    assert res.manifest["counts"]["units_out"] == 4  # every memory fed an answered call


def test_a_task_specific_skill_that_repeats_a_general_one_merges_into_it():
    """The 1.5B bank repeated its general "Search Likely Locations First" for two categories."""
    principle = "Visit the receptacles where the object usually is before rare ones, and do not revisit a place."
    rows = [_skill("g", "Search Likely Locations First", principle, "While the object is not found.", "m1"),
            _skill("t", "Search Likely Locations First", principle, "While the object is not found.", "m2",
                   kind="task_specific", category="pick_and_place"),
            _skill("h", "Heat With Microwave", "Take the object, then heat it in the microwave.",
                   "The goal asks for a hot object.", "m3", kind="task_specific", category="heat")]
    kept, merges = _skillmerge.merge_similar(rows, 0.9)
    assert [r["skill_id"] for r in kept] == ["g", "h"] and kept[0]["source_memory_ids"] == ["m1", "m2"]
    assert [(m["kept"], m["dropped"], m["kind"]) for m in merges] == [("g", "t", "general")]


def _fixture_heat_items() -> list[dict]:
    path = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "quality", "teacher_bank_alfworld.json")
    with open(path, encoding="utf-8") as f:
        heat = json.load(f)["task_specific_skills"]["heat"]
    return [_skill(h["skill_id"], h["title"], h["principle"], h["when_to_apply"], h["source_memory_ids"][0],
                   kind="task_specific", category="heat") for h in heat]


def test_one_rule_written_for_two_objects_is_one_generalised_skill():
    """The teacher's "Heat Mug with Microwave" and "Heat Egg with Microwave" (the bank fixture)
    differ only in the object: one skill, written for any object, with a new id of its new text."""
    mug, egg = _fixture_heat_items()
    kept, merges = _skillmerge.merge_similar([mug, egg], 0.99)
    assert len(kept) == 1 and kept[0]["title"] == "Heat Object with Microwave"
    assert kept[0]["principle"] == ("When the goal asks for a hot object, take it first, carry it to the "
                                    "microwave and heat it there before going to the target.")
    assert kept[0]["when_to_apply"] == "As soon as the goal names a hot object and the object is in hand."
    assert kept[0]["source_memory_ids"] == sorted({mug["source_memory_ids"][0], egg["source_memory_ids"][0]})
    new_id = skillbank.make_row("task_specific", "heat", kept[0])["skill_id"]
    assert kept[0]["skill_id"] == new_id != mug["skill_id"]
    assert merges == [{"kept": new_id, "dropped": egg["skill_id"], "kind": "task_specific", "category": "heat",
                       "similarity": 1.0, "exact_duplicate": False, "object_swap": "mug/egg"}]
    assert mug["title"] == "Heat Mug with Microwave"  # inputs are not mutated


def test_object_swap_is_only_a_swap_of_object_kinds():
    assert _skillmerge.object_swap("Take the mugs to the sink.", "take the cups to the sink.") == ("mug", "cup")
    # another appliance is another rule; two words swapped, or one added, is no swap
    assert _skillmerge.object_swap("Heat the mug with the microwave.", "Heat the mug with the stoveburner.") is None
    assert _skillmerge.object_swap("Put the mug on the cup.", "Put the egg on the apple.") is None
    assert _skillmerge.object_swap("Heat the mug.", "Heat the mug now.") is None
    assert _skillmerge.object_swap("Heat the mug.", "Heat the mug.") is None
    assert _skillmerge.generalise("A mug, then an Apple: take a apple or two apples.", "apple") == \
        "A mug, then an Object: take an object or two objects."
    # the same principle with another object but a different condition is still kept apart by the swap rule
    mug, egg = _fixture_heat_items()
    other = dict(egg, when_to_apply="Only when the egg is in the fridge.", skill_id="x")
    kept, merges = _skillmerge.merge_similar([mug, other], 0.99)
    assert [r["skill_id"] for r in kept] == [mug["skill_id"], "x"] and merges == []


def test_items_that_say_what_the_game_does_not_have_are_quarantined(tmp_path):
    """Two items of the 1.5B teacher's bank (tests/fixtures/quality/teacher_bank_alfworld.json):
    the vase put in the vase (``self_target``) and frustration as a reason (``feeling_reason``);
    the good items of the same answers make the bank."""
    from bench.chat_stub import ChatStub
    from tests.helpers.llm_faults import stage_ctx, stub_llm_config

    store = ArtifactStore(str(tmp_path), "r1")
    write_dedupe(store, {m["trajectory_id"]: f"kitchen-{i}" for i, m in enumerate(MEMORIES, 1)})
    write_upstream(store, "memory", MEMORIES, MEMORY_SCHEMA)
    state = {"title": "Check Goal for State Change", "principle": "Before taking an object, check if the goal "
             "specifies a state change (hot, cool or clean). If so, take it first and carry it to the appropriate "
             "appliance.", "when_to_apply": "When the goal names a state change and the object is in hand."}
    revisit = {"title": "Avoid Revisiting Empty Places", "principle": "Do not revisit a place that is empty, as this "
               "may lead to confusion or frustration.", "when_to_apply": "While the object has not been found yet."}
    vase = {"title": "Cool Vase", "principle": "When the goal asks for a cool vase, take it first, carry it to the "
            "fridge and cool it there before putting it in the vase.", "when_to_apply": "As soon as the goal names "
            "a state change and the vase is in hand."}
    egg = {"title": "Heat Egg with Microwave", "principle": "When the goal asks for a hot egg, take it first, carry "
           "it to the microwave and heat it there before going to the target.", "when_to_apply": "As soon as the "
           "goal names a hot object and the egg is in hand."}
    script = [{"content": json.dumps({"skills": [state, revisit]})},
              {"content": json.dumps({"skills": [vase, dict(egg, title="Cool Egg in Fridge", principle=egg[
                  "principle"].replace("hot", "cool").replace("microwave", "fridge").replace("heat", "cool"))]})},
              {"content": json.dumps({"skills": [egg]})},
              {"content": json.dumps({"mistakes": [{"description": "The apple is warmed instead of cooled.",
                                                    "why_it_happens": "The agent took the microwave for a fridge.",
                                                    "how_to_avoid": "Cool the object in the fridge, never the "
                                                                    "microwave."}]})}]
    with ChatStub(script) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.export.val_fraction = 0.0
        res = run_stage("skills", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    assert len(stub.requests) == 4  # no repair: each answer had a good item
    rows = store.require("skills").read_rows()
    assert [r["title"] or r["description"] for r in rows] == [
        "Check Goal for State Change", "Cool Egg in Fridge", "Heat Egg with Microwave",
        "The apple is warmed instead of cooled."]
    quarantine = store.require("skills").read_rows(quarantine=True)
    assert sorted((q["reason"], json.loads(q["raw"])["title"]) for q in quarantine) == [
        ("feeling_reason", "Avoid Revisiting Empty Places"), ("self_target", "Cool Vase")]
    assert res.manifest["counters"]["items_quarantined"] == {"feeling_reason": 1, "self_target": 1}

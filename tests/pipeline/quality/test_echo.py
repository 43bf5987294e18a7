"""Echo rules (pipeline.quality.echo): thinks that only restate an action (``think_is_action``) and
skills that repeat the prompt's own words or say nothing (``echo_prompt``, ``not_actionable``).

Bad examples are the ones seen in the export of the embedded 135M model; good ones are the real
recorded thoughts of the ReAct/ETO samples (data/samples) and every skill and mistake of the
SkillRL banks shipped in tests/fixtures. Stage cases run distill and skills on the scripted stub
with a real sample trajectory ("put some spraybottle on toilet", ReAct ALFWorld)."""
from __future__ import annotations

import json
import os

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.records import MEMORY_SCHEMA
from pipeline.engine.runner import run_stage
from pipeline.llm import templates
from pipeline.quality import echo
from tests.helpers.llm_faults import stage_ctx, stub_llm_config
from tests.helpers.llm_stage_data import write_trajectories, write_upstream
from bench.chat_stub import ChatStub
from tests.helpers.paths import FIXTURES
from tests.helpers.quality_data import answer, distill_store, parsed_sample

SPRAY = ["go to cabinet 1", "go to cabinet 2", "open cabinet 2", "take spraybottle 2 from cabinet 2",
         "go to toilet 1", "put spraybottle 2 in/on toilet 1"]


@pytest.mark.parametrize("think,action,others,echoed", [
    ("put spraybottle on toilet 2", "put spraybottle 2 in/on toilet 2", [], "put spraybottle 2 in/on toilet 2"),
    ("go to cabinet 2", "open cabinet 2", ["go to cabinet 2", "open cabinet 2"], "go to cabinet 2"),
    ("Take the spraybottle.", "take spraybottle 2 from cabinet 2", [], "take spraybottle 2 from cabinet 2"),
    ("Now I will take the apple.", "take apple 1 from countertop 1", [], "take apple 1 from countertop 1"),
    ("click buy now", "click[Buy Now]", [], "click[Buy Now]"),
    ("go to cabinet 2 then open cabinet 2 and take spraybottle 2", "take spraybottle 2 from cabinet 2",
     ["go to cabinet 2", "open cabinet 2"], "an action-shaped command"),
    # real reasoning that mentions the action passes
    ("I need the spraybottle, so I go to cabinet 2 to look for it", "go to cabinet 2", ["go to cabinet 2"], None),
    ("The cabinet 2 is closed, so I open it to look inside.", "open cabinet 2", ["go to cabinet 2"], None),
    ("The fridge is closed.", "open fridge 1", ["go to fridge 1"], None),
    ("The first item matches size and price, so I open it.", "click[B07XYZ1234]", [], None),
    ("1.25", "go to desk 1", [], None),  # no words: rule no_words's case, not this one
])
def test_think_is_action(think, action, others, echoed):
    assert echo.think_is_action(think, action, others) == echoed


def test_action_words_and_stem():
    assert echo.action_words("put spraybottle 2 in/on toilet 2") == {"put", "spraybottle", "toilet"}
    assert [echo.stem(w) for w in ("failed", "episodes", "mistakes", "glass", "tries", "looking")] == [
        "fail", "episode", "mistake", "glass", "try", "look"]


def test_recorded_thoughts_of_the_samples_never_fire(tmp_path):
    """The 39 recorded thoughts of the ReAct/ETO ALFWorld and ReAct WebShop samples, each against
    its step's action, admissible list and the trajectory's actions: 0 fire."""
    n = 0
    for sample in ("react-alfworld", "eto-alfworld", "react-webshop"):
        _, trajs = parsed_sample(tmp_path / sample, sample, sample)
        for t in trajs:
            actions = [s.action or "" for s in t.steps[1:]]
            for k in range(1, len(t.steps)):
                if (t.steps[k].thought or "").strip():
                    n += 1
                    assert echo.think_is_action(t.steps[k].thought, t.steps[k].action or "",
                                                [*t.steps[k - 1].admissible_actions, *actions]) is None
    assert n == 39


def bank_items() -> list[dict]:
    """Every skill and mistake of the three SkillRL banks in tests/fixtures (162 items)."""
    items = []
    for path in ("skillrl-memory/alfworld/claude_style_skills.json", "skillrl-memory/webshop/claude_style_skills.json",
                 "formats/real/claude_style_skills_search.json"):
        with open(os.path.join(FIXTURES, path), encoding="utf-8") as f:
            bank = json.load(f)
        items += bank["general_skills"] + bank.get("common_mistakes", [])
        for key in ("task_specific_skills", "query_type_skills"):
            items += [s for group in (bank.get(key) or {}).values() for s in group]
    return items


FIELDS = ("title", "principle", "when_to_apply", "description", "why_it_happens", "how_to_avoid")
SKILLS_VOCAB = echo.prompt_words(templates.load("skills", "").sections.values())
UPDATE_VOCAB = echo.prompt_words(templates.load("skill_update", "").sections.values())


def test_every_skill_of_the_good_banks_passes():
    items = bank_items()
    assert len(items) == 162
    for vocab in (SKILLS_VOCAB, UPDATE_VOCAB):
        for it in items:
            assert echo.echo_violations("s", it, [f for f in FIELDS if f in it], vocab) == [], it
        shares = [echo.echo_share(it[f], vocab) for it in items for f in FIELDS if f in it]
        # the measured margin of the docstring: the highest share of a field of >= 2 words is 2/3
        assert max(s for s, n in shares if n >= echo.MIN_ECHO_WORDS) == pytest.approx(2 / 3)


# the worded skills of the reference bank of the prompt tests (tests/pipeline/test_prompts.py, TV5):
# terse, but each says something
TV5 = [{"title": "Explore Once", "principle": "Visit each location once...", "when_to_apply": "Always."},
       {"title": "Check Lamp", "principle": "Turn on the lamp", "when_to_apply": "Look tasks."},
       {"title": "Lamp First", "principle": "Find the desklamp first.", "when_to_apply": "At start."},
       {"description": "Looping.", "why_it_happens": "No memory.", "how_to_avoid": "Track visits."},
       {"description": "Wrong object", "why_it_happens": "z"}]


@pytest.mark.parametrize("item", TV5)
def test_reference_bank_skills_pass(item):
    assert echo.echo_violations("s", item, list(item), SKILLS_VOCAB) == []
    assert echo.echo_violations("s", item, list(item), UPDATE_VOCAB) == []


JUNK = [  # the sample run's bank (embedded 135M model): (skill, reasons)
    ({"title": "Cool", "principle": "Learn from what worked and failed to fail.", "when_to_apply": "When the fridge 1"},
     ["echo_prompt", "not_actionable"]),
    ({"title": "Mistakes seen in failed episodes", "principle": "Learn from what worked and failed to fail.",
      "when_to_apply": "When go to stoveburner 1: Examine the kitchen 4"}, ["echo_prompt", "echo_prompt"]),
    ({"title": "Troubleshooted when examine the fridge 1,", "principle": "Mistakes seen in failed episodes",
      "when_to_apply": "When go to stoveburner 1: Examine the kitchen 4"}, ["echo_prompt"]),
    ({"title": "Lemonade Making", "principle": "Reflect on looking at objects in light.",
      "when_to_apply": "When to apply this skill."}, ["echo_prompt"]),
    ({"title": "Use a lemon for your craft.", "principle": "In the morning.",
      "when_to_apply": "In the morning, when you are ready to start your day with a lemon."}, ["not_actionable"]),
]


@pytest.mark.parametrize("skill,reasons", JUNK)
def test_echo_junk_of_the_sample_bank_fires(skill, reasons):
    got = echo.echo_violations("skills[0]", skill, list(skill), SKILLS_VOCAB)
    assert [v.reason for v in got] == reasons


def test_echo_message():
    [v] = echo.echo_violations("skills[1]", {"title": "Mistakes seen in failed episodes"}, ["title"], SKILLS_VOCAB)
    assert v.message() == ("echo_prompt: skills[1].title 'Mistakes seen in failed episodes' repeats the prompt's "
                           "own words (100% of its words); state a concrete skill")


# --- stages on the scripted stub ---------------------------------------------------------------

GOOD_THINKS = ["A spraybottle is often kept in a cabinet, so I start with the first one.",
               "I need the spraybottle, so I go to cabinet 2 to look for it",
               "This cabinet is closed; I must open it to see inside.",
               "The spraybottle is inside, so I pick it up.",
               "I hold the spraybottle now and the task wants it on the toilet.",
               "I am at the toilet with the spraybottle, so placing it finishes the task."]


def spray_thinks(over=None):
    texts = list(GOOD_THINKS)
    for i, t in (over or {}).items():
        texts[i] = t
    return answer({"thinks": [{"step_index": i, "think": t} for i, t in enumerate(texts)]})


@pytest.fixture()
def spray_store(tmp_path):
    """The ReAct ALFWorld sample's "put some spraybottle on toilet" trajectory (6 actions, no
    admissible lists) alone in a store, with empty memory and skills artifacts."""
    _, trajs = parsed_sample(tmp_path / "parse", "react-alfworld", "react")
    [traj] = [t for t in trajs if t.task == "put some spraybottle on toilet."]
    assert [s.action for s in traj.steps[1:]] == SPRAY
    store = ArtifactStore(str(tmp_path / "root"), "r1")
    write_trajectories(store, [traj])
    return distill_store(store), traj


def run_distill(store, script, step_retry=True):
    with ChatStub(script) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.distill.source_thoughts = "ignore"
        cfg.distill.step_retry = step_retry
        res = run_stage("distill", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    return res, store.require("distill"), stub


BAD = {"own action": {5: "put spraybottle on toilet 1"},
       "earlier action": {2: "go to cabinet 2"},
       "command": {4: "go to toilet 1 and put spraybottle 2 in/on toilet 1"}}


@pytest.mark.parametrize("case", list(BAD))
def test_distill_think_is_action_is_repaired(spray_store, case):
    store, traj = spray_store
    res, art, stub = run_distill(store, [spray_thinks(BAD[case]), spray_thinks()])
    [row] = art.read_rows()
    assert [t["think"] for t in row["thinks"]] == GOOD_THINKS
    assert res.manifest["counters"]["quality"]["rejected_answers"] == {"think_is_action": 1}
    step = next(iter(BAD[case]))
    assert f"think_is_action: the think for step {step} " in stub.requests[1]["messages"][-1]["content"]
    assert len(stub.requests) == 2


def test_distill_think_is_action_unrepaired_is_quarantined(spray_store):
    store, traj = spray_store
    bad = spray_thinks(BAD["own action"])
    # without the one-step second round (tests/pipeline/quality/test_stages.py has its own tests)
    res, art, _ = run_distill(store, [bad, bad], step_retry=False)
    counts = res.manifest["counts"]
    assert (counts["in"], counts["out"], counts["quarantined"]) == (1, 0, 1)
    assert counts["quarantine_reasons"] == {"think_is_action": 1}
    [q] = art.read_rows(quarantine=True)
    assert (q["item_id"], q["reason"], q["raw"]) == (traj.trajectory_id, "think_is_action", bad["content"])
    assert q["detail"].startswith("call " + traj.trajectory_id + "#0: think_is_action: the think for step 5 "
                                  "'put spraybottle on toilet 1' only restates 'put spraybottle 2 in/on toilet 1'")
    quality = res.manifest["counters"]["quality"]
    assert (quality["quarantined"], quality["rate"]) == ({"think_is_action": 1}, {"think_is_action": 1.0})
    assert quality["rejected_answers"] == {"think_is_action": 2}


def test_skills_echo_junk_is_repaired_or_quarantined(tmp_path):
    """The general call answers echo junk twice (quarantined ``echo_prompt``), the cool call a
    one-word title once (repaired); the bank keeps only real skills and counts reconcile."""
    from tests.helpers.skills_data import MEMORIES, write_dedupe

    store = ArtifactStore(str(tmp_path), "r1")
    write_dedupe(store, {m["trajectory_id"]: f"kitchen-{i}" for i, m in enumerate(MEMORIES, 1)})
    write_upstream(store, "memory", MEMORIES, MEMORY_SCHEMA)
    echoed = answer({"skills": [{"title": "Mistakes seen in failed episodes",
                                 "principle": "Learn from what worked and failed to fail.",
                                 "when_to_apply": "Before placing a cooled object."}]})
    one_word = answer({"skills": [{"title": "Cool", "principle": "Cool the object with the fridge before placing it.",
                                   "when_to_apply": "The goal says cool."}]})
    cool = answer({"skills": [{"title": "Cool In Fridge", "principle": "Cool the object with the fridge before "
                               "placing it.", "when_to_apply": "The goal says cool."}]})
    heat = answer({"skills": [{"title": "Heat In Microwave", "principle": "Heat the object with the microwave "
                               "before placing it.", "when_to_apply": "The goal says heat."}]})
    mistake = answer({"mistakes": [{"description": "Wrong appliance", "why_it_happens": "Verb misread",
                                    "how_to_avoid": "Reread the goal"}]})
    with ChatStub([echoed, echoed, one_word, cool, heat, mistake]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.export.val_fraction = 0.0
        res = run_stage("skills", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    art = store.require("skills")
    assert [r["title"] or r["description"] for r in art.read_rows()] == [
        "Cool In Fridge", "Heat In Microwave", "Wrong appliance"]
    assert [(q["item_id"], q["reason"]) for q in art.read_rows(quarantine=True)] == [
        ("alfworld/general/", "echo_prompt")]
    assert "echo_prompt: skills[0].title 'Mistakes seen in failed episodes'" in \
        stub.requests[1]["messages"][-1]["content"]
    quality = res.manifest["counters"]["quality"]
    assert quality["rejected_answers"] == {"echo_prompt": 2, "not_actionable": 1}
    assert quality["quarantined"] == {"echo_prompt": 1} and quality["rate"] == {"echo_prompt": 0.25}
    counts = res.manifest["counts"]
    assert counts["units_in"] == counts["units_out"] + counts["quarantined"]


def test_skill_update_rejects_echo_and_one_word_titles_item_by_item():
    """An answer is repaired only when every skill breaks a rule; otherwise the bad skills are
    dropped when the answer is applied, each with its rule, and the good ones are added."""
    from pipeline.bank.evolving import SkillBank, apply_updates, update_request
    from pipeline.llm.types import JSONResult
    req = update_request(SkillBank([]), "cooking", 0.25, 0.4, "- Task: cook", 2)
    good = {"title": "Slice Before Cooking", "principle": "Slice the ingredient with the knife before you cook it.",
            "when_to_apply": "A recipe lists a sliced ingredient."}
    assert req.check([good]) is None
    assert req.check([good, dict(good, title="Cook")]) is None
    assert req.check([dict(good, title="Cook")]) == (
        "not_actionable: skills[0].title 'Cook' is one word; name the skill in 3 to 5 words")
    assert req.check([dict(good, principle="Write new skills for the category.")]).startswith(
        "echo_prompt: skills[0].principle 'Write new skills for the category.' repeats the prompt's own words")
    up = apply_updates(SkillBank([]), [JSONResult("cooking", True, [good, dict(good, title="Cook")])],
                       {"cooking": ["t1"]}, "m", max_new=2, cap=5, step=3)
    assert [r["title"] for r in up.bank.rows] == ["Slice Before Cooking"]
    assert [(q["reason"], q["item_id"]) for q in up.quarantine] == [("not_actionable", "cooking")]
    assert json.loads(up.quarantine[0]["raw"])["title"] == "Cook"


def test_think_is_action_flagged_only_when_listed_in_flag_rules(spray_store):
    store, _ = spray_store
    with ChatStub([spray_thinks(BAD["earlier action"])]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.distill.source_thoughts = "ignore"
        cfg.quality.flag_rules = ["think_is_action"]
        res = run_stage("distill", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    assert (res.manifest["counts"]["out"], res.manifest["counts"]["quarantined"]) == (1, 0)
    assert res.manifest["counters"]["quality"]["flagged"] == {"think_is_action": 1}


# the sample run's WebShop mistake (embedded model) and the memory it was built from: its cause
# and fix are the memory's recorded bad actions
WEBSHOP_MEMORY = {"refined_trajectory": [],
                  "mistakes_to_avoid": [{"trigger_condition": "Natural Black #1B", "bad_action": "Click Natural Black #1b"},
                                        {"trigger_condition": "buy", "bad_action": "click[B07HRFJWP8]"}]}
WEBSHOP_JUNK = {"description": "buy", "why_it_happens": "click[B07HRFJWP8] },", "how_to_avoid": "Click Natural Black #1b"}


def test_memory_actions_lists_refined_and_bad_actions():
    mem = {"refined_trajectory": [{"action": "go to cabinet 2"}, {"action": "go to cabinet 2"}],
           "mistakes_to_avoid": [{"bad_action": "open drawer 1"}, {"bad_action": " "}]}
    assert echo.memory_actions([mem, WEBSHOP_MEMORY]) == ["go to cabinet 2", "open drawer 1", "Click Natural Black #1b",
                                                          "click[B07HRFJWP8]"]


def test_a_mistake_that_restates_its_memorys_bad_actions_fires():
    found = echo.action_field_violations("mistakes[0]", WEBSHOP_JUNK, echo.memory_actions([WEBSHOP_MEMORY]))
    assert [(v.reason, v.detail.split(" ", 1)[0]) for v in found] == [
        ("not_actionable", "mistakes[0].why_it_happens"), ("not_actionable", "mistakes[0].how_to_avoid")]


def test_good_bank_fields_never_restate_the_sample_actions(tmp_path):
    """Every principle, cause and fix of the 162 fixture items against every recorded action of
    the ALFWorld and WebShop samples (and with no actions the rule is off)."""
    actions = []
    for sample in ("react-alfworld", "react-webshop"):
        _, trajs = parsed_sample(tmp_path / sample, sample, sample)
        actions += [s.action for t in trajs for s in t.steps if s.action]
    assert len(set(actions)) > 20
    for it in bank_items():
        assert echo.action_field_violations("s", it, actions) == [], it
    assert echo.action_field_violations("m", WEBSHOP_JUNK, []) == []


def test_skills_stage_quarantines_a_mistake_built_from_bad_actions():
    """Through the stage's answer check (as the LLM request runs it): rejected with the reason,
    while a worded fix of the same mistake passes."""
    from pipeline.quality import Tally
    from pipeline.stages.skills import check_answer
    from pipeline.core.config import QualityConfig
    qcfg = QualityConfig()
    qcfg.off_topic_threshold = -1  # the action rule alone (no embedding model in this test)
    tally = Tally(qcfg.flag_rules)
    check = check_answer("mistake", ["i need a long clip-in hair extension"], qcfg, tally,
                         echo.memory_actions([WEBSHOP_MEMORY]))
    assert "only restates the action" in check({"mistakes": [WEBSHOP_JUNK]})
    good = dict(WEBSHOP_JUNK, description="buying before the options match the task",
                why_it_happens="the first color option looked close enough to the request",
                how_to_avoid="compare each option with the task's words before clicking buy now")
    assert check({"mistakes": [good]}) is None
    assert tally.rejected["not_actionable"] == 1


def test_think_that_repeats_the_distill_prompt_is_echo_prompt(tmp_path):
    """The outcome run's think is the distill prompt's TextWorld line (share 1.0); a think that
    reasons about the coin is not (1 of 8 words); the 39 recorded thoughts of the samples reach at
    most 0.3 against their own distill prompt."""
    from pipeline.stages.distill import prompt_vocab
    env_line = "The environment is TextWorld Express, a text game where the agent explores rooms and uses objects."
    got = echo.think_echo_violations([(1, env_line), (2, "The coin is not here, so I move west to the pantry to "
                                                        "find it.")], prompt_vocab("textworld"))
    done = "Now the goal is achieved, so the episode can end with done."  # 6 content words, share 0.83
    assert echo.echo_share(done, prompt_vocab("alfworld")) == (pytest.approx(5 / 6), 6)
    assert echo.think_echo_violations([(7, done)], prompt_vocab("alfworld")) == []
    assert [v.message() for v in got] == [
        "echo_prompt: the think for step 1 'The environment is TextWorld Express, a text game where the ' "
        "repeats the prompt's own words (100% of its words); reason about this step"]
    shares = []
    for sample in ("react-alfworld", "eto-alfworld", "react-webshop"):
        _, trajs = parsed_sample(tmp_path / sample, sample, sample)
        shares += [echo.echo_share(s.thought, prompt_vocab(t.env))[0] for t in trajs for s in t.steps
                   if (s.thought or "").strip()]
    assert len(shares) == 39 and max(shares) == pytest.approx(0.3)


def test_a_field_copied_from_the_worked_examples_is_an_echo():
    """The 1.5B teacher's memory of a WebShop failure copied the example's description verbatim."""
    from pipeline.llm.templates import example_texts
    examples = example_texts("memory", "webshop")
    copied = ("contextual_description", "T-shirt purchase that failed because size large was never selected "
                                        "on the product page.")
    own = ("contextual_description", "Chips purchase that failed because the price was over the limit of "
                                     "30 dollars and no flavor option matched.")
    got = echo.example_violations([copied, own], examples)
    assert [(v.reason, v.detail.split(" ")[0]) for v in got] == [("echo_prompt", "contextual_description")]


def test_a_condition_copied_from_the_worked_examples_is_not_an_echo():
    """A failed heat episode's trigger "The object is still not transformed as the goal requires"
    is the example's words and true of it; the bad action copied beside it is not this episode's."""
    from pipeline.llm.templates import example_texts
    examples = example_texts("memory", "alfworld")
    fields = [("mistakes_to_avoid[1].trigger_condition", "The object is still not transformed as the goal requires"),
              ("mistakes_to_avoid[1].bad_action", "Opened one cabinet after another looking for a place to put the "
                                                  "mug while it was still not cool"),
              ("mistakes_to_avoid[0].bad_action", "Examined the stoveburner before doing the heat step")]
    got = echo.example_violations(fields, examples)
    assert [v.detail.split(" ")[0] for v in got] == ["mistakes_to_avoid[1].bad_action"]


KITCHEN = ("You are in the kitchen. In one part of the room you see a stove. There is also an oven. You also see a "
           "fridge that is closed. In another part of the room you see a counter, that has nothing on it. In one part "
           "of the room you see a kitchen cupboard that is closed. There is also a cutlery drawer that is closed. You "
           "also see a trash can that is closed. To the North you see the pantry.")
COIN_TASK = "search the environment and find the coin.  Once you find the coin, take it."


@pytest.mark.parametrize("think,fires", [
    # the TextWorld outcome run's teacher: the room's contents copied into the think
    ("I am in the kitchen and I see a stove, an oven, a fridge, a counter, a kitchen cupboard, a cutlery drawer, "
     "and a trash can. I want to search the environment and find the coin.", True),
    ("I move north to the pantry. I see a stove, an oven, a fridge and a trash can.", True),
    # naming three things to compare is reasoning; so is the goal's own list
    ("The kitchen has a stove, a fridge and an oven but no coin, so I move north.", False),
    ("No coin here. The pantry to the north is unexplored, so I go there.", False),
])
def test_a_think_that_lists_the_room_is_lists_observation(think, fires):
    found = echo.list_violations([(2, think)], {2: KITCHEN}, COIN_TASK)
    assert [v.reason for v in found] == (["lists_observation"] if fires else [])


def test_a_list_of_the_goals_requirements_is_not_an_inventory():
    obs = "Results: B01 black leather boots size 7 $29.99; B02 brown boots size 8 waterproof $45.00"
    task = "i need black leather boots, size 7, waterproof, under 30 dollars"
    think = "I need boots that are black, leather, size 7, waterproof and under 30 dollars, so I search."
    assert echo.listed_things(think, obs, task) == []


def test_recorded_thoughts_of_the_samples_never_list_the_observation(tmp_path):
    """The 39 recorded thoughts of the ReAct/ETO ALFWorld and ReAct WebShop samples, each against
    the observations up to its step: 0 fire, and none lists more than 2 things."""
    longest, n = 0, 0
    for sample in ("react-alfworld", "eto-alfworld", "react-webshop"):
        _, trajs = parsed_sample(tmp_path / sample, sample, sample)
        for t in trajs:
            for k in range(1, len(t.steps)):
                if (t.steps[k].thought or "").strip():
                    n += 1
                    seen = " ".join(s.observation for s in t.steps[:k])
                    longest = max(longest, len(echo.listed_things(t.steps[k].thought, seen, t.task)))
                    assert echo.list_violations([(k, t.steps[k].thought)], {k: seen}, t.task) == []
    assert n == 39 and longest <= 2

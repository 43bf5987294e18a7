"""Skill-bank rules on real banks and the shipped sample's real trajectories.

Good data: SkillRL's released ALFWorld and WebShop banks (tests/fixtures/skillrl-memory, 98
skills and 23 mistakes): no rule may fire on them, judged against the sample's successful
trajectories of the matching category. Bad data: the skills and mistakes Qwen2.5-Coder-1.5B wrote
for the sample (quoted from its bank)."""
from __future__ import annotations

import json
import os

import pytest

from pipeline.core.records import Trajectory
from pipeline.quality import Violation, bankrules
from tests.helpers.paths import FIXTURES
from tests.helpers.quality_data import parsed_sample

#: SkillRL's task-specific category keys -> ours.
SKILLRL_CATEGORY = {"pick_and_place": "pick_and_place", "look_at_obj_in_light": "look_at_obj_in_light",
                    "clean": "clean", "heat": "heat", "cool": "cool", "pick_two_obj_and_place": "pick_two_obj_and_place"}


def bank(env: str) -> dict:
    with open(os.path.join(FIXTURES, "skillrl-memory", env, "claude_style_skills.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def sample_successes(tmp_path_factory) -> list[Trajectory]:
    """The successful trajectories of the shipped sample (ALFWorld from four sources, WebShop)
    and of four real ETO cool/heat records (tests/fixtures/quality/SOURCE.md)."""
    trajs = []
    for sample in ("skillrl-rollouts", "react-alfworld", "eto-alfworld", "react-webshop"):
        _, got = parsed_sample(tmp_path_factory.mktemp(sample), sample, sample)
        trajs += [t for t in got if t.success]
    return trajs + eto_fixture(tmp_path_factory.mktemp("eto"))


def eto_fixture(tmp_path) -> list[Trajectory]:
    """parse + remove_loops of tests/fixtures/quality/eto_cool_heat_successes.json."""
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.config import PipelineConfig
    from pipeline.engine.runner import run_stage
    from pipeline.stage.stage import StageContext
    store = ArtifactStore(str(tmp_path / "root"), "r")
    ctx = StageContext(store, PipelineConfig(), input_path=os.path.join(FIXTURES, "quality", "eto_cool_heat_successes.json"))
    for stage in ("parse", "remove_loops"):
        run_stage(stage, ctx, log=lambda s: None)
    return [Trajectory.from_row(r) for r in store.require("remove_loops").read_rows()]


def test_restated_action_fires_on_a_command_in_other_words():
    assert bankrules.restated_action("Navigate to the specified cabinet by following the sequence of steps.") \
        == "go cabinet"
    assert bankrules.restated_action("Heat the object in the microwave.") == "heat microwave object"
    # an order, a condition or a second action makes it a rule of behaviour
    assert bankrules.restated_action("Take the object, then heat it in the microwave.") is None
    assert bankrules.restated_action("Open the fridge only if the object is not on a countertop.") is None


@pytest.mark.parametrize("env", ["alfworld", "webshop"])
def test_no_skillrl_skill_restates_an_action(env):
    b = bank(env)
    skills = b["general_skills"] + [s for v in b["task_specific_skills"].values() for s in v]
    assert len(skills) == {"alfworld": 44, "webshop": 54}[env]
    assert [s["title"] for s in skills if bankrules.restated_action(s["principle"])] == []
    assert [s["title"] for s in skills if bankrules.restated_violations("s", s, [])] == []


@pytest.mark.parametrize("title,principle", [
    # the 1.5B teacher's answers once the outlines of the successes were in its skills prompt
    ("Go to Toilet", "Go to the toilet when instructed to do so."),
    ("Put Object in Target Location", "Put the object in its target location after taking it."),
    ("Go To Location", "Navigate to the specific location where you want to place or retrieve the object."),
    ("Use Lamp", "Use the desklamp when the observation says the agent should use it."),
])
def test_a_command_with_a_void_condition_or_order_is_a_restated_action(title, principle):
    assert [v.reason for v in bankrules.restated_violations("skills[0]", {"title": title, "principle": principle},
                                                            [])] == ["restated_action"]


@pytest.mark.parametrize("principle", [
    "Look for the object in likely locations before searching other places.",
    "If you're moving an object to a different location, make sure it's already cooled before doing so.",
    "Put the object in its target location only after heating it in the microwave.",
])
def test_a_real_condition_or_order_keeps_a_skill(principle):
    assert bankrules.restated_violations("skills[0]", {"title": "Put Object In Target", "principle": principle}, []) \
        == []


def test_duplicate_mistakes_share_one_cause():
    """The 1.5B bank's boilerplate: one cause repeated with a different object."""
    cause = "The agent did not remember where the {} is located in the kitchen."
    items = [{"description": f"Could not find the {o}.", "why_it_happens": cause.format(o),
              "how_to_avoid": f"Search the places where a {o} is usually kept."} for o in ("mug", "apple", "egg")]
    got = bankrules.duplicate_mistakes("mistakes", items)
    assert [v.reason for v in got] == ["duplicate_mistake", "duplicate_mistake"]
    assert got[0].detail.startswith("mistakes[1].why_it_happens repeats mistakes[0]'s")


@pytest.mark.parametrize("env", ["alfworld", "webshop"])
def test_skillrl_mistakes_are_all_distinct(env):
    mistakes = bank(env)["common_mistakes"]
    assert len(mistakes) in (11, 12) and bankrules.duplicate_mistakes("m", mistakes) == []


def test_an_order_that_every_success_contradicts(sample_successes):
    # ETO alfworld_13 and alfworld_63 take the object, then cool it with fridge 1; the sample's
    # SkillRL cool "success" never cools the cup (it neither goes to the fridge nor comes after it)
    cool = [t for t in sample_successes if t.category == "cool"]
    assert len(cool) == 3
    bad = bankrules.order_violations("skills[0].principle", "Go to the fridge before taking the vase.", cool)
    assert [v.reason for v in bad] == ["contradicts_success"]
    assert "'go fridge' before 'take vase'" in bad[0].detail
    assert bankrules.order_violations("p", "Take the object first, then go to the fridge and cool it.", cool) == []
    assert bankrules.order_violations("p", "Go to the fridge before or after taking the object.", cool) == []


def test_an_appliance_no_success_used(sample_successes):
    heat = [t for t in sample_successes if t.category == "heat"]
    got = bankrules.tool_violations("skills[0]", "Heat Mug: first locate the stoveburner",
                                    "first locate the stoveburner", heat, "heat")
    assert [v.reason for v in got] == ["contradicts_success"] and "stoveburner" in got[0].detail
    assert bankrules.tool_violations("s", "Heat Mug: use the microwave, not the stoveburner",
                                     "use the microwave, not the stoveburner", heat, "heat") == []
    # the place reached just before the transform, in two words (the teacher's bank, run of the sample)
    egg = "When the goal asks for a hot egg, take it first, carry it to the dining table and heat it there."
    [v] = bankrules.tool_violations("skills[2]", "Heat Egg on Dining Table: " + egg, egg, heat, "heat")
    assert v.detail == ("skills[2] sends the agent to diningtable to heat, but every successful episode of its kind "
                        "used microwave")
    mug = "Take the mug from the dining table, carry it to the microwave and heat it there."
    assert bankrules.tool_violations("s", "Heat Mug: " + mug, mug, heat, "heat") == []
    # carried to an appliance with "take it to" (the teacher's cool skills; no cool success: the game's rule)
    cool = "When you need to cool an object, take it to the microwave and wait until it is cold."
    [v] = bankrules.tool_violations("skills[1]", "Cool Objects in Microwave: " + cool, cool, [], "cool")
    assert v.detail == "skills[1] sends the agent to microwave to cool, but the game's rules require fridge"
    fridge = cool.replace("microwave", "fridge")
    assert bankrules.tool_violations("s", "Cool Objects in Fridge: " + fridge, fridge, [], "cool") == []


@pytest.mark.parametrize("env", ["alfworld", "webshop"])
def test_no_skillrl_skill_or_mistake_contradicts_the_sample_successes(env, sample_successes):
    b = bank(env)
    succ = [t for t in sample_successes if t.env == env]
    found = []
    for key, skills in [("general", b["general_skills"]), *b["task_specific_skills"].items()]:
        cat = SKILLRL_CATEGORY.get(key, "")
        src = [t for t in succ if not cat or t.category == cat]
        for s in skills:
            found += bankrules.order_violations(s["title"], s["principle"], src, cat)
            found += bankrules.order_violations(s["title"], s["principle"], [], cat)  # the game's order alone
            found += bankrules.tool_violations(s["title"], " ".join(s.values()), s["principle"], src, cat)
    for m in b["common_mistakes"]:
        found += bankrules.order_violations(m["description"], m["how_to_avoid"], succ)
    assert found == []


def test_a_command_title_with_a_bare_principle_is_a_restated_action():
    """The 1.5B bank split a plan into skills: "Go to Microwave: Place the object in the microwave
    for heating." A command title is fine with an order or a reason in its principle."""
    got = bankrules.restated_violations("skills[1]", {"title": "Go to Microwave",
                                                      "principle": "Place the object in the microwave for heating."}, [])
    assert [v.reason for v in got] == ["restated_action"]
    assert bankrules.restated_violations("s", {"title": "Heat Object", "principle": "Take the object first, then heat "
                                               "it in the microwave before going to the target."}, []) == []


LOOK = "look_at_obj_in_light"


def teacher_bank(env: str) -> dict:
    with open(os.path.join(FIXTURES, "quality", f"teacher_bank_{env}.json"), encoding="utf-8") as f:
        return json.load(f)


def test_the_lamp_used_before_the_object_is_taken(sample_successes):
    """The 1.5B teacher's two look-in-light skills: the lamp first, though the object must be in
    hand when the lamp goes on. Two sample successes tell (take, then use desklamp 1, then the
    episode ends); the two synthetic SkillRL ones never use the lamp and cannot tell."""
    look = [t for t in sample_successes if t.category == LOOK]
    assert len(look) == 4
    skills = teacher_bank("alfworld")["task_specific_skills"][LOOK]
    assert [s["principle"] for s in skills] == [
        "When the goal asks for a light, look in the light source first before moving to the target.",
        "When the goal asks for a light, use the light source first before moving to the target."]
    for s in skills:
        [v] = bankrules.order_violations("skills[0].principle", s["principle"], look, LOOK)
        assert v == Violation("contradicts_success", "skills[0].principle prescribes 'use lamp' first, which none "
                              "of the 2 successful episodes of its kind did; describe the order the successes followed")
        # no success of the category at all (the skill updater during GRPO): the game's order
        [v] = bankrules.order_violations("p", s["principle"], [], LOOK)
        assert v.detail == "p prescribes 'use lamp' first, but the game's rules order a look_at_obj_in_light task " \
                           "take -> use"
    assert bankrules.order_violations("p", "Turn on the desk lamp before picking up the object.", [], LOOK) != []
    for good in ("Take the object first, then go to the desklamp and turn it on.",
                 "Find and take the object before you use the lamp."):
        assert bankrules.order_violations("p", good, look, LOOK) == []
        assert bankrules.order_violations("p", good, [], LOOK) == []


def test_first_reads_the_action_it_follows():
    """"first" before a comma, "then" or "before" closes the phrase of the action before it:
    "take the object first, then go to the desklamp" prescribes the take first, not the go."""
    [(a, b), _] = bankrules.order_claims("Take the object first, then go to the desklamp and turn it on.")
    assert (a.concept, b) == ("take", None)
    [(a, b), _] = bankrules.order_claims("Heat the mug first before putting it in the cabinet.")
    assert (a.concept, b) == ("heat", None)
    assert bankrules.order_violations("p", "Heat the mug first before putting it in the cabinet.", [], "heat") == []


def test_the_games_order_stands_in_when_no_success_tells():
    bad = bankrules.order_violations("p", "Put the mug in the cabinet, then heat it in the microwave.", [], "heat")
    assert [v.detail for v in bad] == ["p prescribes 'put mug cabinet' before 'heat microwave', but the game's "
                                       "rules order a heat task take -> heat -> put"]
    assert bankrules.order_violations("p", "Heat the mug in the microwave, then put it in the cabinet.", [],
                                      "heat") == []
    # going is free in the game: no order is known for it
    assert bankrules.order_violations("p", "Go to the fridge before taking the vase.", [], "cool") == []
    assert bankrules.order_violations("p", "Put the mug in the cabinet, then heat it.", [], "") == []


def test_two_mistakes_with_one_cause_in_other_verbs():
    """The teacher's three WebShop mistakes. Causes, as content words with verbs as actions
    (difflib ratio): [1] "does not click on the required option" vs [2] "does not select any
    option" 0.83 (0.67 with "select" and "click" as different words); [0] "does not check if it
    matches the description" vs either 0.46: another mistake (the wrong product, not the wrong
    option), kept. Fixes score 0.2-0.6. SkillRL's most similar pair scores 0.33."""
    mistakes = teacher_bank("webshop")["common_mistakes"]
    assert [m["why_it_happens"] for m in mistakes] == [
        "It opens the first result and does not check if it matches the description.",
        "It opens the first result and does not click on the required option.",
        "It opens the first result and does not select any option."]
    got = bankrules.duplicate_mistakes("mistakes", mistakes)
    assert [(v.reason, v.detail) for v in got] == [("duplicate_mistake", "mistakes[2].why_it_happens repeats "
                                                    "mistakes[1]'s; merge them or name a different cause and fix")]


def test_the_teachers_bank_item_by_item(sample_successes):
    """Every item of the 1.5B teacher's bank through every rule of the skills stage (no
    off_topic: no encoder): the five wrong or useless items and the repeated mistake are
    quarantined, each with its rule; the other eleven pass."""
    from pipeline.bank.judge import ItemJudge
    from pipeline.core.config import QualityConfig
    qcfg = QualityConfig(off_topic_threshold=-1)
    reasons = {}
    for env in ("alfworld", "webshop"):
        bank = teacher_bank(env)
        groups = [("general", "", bank["general_skills"]), ("mistake", "", bank["common_mistakes"])]
        groups += [("task_specific", c, items) for c, items in bank["task_specific_skills"].items() if items]
        for kind, cat, items in groups:
            succ = [t for t in sample_successes if t.env == env and (not cat or t.category == cat)]
            judge = ItemJudge(kind, qcfg, successes=succ, category=cat, env=env)
            for item, verdict in zip(items, judge.judge(items)):
                reasons[item.get("title") or item["description"]] = [v.reason for v in verdict]
    assert len(reasons) == 16  # 17 items; the two "Select Size Constraint" share one title
    assert {k: v for k, v in reasons.items() if v} == {
        "Avoid Revisiting Empty Places": ["feeling_reason"], "Look In Light": ["contradicts_success"],
        "Use Light Source": ["contradicts_success"], "Cool Vase": ["self_target"],
        "Filter by Price": ["missing_control"],
        "The agent buys a product without selecting any option from the list of available options.":
            ["duplicate_mistake"]}


def test_a_when_to_apply_that_tells_an_episode():
    """Two WebShop skills of the 1.5B teacher's bank on the sample (run with llama-server): a
    memory's mistake pasted in as the condition. None of SkillRL's 128 skills fires."""
    [v] = bankrules.condition_narration("skills[1].when_to_apply", "When The agent did not select a natural-looking "
                                        "product: Clicked Buy Now without selecting a product that meets the "
                                        "natural looking requirement.")
    assert (v.reason, v.detail) == ("narration", "skills[1].when_to_apply tells an episode ('The agent did') instead "
                                                 "of a state the agent can check before acting; say when the skill "
                                                 "applies")
    assert bankrules.condition_narration("w", "When The search results are too broad and do not match the specific "
                                         "requirements: Clicked on a product that does not meet the price "
                                         "constraint.")[0].detail.startswith("w tells an episode ('Clicked')")
    assert bankrules.condition_narration("w", "When the product page lists options.") == []
    assert bankrules.condition_narration("w", "Goal: heated object; the object is in hand.") == []
    skillrl = [s for env in ("alfworld", "webshop") for key, items in
               [("general", bank(env)["general_skills"]), *bank(env)["task_specific_skills"].items()] for s in items]
    assert len(skillrl) > 80 and [s["title"] for s in skillrl if bankrules.condition_narration("w", s["when_to_apply"])] == []


def test_a_mistake_that_retells_its_episode():
    """The 1.5B teacher's one ALFWorld mistake on the shipped sample, fed the memory of "look at book
    under the desklamp"; a kind of mistake, or objects given as examples, pass."""
    book = {"description": "The book is not moved from shelf to dining table.",
            "why_it_happens": "The agent failed to find the book in any of the drawers.",
            "how_to_avoid": "Look for the book in all the drawers before moving it to the dining table."}
    [v] = bankrules.episode_violations("mistakes[0]", book, ["look at book under the desklamp."])
    assert v.reason == "episode_specific" and v.detail.startswith(
        "mistakes[0].description retells one episode (the book of 'look at book under the desklamp.', at "
        "diningtable, shelf)")
    # another task's object does not count, nor the lamp as the place
    assert bankrules.episode_violations("mistakes[0]", book, ["heat some egg and put it in diningtable."]) == []
    assert bankrules.episode_violations("mistakes[0]", {"description": "The agent turns on the desklamp before "
                                                        "taking the book."}, ["look at book under the desklamp."]) == []
    example = {"description": "The agent takes an object of the wrong kind, such as a butterknife from the "
                              "countertop when the goal names a knife."}
    assert bankrules.episode_violations("mistakes[0]", example, ["put a butterknife in countertop."]) == []


@pytest.mark.parametrize("env", ["alfworld"])
def test_no_skillrl_mistake_retells_an_episode(env):
    """Against every ALFWorld object as a source task's goal: none of SkillRL's 11 mistakes names one."""
    from pipeline.quality import actions as act
    sources = [f"put a {o} in shelf." for o in sorted(act.OBJECTS)]
    mistakes = bank(env)["common_mistakes"]
    assert len(mistakes) == 11
    assert [m["description"] for m in mistakes if bankrules.episode_violations("m", m, sources)] == []

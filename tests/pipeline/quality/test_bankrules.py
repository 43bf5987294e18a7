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
from pipeline.quality import bankrules
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
    from pipeline.core.runner import run_stage
    from pipeline.core.stage import StageContext
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


@pytest.mark.parametrize("env", ["alfworld", "webshop"])
def test_no_skillrl_skill_or_mistake_contradicts_the_sample_successes(env, sample_successes):
    b = bank(env)
    succ = [t for t in sample_successes if t.env == env]
    found = []
    for key, skills in [("general", b["general_skills"]), *b["task_specific_skills"].items()]:
        cat = SKILLRL_CATEGORY.get(key, "")
        src = [t for t in succ if not cat or t.category == cat]
        for s in skills:
            found += bankrules.order_violations(s["title"], s["principle"], src)
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

"""Action outlines of successful trajectories for the skills prompt: numbers dropped, episode
details named by role, repeats counted, the line bounded; and the skills calls that show them."""
from __future__ import annotations

import pytest

from pipeline.bank import outline
from pipeline.core.config import SkillsConfig
from pipeline.core.records import Step, Trajectory
from pipeline.stages import skills
from tests.helpers.skills_data import MEMORIES


def _traj(env: str, task: str, actions: list[str], category: str = "other", outcome: str = "success") -> Trajectory:
    steps = [Step(i, a, f"obs {i}") for i, a in enumerate(actions)]
    return Trajectory(f"t-{task[:8]}", env, "e", task, category, outcome, 1.0, steps, "u", "f", 0)


@pytest.mark.parametrize("env,action,phrase", [
    ("alfworld", "heat mug 1 with microwave 1", "heat mug with microwave"),
    ("alfworld", "put spraybottle 2 in/on toilet 1", "put spraybottle in toilet"),
    ("webshop", "search[noise cancelling usb microphone]", "search"),
    ("webshop", "click[B0972Q1T8T]", "click a product"),
    ("webshop", "click[8.5 ounce (pack of 1)]", "click an option"),
    ("webshop", "click[Buy Now]", "click[Buy Now]"),
    ("webshop", "click[< Prev]", "click[< Prev]"),
    ("textworld", "move east", "move to another room"),
    ("textworld", "open door to south", "open a door"),
    ("textworld", "take coin", "take coin"),
    ("search", "answer[Paris]", "answer"),
    ("alfworld", "  ", ""),
    ("textworld", "look around", ""),
    ("textworld", "inventory", ""),
    ("alfworld", "inventory", ""),
    ("alfworld", "examine drawer 1", "examine drawer"),
])
def test_step_phrase(env, action, phrase):
    assert outline.step_phrase(env, action) == phrase


def test_compress_counts_runs_of_one_or_two_phrases():
    assert outline.compress(["a", "a", "a", "b"]) == ["a (x3)", "b"]
    assert outline.compress(["go", "open", "go", "open", "go", "open", "take"]) == ["go, open (x3)", "take"]
    assert outline.compress(["a", "b", "a", "c"]) == ["a", "b", "a", "c"]
    assert outline.compress([]) == []


def test_outline_of_a_real_pen_episode():
    acts = [a for i in range(1, 5) for a in (f"go to drawer {i}", f"open drawer {i}")]
    acts += ["take pen 2 from drawer 4", "go to dresser 1", "use desklamp 1"]
    t = _traj("alfworld", "examine the pen with the desklamp.", acts, "look_at_obj_in_light")
    assert outline.outline(t) == ("examine the pen with the desklamp: go to drawer, open drawer (x4) -> take pen "
                                  "from drawer -> go to dresser -> use desklamp")


def test_outline_is_bounded_at_a_step_and_keeps_a_long_task_short():
    places = ["shelf", "cabinet", "drawer"]  # a cycle of three: nothing to compress
    t = _traj("alfworld", "put a mug in cabinet.", [f"go to {places[i % 3]} {i}" for i in range(60)])
    line = outline.outline(t, max_chars=120)
    assert line == ("put a mug in cabinet: go to shelf -> go to cabinet -> go to drawer -> go to shelf -> "
                    "go to cabinet -> go to drawer ...")
    long_task = _traj("alfworld", "put a " + "very " * 60 + "clean mug in cabinet", ["go to cabinet 1"])
    line = outline.outline(long_task)
    assert line.endswith(" ...: go to cabinet") and len(line.split(":")[0]) <= outline._TASK_CHARS + 4


def test_a_webshop_outline_leaves_out_the_shoppers_words():
    t = _traj("webshop", "i'm looking for a styling cream that is cruelty free, and price lower than 40.00 dollars",
              ["search[styling cream cruelty free]", "click[B008HRRWHM]", "click[8.5 ounce (pack of 1)]",
               "click[Buy Now]"])
    assert outline.outline(t) == "search -> click a product -> click an option -> click[Buy Now]"


def test_skills_calls_show_the_outlines_of_their_category():
    wins = [_traj("alfworld", "cool some cup and put it in cabinet.", ["go to countertop 1", "take cup 1 from "
                  "countertop 1", "go to fridge 1", "cool cup 1 with fridge 1", "go to cabinet 1",
                  "put cup 1 in/on cabinet 1"], "cool"),
            _traj("alfworld", "heat some egg and put it in garbagecan.", ["take egg 1 from countertop 1",
                  "heat egg 1 with microwave 1", "put egg 1 in/on garbagecan 1"], "heat")]
    calls = {(c.kind, c.category): c.request.messages[1]["content"]
             for c in skills.plan_calls(MEMORIES, "alfworld", SkillsConfig(), successes=wins)}
    cool_line = "- (x1) cool some cup and put it in cabinet: go to countertop -> take cup from countertop -> go to " \
                "fridge -> cool cup with fridge -> go to cabinet -> put cup in cabinet"
    heat_line = "- (x1) heat some egg and put it in garbagecan: take egg from countertop -> heat egg with " \
                "microwave -> put egg in garbagecan"
    assert cool_line in calls[("general", "")] and heat_line in calls[("general", "")]
    assert cool_line in calls[("task_specific", "cool")] and "heat some egg" not in calls[("task_specific", "cool")]
    assert heat_line in calls[("task_specific", "heat")]
    assert "{outlines}" not in calls[("mistake", "")] and "action by action" not in calls[("mistake", "")]
    # no successes, or the outlines turned off: the section says none
    none = {(c.kind, c.category): c.request.messages[1]["content"]
            for c in skills.plan_calls(MEMORIES, "alfworld", SkillsConfig(max_outlines=0), successes=wins)}
    assert "action by action (numbers dropped; xN = repeated N times):\n- (none)" in none[("general", "")]

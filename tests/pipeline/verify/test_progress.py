"""Where an ALFWorld agent stands before each action (the distill prompt's state line), on real ETO records."""
from __future__ import annotations

import dataclasses

from pipeline.verify.progress import progress_lines
from tests.pipeline.verify.test_alfworld import ETO


def test_heat_task_line_by_line():
    t = ETO["alfworld_53"]  # heat some mug and put it in coffeemachine
    lines = progress_lines(t)
    assert len(lines) == len(t.steps)
    assert lines[0] == ("in the middle of the room, holding nothing; no mug seen yet. Still to do: find a mug, "
                        "take it, heat it with a microwave, put it in/on a coffeemachine.")
    assert t.steps[2].action == "take mug 1 from sinkbasin 1"
    assert lines[1] == ("at sinkbasin 1, holding nothing; mug 1 was seen at sinkbasin 1. Still to do: take it, "
                        "heat it with a microwave, put it in/on a coffeemachine.")
    assert lines[3] == "at microwave 1, holding mug 1. Still to do: heat it with a microwave, put it in/on a coffeemachine."
    assert lines[4] == "at microwave 1, holding mug 1 (hot). Still to do: put it in/on a coffeemachine."
    assert lines[-1].endswith("Still to do: nothing: the goal is met.")


def test_look_task_names_the_lamp_once_seen_and_ends_met():
    lines = progress_lines(ETO["alfworld_48"])  # look at alarmclock under the desklamp
    assert lines[0].endswith("no desklamp seen yet. Still to do: find an alarmclock, take it, "
                             "find a desklamp and use it while holding it.")
    assert lines[3] == ("at desk 1, holding nothing; alarmclock 1 was seen at desk 1; desklamp 1 was seen at desk 1. "
                        "Still to do: take it, use desklamp 1 while holding it.")
    assert lines[5].endswith("Still to do: nothing: the goal is met.")


def test_pick_two_counts_the_first_put():
    lines = progress_lines(ETO["alfworld_23"])  # put two saltshaker in drawer
    assert lines[0].endswith("put it in/on a drawer, then the same for a second saltshaker.")
    assert lines[17] == ("at drawer 1, holding nothing; no other saltshaker seen yet. Still to do: "
                         "find a second saltshaker, take it, put it in/on a drawer.")
    assert lines[-1].endswith("nothing: the goal is met.")


def test_a_transform_the_record_never_made_is_still_to_do():
    # ETO's hot cup: the microwave is opened and closed, never used to heat; the put is no goal
    lines = progress_lines(ETO["alfworld_6"])
    assert lines[-1] == ("at fridge 1, holding nothing; cup 2 was seen at countertop 2. Still to do: take it, "
                         "heat it with a microwave, put it in/on a fridge.")


def test_no_line_outside_alfworld_or_without_a_goal():
    t = ETO["alfworld_53"]
    assert progress_lines(dataclasses.replace(t, env="webshop")) == []
    assert progress_lines(dataclasses.replace(t, task="do something else.")) == []

"""Where a TextWorld Express agent stands (the distill prompt's map line), on games the real engine plays."""
from __future__ import annotations

import dataclasses
import re

import pytest

from pipeline.core.records import Step, Trajectory
from pipeline.verify.progress import progress_lines
from pipeline.verify.textworld_progress import goal_object

COIN_PARAMS = "numLocations=4,numDistractorItems=0,includeDoors=0,limitInventorySize=0"


def _traj(task: str, moves: list[tuple[str, str]]) -> Trajectory:
    steps = [Step(index=i, action=a or None, observation=o, reward=0.0, done=False, thought=None,
                  admissible_actions=[]) for i, (a, o) in enumerate(moves)]
    return Trajectory("t", "textworld", "coin-train-0", task, "find_coin", "success", 1.0, steps, "", "", 0)


def test_goal_object_of_a_find_task():
    assert goal_object("search the environment and find the coin.  Once you find the coin, take it.") == "coin"
    assert goal_object("Your task is to put things in their proper locations.") == ""


def test_map_line_by_line_with_a_closed_door():
    t = _traj("find the coin. Once you find the coin, take it.", [
        ("", "You are in the kitchen. You see a stove. To the North you see the pantry. "
             "To the West you see a closed wooden door."),
        ("move north", "You are in the pantry. There is also a shelf. To the South you see the kitchen."),
        ("move south", "You are in the kitchen. You see a stove. To the North you see the pantry. "
                       "Through an open wooden door, to the West you see the corridor."),
        ("move west", "You are in the corridor. There is also a coin. To the East you see the kitchen."),
        ("take coin", "You take the coin."),
    ])
    lines = progress_lines(t)
    assert lines[0] == ("in the kitchen (visited: kitchen); no coin here; exits to rooms not visited yet: "
                        "north (pantry), west (a closed wooden door). Still to do: find the coin and take it.")
    assert lines[1] == ("in the pantry (visited: kitchen, pantry); no coin here; every exit leads to a room "
                        "already visited. Still to do: find the coin and take it.")
    assert lines[2].endswith("exits to rooms not visited yet: west (corridor). Still to do: find the coin and take it.")
    assert lines[3] == ("in the corridor (visited: kitchen, pantry, corridor); the coin is here; every exit leads "
                        "to a room already visited. Still to do: take the coin.")
    assert lines[4] == ("in the corridor (visited: kitchen, pantry, corridor); holding the coin; every exit leads "
                        "to a room already visited.")


def test_no_line_without_a_room_or_outside_the_game():
    t = _traj("find the coin.", [("", "Welcome!"), ("look around", "You are in the kitchen.")])
    assert progress_lines(t) == []
    assert progress_lines(dataclasses.replace(t, env="webshop")) == []


@pytest.mark.slow
def test_engine_gold_coin_games_end_with_the_coin_here():
    pytest.importorskip("textworld_express")
    from pipeline.envs.sim.textworld import EnvTask, TextWorldExpressEnv
    from pipeline.verify.textworld import gold_trajectory
    with TextWorldExpressEnv() as env:
        played = [gold_trajectory(env, EnvTask("coin", seed, "train", COIN_PARAMS)) for seed in range(4)]
    for t in played:
        lines = progress_lines(t)
        assert len(lines) == len(t.steps)
        rooms = [re.match(r"You are in the ([a-z ]+)\.", s.observation).group(1)
                 for s in t.steps if re.match(r"You are in the ", s.observation or "")]
        visited = re.search(r"\(visited: ([a-z ,]+)\)", lines[-2]).group(1).split(", ")
        assert visited == list(dict.fromkeys(rooms))       # every room entered, once, in order
        assert t.steps[-1].action == "take coin"
        assert "the coin is here" in lines[-2] and "Still to do: take the coin." in lines[-2]
        first = next(i for i, s in enumerate(t.steps) if re.search(r"\ba coin\b", s.observation or ""))
        assert all("no coin here" in line for line in lines[:first])

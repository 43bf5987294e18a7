"""Where a TextWorld Express agent stands before each action, as one line of a distill prompt.

The ALFWorld line (:mod:`pipeline.verify.progress`) tracks objects and appliances; a TextWorld
Express game is a map of rooms, and what a step needs is the map so far: the room the agent is
in, the rooms it has visited, the exits that lead to rooms it has not seen, and, for a "find the
X" goal (``coin``), whether X is in this room or already held. Without it the 1.5B teacher
explained ``move north`` from a kitchen whose exits it was never shown and could not say why one
exit beats another. Every fact comes from the observations up to that step, so a think built on
the line is reasoning the agent could have had.

Observation wording follows the engine (``textworld_express``, as recorded by ``skillpipe rl
rollout`` and by SkillRL's TextWorld runs): a room opens with "You are in the <room>." and lists
its exits as "To the North you see the pantry." (with doors: "Through an open wooden door, to the
North you see the pantry." or "To the North you see a closed wooden door.").
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline.core.records import Trajectory

_ROOM = re.compile(r"^\s*You are in the ([a-z][a-z ]*?)\.", re.I)
_EXIT = re.compile(r"\bto the (north|south|east|west),? you see (the [a-z][a-z ]*?|an? [^.]*?)\.", re.I)
_FIND = re.compile(r"\bfind (?:the |a |an )?([a-z][a-z ]*?)[.,]", re.I)


@dataclass
class Map:
    """The map an agent has seen so far: current room, rooms visited in order, and each visited
    room's exits (direction -> what lies there: a room name, or a door as described)."""
    room: str = ""
    visited: list[str] = field(default_factory=list)
    exits: dict[str, dict[str, str]] = field(default_factory=dict)
    seen_goal_in: str = ""   # the room the goal object was last seen in
    holding_goal: bool = False


def goal_object(task: str) -> str:
    """The object of a "find the X" goal ("search the environment and find the coin. Once you
    find the coin, take it." -> ``"coin"``); "" for other goals."""
    m = _FIND.search(task or "")
    return m.group(1).strip().lower() if m else ""


def observe(state: Map, observation: str, action: str, goal: str) -> None:
    """Update ``state`` with one step: ``action`` (the step's action, "" at the start) and the
    ``observation`` the engine answered with."""
    text = observation or ""
    m = _ROOM.match(text)
    if m:
        room = m.group(1).strip().lower()
        state.room = room
        if room not in state.visited:
            state.visited.append(room)
        state.exits[room] = {d.lower(): what.strip().lower().removeprefix("the ")
                             for d, what in _EXIT.findall(text)}
        if goal and re.search(rf"\b(?:a|an|the|some) {re.escape(goal)}\b", text, re.I):
            state.seen_goal_in = room
        elif state.seen_goal_in == room:
            state.seen_goal_in = ""
    if goal and re.match(rf"\s*take (?:the )?{re.escape(goal)}\b", action or "", re.I) \
            and re.search(rf"\byou take the {re.escape(goal)}\b", text, re.I):
        state.holding_goal, state.seen_goal_in = True, ""


def describe(state: Map, goal: str) -> str:
    """``state`` as one prompt line: "in the kitchen (visited: kitchen, pantry); no coin here;
    exits to rooms not visited yet: south (corridor). Still to do: find the coin and take it." """
    if not state.room:
        return ""
    parts = [f"in the {state.room} (visited: {', '.join(state.visited)})"]
    here = goal and state.seen_goal_in == state.room
    if goal:
        if state.holding_goal:
            parts.append(f"holding the {goal}")
        elif here:
            parts.append(f"the {goal} is here")
        elif state.seen_goal_in:
            parts.append(f"the {goal} was seen in the {state.seen_goal_in}")
        else:
            parts.append(f"no {goal} here")
    exits = state.exits.get(state.room, {})
    new = [f"{d} ({what})" for d, what in exits.items() if what not in state.visited]
    if exits:
        parts.append("exits to rooms not visited yet: " + ", ".join(new) if new
                     else "every exit leads to a room already visited")
    line = "; ".join(parts) + "."
    if goal and not state.holding_goal:
        line += f" Still to do: {'take' if here else 'find'} the {goal}" + ("" if here else " and take it") + "."
    return line


def progress_lines(traj: Trajectory) -> list[str]:
    """``lines[i]``: the state of a TextWorld Express ``traj`` after the observation of
    ``steps[i]`` (so before ``steps[i + 1].action``), one per step; ``[]`` for a record whose
    first observation names no room."""
    if not traj.steps or not _ROOM.match(traj.steps[0].observation or ""):
        return []
    goal, state, lines = goal_object(traj.task), Map(), []
    for s in traj.steps:
        observe(state, s.observation or "", s.action or "", goal)
        lines.append(describe(state, goal))
    return lines

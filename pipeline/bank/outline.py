"""What a successful trajectory did, as one short line for the skills prompt.

The skills calls see the memories' planning patterns, which the teacher wrote itself. With the
embedded 1.5B teacher those patterns are often wrong or instance-bound ("Search likely
[Location]s for [Object] -> Take [Object] -> Go to toilet -> ..."), and the skills learned from
them inherit the errors (a cool skill that says "wait until it is cold", a look-in-light skill
that uses the lamp to search). The recorded actions of the successes are ground truth, so each
skills call also gets them, compressed:

* instance numbers are dropped (``take mug 1 from sinkbasin 1`` -> ``take mug from sinkbasin``);
* what only one episode can know is named by its role: a WebShop product id becomes "a product",
  its option "an option", the query "search"; a TextWorld compass move becomes "move to another
  room" (a fixed route is episode-specific: ``episode_specific`` quarantines it);
* actions that change nothing (:data:`NO_OP`) are left out;
* a run of one action, or of one pair of actions, repeated becomes one entry with ``(xN)``
  (``go to drawer, open drawer (x4)``).

The line is data for the prompt only; no rule reads it.
"""
from __future__ import annotations

import re
from typing import Sequence

from pipeline.core.records import Trajectory

MAX_CHARS = 360   # one outline in the prompt; a longer one is cut at a step boundary with " ..."
#: Envs whose task is shown before the steps. A WebShop instruction is one shopper's wish: with it
#: in the prompt, the 1.5B teacher wrote it into general skills as their example ("For example,
#: if you want a styling cream that is cruelty free and for short hair, ...").
TASK_SHOWN = frozenset({"alfworld", "textworld"})
_TASK_CHARS = 160  # the task's words before the steps (a WebShop instruction can run long)
_NUMBER = re.compile(r"\s+\d+\b")
_BRACKET = re.compile(r"^\s*([a-z_ ]+?)\s*\[(.*)\]\s*$", re.I | re.S)
_PRODUCT_ID = re.compile(r"^b0[0-9a-z]{8}$", re.I)
# WebShop page controls kept as they are (the rest of click[...] are products or options)
_WEBSHOP_CONTROLS = frozenset({"buy now", "next >", "< prev", "back to search", "description", "features",
                               "reviews", "search", "attributes"})
#: Actions left out of an outline: they change nothing in the world (a TextWorld room shows its
#: whole description on entry; an inventory lists only what is carried). The coin memories'
#: patterns were full of them ("move west -> inventory -> look around -> inventory -> take coin")
#: and the skills learned from those told the agent to look around to find the coin.
NO_OP = {"textworld": frozenset({"look around", "inventory"}), "alfworld": frozenset({"look", "inventory"})}
_COMPASS = re.compile(r"\b(?:north|south|east|west|northeast|northwest|southeast|southwest|up|down)\b", re.I)


def step_phrase(env: str, action: str) -> str:
    """One recorded action in words that hold across episodes of ``env`` (module docstring).

    ``action`` is the command as recorded (``"heat mug 1 with microwave 1"``,
    ``"click[B0972Q1T8T]"``, ``"move east"``); returns the phrase, lower case, or "" for a blank
    action or one of :data:`NO_OP`."""
    a = " ".join((action or "").split())
    if not a:
        return ""
    m = _BRACKET.match(a)
    if m:
        verb, arg = m.group(1).strip().lower(), m.group(2).strip()
        if verb == "click":
            if _PRODUCT_ID.match(arg):
                return "click a product"
            return f"click[{arg}]" if arg.lower() in _WEBSHOP_CONTROLS else "click an option"
        return verb  # search[...], answer[...]: the argument belongs to the episode
    a = _NUMBER.sub("", a.lower()).replace("in/on", "in")
    if a in NO_OP.get(env, ()):
        return ""
    if env != "textworld" or not _COMPASS.search(a):
        return a
    if a.startswith("open"):
        return "open a door"
    if a.startswith(("move", "go")):
        return "move to another room"
    return _COMPASS.sub("", a).strip()


def compress(phrases: Sequence[str]) -> list[str]:
    """``phrases`` with each run of one phrase, or of one pair of phrases, repeated two or more
    times written once with ``(xN)``; a pair joins with ", ". Single runs win over pairs
    (``a a a`` -> ``a (x3)``)."""
    out: list[str] = []
    i, n = 0, len(phrases)
    while i < n:
        for period in (1, 2):
            unit = list(phrases[i:i + period])
            if len(unit) < period or (period == 2 and unit[0] == unit[1]):
                continue
            count = 1
            while list(phrases[i + count * period:i + (count + 1) * period]) == unit:
                count += 1
            if count >= 2:
                out.append(f"{', '.join(unit)} (x{count})")
                i += count * period
                break
        else:
            out.append(phrases[i])
            i += 1
    return out


def outline(traj: Trajectory, max_chars: int = MAX_CHARS) -> str:
    """``"<task>: <step> -> <step> -> ..."`` (the task only for :data:`TASK_SHOWN` envs) of one trajectory (its recorded actions through
    :func:`step_phrase` and :func:`compress`), at most ``max_chars`` characters: later steps are
    dropped whole and " ..." marks the cut."""
    steps = compress([p for p in (step_phrase(traj.env, s.action or "") for s in traj.steps) if p])
    task = " ".join(traj.task.split()).rstrip(".")
    if traj.env not in TASK_SHOWN:
        head = ""
    else:
        head = f"{task if len(task) <= _TASK_CHARS else task[:_TASK_CHARS].rsplit(' ', 1)[0] + ' ...'}: "
    line = head + " -> ".join(steps)
    while len(line) > max_chars and steps:
        steps = steps[:-1]
        line = head + " -> ".join(steps) + " ..."
    return line

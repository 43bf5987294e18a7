"""Corruptions of valid trajectories for ``bench/verify.py``, each with the step it breaks and
the rules that may truthfully fire there.

A :class:`Variant` is a changed copy of a clean trajectory: ``kind`` (the corruption), ``step``
(the first step the change makes impossible or wrong, as a ``Step.index`` of the copy),
``expected`` (the rule a correct checker names there) and ``also`` (other rules that are also
true at that step, e.g. an object referred to before it was seen after two steps are swapped).
A corruption that does not apply to a trajectory (no ``take`` to drop) returns ``None``.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from pipeline.core.records import Step, Trajectory
from pipeline.verify import alfworld_text as tx


@dataclass
class Variant:
    """A corrupted copy of a clean trajectory (module docstring)."""
    kind: str
    traj: Trajectory
    step: int
    expected: str
    also: tuple[str, ...] = ()


def renumber(traj: Trajectory, steps: list[Step]) -> Trajectory:
    """``traj`` with ``steps``, re-indexed 0..n-1."""
    return dataclasses.replace(traj, steps=[dataclasses.replace(s, index=i) for i, s in enumerate(steps)])


def _cmd(step: Step):
    return tx.parse_command(step.action or "") if step.action else None


def drop_take(t: Trajectory) -> Variant | None:
    """ALFWorld: the first ``take X from R`` removed with its observation; the next use of X
    (put/heat/cool/clean) then has nothing in hand. Only when no observation between the two
    lists R again (that listing would be the first contradiction instead)."""
    for i, s in enumerate(t.steps):
        c = _cmd(s)
        if c and c.verb == "take":
            obj, rec = c.args
            for j in range(i + 1, len(t.steps)):
                u = _cmd(t.steps[j])
                if any(r == rec for r, _ in tx.listings(t.steps[j - 1].observation or "")) and j - 1 > i:
                    return None
                if u and u.verb in ("put", "heat", "cool", "clean") and u.args[0] == obj:
                    # without the take the goal cannot be reached either; that finding sits on the
                    # last step, which may be this one
                    return Variant("drop_take", renumber(t, t.steps[:i] + t.steps[i + 1:]), j - 1, "not_held",
                                   ("goal_not_reached",))
            return None
    return None


def rename_receptacle(t: Trajectory) -> Variant | None:
    """ALFWorld: the first ``go to R`` with R written with a space inside its word
    (``sinkbasin 1`` -> ``sink basin 1``), as the ETO records do; observations kept."""
    for i, s in enumerate(t.steps):
        c = _cmd(s)
        if c and c.verb == "goto" and len(tx.name_type(c.args[0])) >= 6:
            word, num = c.args[0].rsplit(" ", 1)
            wrong = f"{word[:len(word) // 2]} {word[len(word) // 2:]} {num}"
            steps = list(t.steps)
            steps[i] = dataclasses.replace(s, action=f"go to {wrong}")
            return Variant("rename_receptacle", dataclasses.replace(t, steps=steps), i, "unknown_receptacle")
    return None


def swap_steps(t: Trajectory) -> Variant | None:
    """ALFWorld: ``go to R`` and the ``take X from R`` right after it swapped (actions with their
    observations): the take now comes from wherever the agent was before."""
    for i in range(1, len(t.steps) - 1):
        a, b = _cmd(t.steps[i]), _cmd(t.steps[i + 1])
        if a and b and a.verb == "goto" and b.verb == "take" and b.args[1] == a.args[0]:
            steps = list(t.steps)
            steps[i], steps[i + 1] = steps[i + 1], steps[i]
            return Variant("swap_steps", renumber(t, steps), i, "not_at_receptacle", ("unknown_object",))
    return None


def second_take(t: Trajectory) -> Variant | None:
    """ALFWorld: right after the first ``take X from R``, a ``take Y from R`` of another object
    the last listing of R showed, answered as the game answers a take."""
    listed: dict[str, list[str]] = {}
    for i, s in enumerate(t.steps):
        for rec, objs in tx.listings(s.observation or ""):
            listed[rec] = objs
        c = _cmd(s)
        if c and c.verb == "take":
            others = [o for o in listed.get(c.args[1], []) if o != c.args[0] and tx.GAME_NAME.fullmatch(o)]
            if not others:
                return None
            extra = Step(i + 1, f"take {others[0]} from {c.args[1]}",
                         f"You pick up the {others[0]} from the {c.args[1]}.")
            return Variant("second_take", renumber(t, t.steps[:i + 1] + [extra] + t.steps[i + 1:]), i + 1,
                           "holds_two")
    return None


def drop_last(t: Trajectory) -> Variant | None:
    """Any env: the last action removed (the put, the purchase): the goal is not reached."""
    if len(t.steps) < 3:
        return None
    return Variant("drop_last", renumber(t, t.steps[:-1]), len(t.steps) - 2, "goal_not_reached")


_CLICK = re.compile(r"click\[(.+)\]", re.S)


def click_not_shown(t: Trajectory) -> Variant | None:
    """WebShop: the first option click (``You have clicked ...``) replaced by an option the page
    does not show; else the first product click by a product id the page does not list."""
    for i, s in enumerate(t.steps):
        m = _CLICK.fullmatch((s.action or "").strip())
        if m and (s.observation or "").startswith("You have clicked"):
            steps = list(t.steps)
            steps[i] = dataclasses.replace(s, action="click[extra large (pack of 12)]",
                                           observation="You have clicked extra large (pack of 12).")
            return Variant("click_not_shown", dataclasses.replace(t, steps=steps), i, "click_not_shown")
    for i, s in enumerate(t.steps):
        m = _CLICK.fullmatch((s.action or "").strip())
        if m and re.fullmatch(r"B[0-9A-Z]{9}", m[1]):
            steps = list(t.steps)
            steps[i] = dataclasses.replace(s, action="click[B000000000]")
            return Variant("click_not_shown", dataclasses.replace(t, steps=steps), i, "click_not_shown")
    return None


def swap_search_and_click(t: Trajectory) -> Variant | None:
    """WebShop: the search and the click after it swapped: the click is made on the start page."""
    for i in range(1, len(t.steps) - 1):
        if (t.steps[i].action or "").startswith("search[") and (t.steps[i + 1].action or "").startswith("click["):
            steps = list(t.steps)
            steps[i], steps[i + 1] = steps[i + 1], steps[i]
            return Variant("swap_steps", renumber(t, steps), i, "click_not_shown")
    return None


def _insert(t: Trajectory, at: int, action: str, observation: str) -> Trajectory:
    """``t`` with a step inserted before position ``at``."""
    return renumber(t, t.steps[:at] + [Step(at, action, observation)] + t.steps[at:])


def refused_step(t: Trajectory) -> Variant | None:
    """ALFWorld: a command the game refused inserted after the first step, recorded as refused."""
    return Variant("refused_step", _insert(t, 2, "open drawer 99", "Nothing happens."), 2, "env_rejected")


def out_of_grammar(t: Trajectory) -> Variant | None:
    """ALFWorld: a command outside the templates inserted after the first step, answered as if run."""
    return Variant("out_of_grammar", _insert(t, 2, "look around the room carefully", "You look around."), 2,
                   "not_in_grammar")


def hide_object(t: Trajectory) -> Variant | None:
    """ALFWorld: an object that stayed on R removed from a later listing of R (the object
    vanishes unseen), when R is listed twice with the same objects in between."""
    seen: dict[str, tuple[int, list[str]]] = {}
    for i, s in enumerate(t.steps):
        for rec, objs in tx.listings(s.observation or ""):
            if rec in seen and objs and seen[rec][1] == objs:
                gone = objs[-1]
                steps = list(t.steps)
                steps[i] = dataclasses.replace(s, observation=(s.observation or "").replace(f", and a {gone}", "")
                                               .replace(f" a {gone}", " nothing"))
                if steps[i].observation != s.observation:
                    return Variant("hide_object", dataclasses.replace(t, steps=steps), i, "observation_contradicts")
            seen[rec] = (i, objs)
    return None


def wrong_appliance(t: Trajectory) -> Variant | None:
    """ALFWorld: ``heat X with microwave N`` made ``heat X with sinkbasin N`` (cool/clean alike,
    with another appliance): the wrong appliance, and one the agent is not at."""
    swap = {"heat": "fridge 1", "cool": "microwave 1", "clean": "microwave 1"}
    for i, s in enumerate(t.steps):
        c = _cmd(s)
        if c and c.verb in swap:
            steps = list(t.steps)
            steps[i] = dataclasses.replace(s, action=f"{c.verb} {c.args[0]} with {swap[c.verb]}")
            return Variant("wrong_appliance", dataclasses.replace(t, steps=steps), i, "wrong_appliance",
                           ("not_at_receptacle", "unknown_receptacle"))
    return None


def refused_click(t: Trajectory) -> Variant | None:
    """WebShop: a click on something not shown, answered "Invalid action!", inserted after the search."""
    return Variant("refused_click", _insert(t, 2, "click[Add to Cart]", "Invalid action!"), 2, "env_rejected",
                   ("click_not_shown",))


def search_without_box(t: Trajectory) -> Variant | None:
    """WebShop: a search on the first item page (no search box there), answered with a results page."""
    for i, s in enumerate(t.steps):
        if (s.action or "").startswith("click[") and "[Buy Now]" in (s.observation or ""):
            results = next((x.observation for x in t.steps if (x.action or "").startswith("search[")), "")
            return Variant("search_without_box", _insert(t, i + 1, "search[another query]", results), i + 1,
                           "search_no_box")
    return None


def webshop_out_of_grammar(t: Trajectory) -> Variant | None:
    """WebShop: an action outside search/click, answered "Invalid action!", after the search."""
    return Variant("out_of_grammar", _insert(t, 2, "buy[now]", "Invalid action!"), 2, "env_rejected",
                   ("not_in_grammar",))


def drop_answer(t: Trajectory) -> Variant | None:
    """Search/QA: the answer step removed."""
    if not (t.steps[-1].action or "").startswith("<answer>"):
        return None
    return Variant("drop_answer", renumber(t, t.steps[:-1]), len(t.steps) - 2, "no_answer")


def bad_syntax(t: Trajectory) -> Variant | None:
    """Search/QA: the first search written outside the action syntax."""
    for i, s in enumerate(t.steps):
        if (s.action or "").startswith("<search>"):
            steps = list(t.steps)
            steps[i] = dataclasses.replace(s, action="browse[" + s.action[8:-9] + "]")
            return Variant("bad_syntax", dataclasses.replace(t, steps=steps), i, "not_in_grammar")
    return None


def wrong_answer(t: Trajectory) -> Variant | None:
    """Search/QA with a gold answer: the answer replaced by one that shares no word with the gold."""
    import json
    if not json.loads(t.metadata or "{}").get("gold_answer") or not (t.steps[-1].action or "").startswith("<answer>"):
        return None
    steps = t.steps[:-1] + [dataclasses.replace(t.steps[-1], action="<answer>zanzibar quartz</answer>")]
    return Variant("wrong_answer", dataclasses.replace(t, steps=steps), len(t.steps) - 1, "wrong_answer")


ALFWORLD = (drop_take, rename_receptacle, swap_steps, second_take, drop_last, refused_step, out_of_grammar,
            hide_object, wrong_appliance)
WEBSHOP = (click_not_shown, swap_search_and_click, drop_last, refused_click, search_without_box,
           webshop_out_of_grammar)
SEARCH = (drop_answer, bad_syntax, wrong_answer)

"""The candidate actions of a step: what the expert action competes with in the usefulness score.

The score (:mod:`pipeline.usefulness.score`) asks how much of the scorer's belief, spread over the
actions the agent could have taken, goes to the one the expert took. Where those actions come
from, best source first:

1. the step's recorded admissible actions (SkillRL rollouts: ALFWorld's ``admissible_commands``,
   WebShop's available actions; TextWorld Express' valid actions), ``help`` left out as the agent
   never sees it;
2. WebShop: the clickables of the observation (``[Back to Search]``, ``[B09QQLDJ93]``, ``[Buy Now]``,
   option buttons) as ``click[...]``, plus the trajectory's own searches;
3. ALFWorld: the commands the game would accept in the state that
   :func:`pipeline.verify.alfworld.replay` rebuilds from the record (go to every receptacle of the
   room, take what lies where the agent stands, put, heat/cool/clean with the appliance there,
   open/close, use a lamp, examine, look, inventory) — ALFWorld's own command templates
   (``alfred.twl2``) applied to the known state;
4. otherwise the trajectory's own distinct actions.

The expert action is always among the candidates, once. Long lists are cut to ``max_candidates``
by a seeded draw that keeps the expert (a deterministic function of the step's text), so the
share is comparable across steps of different list lengths.
"""
from __future__ import annotations

import random
import re
from typing import Any

from pipeline.core.lineage import content_hash

#: Cap on the candidates scored per step (expert included): the cost of a step grows with it.
MAX_CANDIDATES = 16
_CLICKABLE = re.compile(r"\[([^\[\]\n]{1,80})\]")
_NOT_CLICKABLE = {"search", "sep"}


def _norm(text: str) -> str:
    return " ".join((text or "").lower().split())


def webshop_clickables(observation: str) -> list[str]:
    """``click[...]`` of every bracketed button of a WebShop observation, in page order, once each
    (``[SEP]`` separators and the ``[Search]`` box of the start page are not buttons)."""
    seen, out = set(), []
    for m in _CLICKABLE.finditer(observation or ""):
        label = m.group(1).strip()
        if not label or label.lower() in _NOT_CLICKABLE or label.lower() in seen:
            continue
        seen.add(label.lower())
        out.append(f"click[{label}]")
    return out


def alfworld_commands(room: Any) -> list[str]:
    """The commands ALFWorld would accept in ``room`` (a :class:`pipeline.verify.alfworld.Room`):
    the grammar's templates filled from what the record has shown (module docstring, source 3)."""
    from pipeline.verify import alfworld_text as tx

    here, held = room.location, room.held
    out = [f"go to {r}" for r in sorted(room.receptacles) if r != here]
    if here:
        if here in room.closed:
            out.append(f"close {here}" if not room.closed[here] else f"open {here}")
        if held is None:
            out += [f"take {o} from {here}" for o in sorted(room.contents.get(here, ()))]
        else:
            out.append(f"put {held} in/on {here}")
            kind = tx.name_type(here)
            out += [f"{verb} {held} with {here}" for verb, kinds in tx.APPLIANCES.items() if kind in kinds]
        if tx.name_type(here) in tx.LAMPS:
            out.append(f"use {here}")
        out.append(f"examine {here}")
    return out + ["look", "inventory"]


def step_candidates(traj: Any, k: int, expert: str, admissible: list[str] | None = None,
                    rooms: list[Any] | None = None, max_candidates: int = MAX_CANDIDATES) -> list[str]:
    """Candidate actions for action ``k`` of ``traj`` (a :class:`~pipeline.core.records.Trajectory`;
    ``steps[k-1]`` is the state shown), ``expert`` first, then the others in a seeded order, at
    most ``max_candidates`` (>= 2) in all.

    Args:
        admissible: the list shown to the agent for this step (a pair's own list, e.g. the synthetic
            ``done`` sample), else ``steps[k-1].admissible_actions``.
        rooms: :func:`pipeline.verify.alfworld.replay` of ``traj`` when the caller has it (ALFWorld).

    Returns a list with the expert once; a single-item list when nothing else is known.
    """
    shown = admissible if admissible is not None else list(traj.steps[k - 1].admissible_actions or [])
    pool = [a for a in shown if a and a != "help"]
    if not pool and traj.env == "webshop":
        searches = [s.action for s in traj.steps[1:] if (s.action or "").lower().startswith("search[")]
        pool = webshop_clickables(traj.steps[k - 1].observation or "") + searches
    if not pool and traj.env == "alfworld" and rooms:
        pool = alfworld_commands(rooms[min(k - 1, len(rooms) - 1)])
    if not pool:
        pool = [s.action for s in traj.steps[1:] if s.action]
    return _draw(expert, pool, max_candidates, traj.trajectory_id, k)


def _draw(expert: str, pool: list[str], cap: int, key: str, k: int) -> list[str]:
    """``expert`` plus up to ``cap - 1`` distinct others of ``pool`` (case- and space-insensitive),
    drawn with a generator seeded by (``key``, ``k``) when there are more."""
    seen, others = {_norm(expert)}, []
    for a in pool:
        n = _norm(a)
        if n and n not in seen:
            seen.add(n)
            others.append(a)
    if len(others) > cap - 1:
        rng = random.Random(int(content_hash("candidates", key, k), 16))
        others = rng.sample(others, cap - 1)
    return [expert, *others]


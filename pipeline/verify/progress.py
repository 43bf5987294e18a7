"""Where an ALFWorld agent stands before each action, as one line of a distill prompt.

A small teacher explains a step better when it is told what the record already shows: where the
agent is, what it holds, whether an object of the goal's type has been seen, and what is left of
the task. Without it, the 1.5B teacher explained the pen's search of four drawers by "Desklamps
are usually in drawers" (it had lost track of the pen it was still looking for) and the put of a
held spraybottle by "The spraybottle is in cabinet 2". Everything in the line comes from the
observations up to that step (:func:`pipeline.verify.alfworld.replay`), so a think built on it is
reasoning the agent could have had.

The plan of each task type follows ALFWorld's goal conditions (``pipeline.verify.alfworld``):
find an object of the goal type, take it, heat/cool/clean it where the task says so, then put it
in a receptacle of the goal type (twice for pick_two), or hold it under a lamp that is on.
"""
from __future__ import annotations

from pipeline.core.records import Trajectory
from pipeline.verify import alfworld as alf
from pipeline.verify import alfworld_text as tx
from pipeline.verify import textworld_progress

_APPLIANCE = {"heat": "microwave", "cool": "fridge", "clean": "sinkbasin"}  # the task type's appliance


def progress_lines(traj: Trajectory) -> list[str]:
    """``lines[i]``: the state before ``steps[i + 1].action`` of an ALFWorld ``traj`` as prompt
    text ("at drawer 3, holding nothing; no pen seen yet; no desklamp seen yet. Still to do: find
    a pen, take it, find a desklamp and use it while holding it."), one per step. ``[]`` for other environments, for a record
    without a room description and for a goal sentence that fits no template. TextWorld Express
    trajectories get their map instead (:func:`pipeline.verify.textworld_progress.progress_lines`)."""
    if traj.env == "textworld":
        return textworld_progress.progress_lines(traj)
    if traj.env != "alfworld":
        return []
    goal = alf.goal(traj)
    rooms = alf.replay(traj) if goal else []
    return [describe(room, *goal) for room in rooms] if goal else []


def describe(room: alf.Room, kind: str, obj: str, rec: str) -> str:
    """One line for ``room`` and the goal ``(kind, object type, receptacle or lamp type)``."""
    where = f"at {room.location}" if room.location else "in the middle of the room"
    held = room.held
    if held:
        props = sorted(room.props.get(held, set()))
        holding = f"holding {held}" + (f" ({', '.join(props)})" if props else "")
    else:
        holding = "holding nothing"
    seen = _seen(room, obj, rec, kind)
    return f"{where}, {holding}" + (f"; {seen}" if seen else "") + f". Still to do: {_todo(room, kind, obj, rec)}."


def _is(name: str, kind: str) -> bool:
    """Whether game name ``name`` is of type ``kind`` ("credit card 1" is a creditcard: traces mis-space names)."""
    return tx.squash(tx.name_type(name)) == tx.squash(kind)


def _of_type(names, kind: str) -> list[str]:
    return sorted(n for n in names if _is(n, kind))


def _done_puts(room: alf.Room, obj: str, rec: str, prop: str | None) -> int:
    """Objects of type ``obj`` the agent put in a ``rec`` (with property ``prop`` when the task asks one)."""
    return len({o for o, r in room.placed if _is(o, obj) and _is(r, rec)
                and (prop is None or prop in room.props.get(o, set()))})


def _free(room: alf.Room, obj: str) -> list[str]:
    """Objects of type ``obj`` seen so far that the agent neither holds nor has put in place."""
    placed = {o for o, _ in room.placed}
    return [o for o in _of_type(room.seen, obj) if o != room.held and o not in placed]


def _seen(room: alf.Room, obj: str, rec: str, kind: str) -> str:
    """What the record shows of the goal's object type (and of the lamp, for the look task)."""
    free = _free(room, obj)
    if room.held and _is(room.held, obj):
        text = ""  # the holding part says it
    elif free:
        at = room.where(free[0])
        text = f"{free[0]} was seen" + (f" at {at}" if at else "")
    elif any(_is(o, obj) for o, _ in room.placed):
        text = f"no other {obj} seen yet"
    else:
        text = f"no {obj} seen yet"
    if kind == "look_at_obj_in_light":
        lamps = _of_type(room.seen, rec)
        at = room.where(lamps[0]) if lamps else None
        lamp = (f"{lamps[0]} was seen" + (f" at {at}" if at else "")) if lamps else f"no {rec} seen yet"
        text = f"{text}; {lamp}" if text else lamp
    return text


def _a(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


def _todo(room: alf.Room, kind: str, obj: str, rec: str) -> str:
    """The steps of the goal not yet done, in order (module docstring)."""
    transform = kind if kind in _APPLIANCE else None
    puts = _done_puts(room, obj, rec, tx.PROPERTY.get(kind))
    if kind == "look_at_obj_in_light" and any(_is(o, obj) for o in room.looked_at):
        return "nothing: the goal is met"
    if kind != "look_at_obj_in_light" and puts >= (2 if kind == "pick_two_obj_and_place" else 1):
        return "nothing: the goal is met"
    holding = room.held is not None and _is(room.held, obj)
    seen = bool(_free(room, obj))
    plan = [f"find {'a second ' + obj if puts else _a(obj)}", "take it"]
    if transform:
        plan.append(f"{transform} it with {_a(_APPLIANCE[transform])}")
    if kind == "look_at_obj_in_light":
        lamps = _of_type(room.seen, rec)
        plan.append(f"use {lamps[0]} while holding it" if lamps else f"find {_a(rec)} and use it while holding it")
    else:
        plan.append(f"put it in/on {_a(rec)}")
    if holding:
        done = 3 if transform and tx.PROPERTY[transform] in room.props.get(room.held, set()) else 2
    else:
        done = 1 if seen else 0
    left = plan[done:]
    if kind == "pick_two_obj_and_place" and puts == 0:
        left.append(f"then the same for a second {obj}")
    return ", ".join(left)

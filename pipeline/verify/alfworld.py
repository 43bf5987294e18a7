"""ALFWorld rule checker: replays a recorded trajectory on a model of the game's state.

Sources of the rules (read, not copied):

* the command grammar and feedback texts: ALFWorld's TextWorld grammar ``alfred.twl2``
  (:mod:`pipeline.verify.alfworld_text`);
* preconditions and effects: ALFWorld's PDDL domain ``alfworld/data/alfred.pddl`` — ``PickupObject``
  needs the agent at the receptacle, the object in it, the receptacle open if it is openable and
  the agent's hands empty (``not (holdsAny ?a)``: one object at a time); ``PutObject`` needs the
  object held; ``HeatObject``/``CoolObject``/``CleanObject`` need the object held, the agent at
  the appliance and its type (MicrowaveType, FridgeType, SinkBasinType) and set ``isHot`` /
  ``isCool`` / ``isClean``; ``ToggleObject`` needs the agent where the lamp is;
* command handling: TextWorld runs a command only when it equals one of the admissible
  commands of the current state and otherwise answers "Nothing happens." (ALFWorld's
  ``AlfredTWEnv`` passes the text through unchanged), so a name the room does not have
  (``dining table 1`` where the room has ``diningtable 1``) is rejected, however close;
* goals: the task type (the ``game_file`` folder, else the goal sentence) as in ALFWorld's
  ``goal_conditions``: pick_and_place and the heat/cool/clean variants need an object of the
  goal type in a receptacle of the goal type (hot, cool or clean as asked), pick_two two of them,
  look_at_obj_in_light the object held under a lamp that is on.

The state is what the record itself shows: the room's receptacles, every object list of an
earlier observation, where the agent is, what is open or closed, the one object held and the
objects heated, cooled or cleaned. A command that the state forbids is a finding of kind
``impossible`` unless its observation is "Nothing happens." (then ``env_rejected``, kind
``rejected``: the game refused it and said so). An observation whose object list contradicts
the state (an object that was there and was not taken is gone; the held object lies on a table)
is ``observation_contradicts``. The checker applies to ALFWorld trajectories whose first
observation is a room description; others (abstracted memories, SkillRL rollouts, which
:mod:`pipeline.verify.admissible` checks) are left to other checkers or counted unchecked.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.records import Trajectory
from pipeline.rules import is_reasoning
from pipeline.envs import alfworld as alf_env
from pipeline.verify import alfworld_text as tx
from pipeline.verify.base import Checker, Verdict

RULES = {
    "not_in_grammar": "the command matches none of ALFWorld's command templates",
    "unknown_receptacle": "a receptacle the room description does not list (the game needs the exact name)",
    "unknown_object": "an object no earlier observation showed, or a name not of the game's form",
    "not_at_receptacle": "acting on a receptacle (or a lamp) the agent is not at",
    "receptacle_closed": "taking from or putting into a receptacle the record shows closed",
    "object_not_there": "taking an object from a receptacle that, as last seen, does not hold it",
    "holds_two": "taking an object while already holding one (ALFWorld's agent holds one object)",
    "not_held": "putting, heating, cooling, cleaning or slicing with an object the agent does not hold",
    "wrong_appliance": "heating without a microwave, cooling without a fridge, cleaning without a sink basin",
    "env_rejected": "the game answered \"Nothing happens.\": it did not run the command",
    "observation_contradicts": "an observation contradicts the state the record itself built",
    "goal_not_reached": "the goal of the task type is not met at the end of the trajectory",
}


@dataclass
class Room:
    """The game state the record shows so far (module docstring)."""
    receptacles: set[str]
    location: str | None = None
    closed: dict[str, bool] = field(default_factory=dict)
    contents: dict[str, set[str]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    held: str | None = None
    props: dict[str, set[str]] = field(default_factory=dict)   # object -> {"hot", "cool", "clean"}
    placed: list[tuple[str, str]] = field(default_factory=list)  # (object, receptacle) put by the agent
    lamp_on_at: str | None = None
    looked_at: set[str] = field(default_factory=set)          # object types held under a lamp that is on

    def where(self, obj: str) -> str | None:
        """The receptacle whose last seen contents hold ``obj``."""
        return next((r for r, objs in self.contents.items() if obj in objs), None)


class AlfworldChecker(Checker):
    """The ALFWorld rules (module docstring) for a trajectory with a room description."""
    name = "alfworld"
    RULES = RULES

    def applies(self, traj: Trajectory) -> bool:
        """ALFWorld, not a SkillRL rollout dump, and a room description to check names against."""
        return (traj.env == "alfworld" and traj.source_format != "skillrl_txt" and bool(traj.steps)
                and bool(tx.room_receptacles(traj.steps[0].observation or "")))

    def check(self, traj: Trajectory, options: dict[str, Any]) -> Verdict:
        """Replay the record on :class:`Room`; findings per step, then the goal."""
        verdict = Verdict(self.name)
        room = Room(set(tx.room_receptacles(traj.steps[0].observation)))
        for step in traj.steps[1:]:
            if step.action is None or is_reasoning(step):
                continue
            _step(room, step.index, step.action, step.observation or "", verdict)
        wanted = goal(traj)
        if wanted is None:
            verdict.note = "goal not read from the task type or sentence"
            return verdict
        verdict.goal_reached = _reached(room, *wanted)
        if not verdict.goal_reached:
            last = traj.steps[-1].index
            verdict.add(last, "goal_not_reached", "goal", f"task {wanted[0]!r}: {_goal_text(*wanted)} is not "
                        "true after the last step")
        return verdict


def replay(traj: Trajectory) -> list[Room]:
    """The state the record shows after each step of ``traj``: ``rooms[i]`` is the room the
    agent saw at ``steps[i]`` (after its action and observation), so ``rooms[i]`` is what it knew
    before ``steps[i + 1].action``. Same replay as :meth:`AlfworldChecker.check` (findings are
    dropped); ``[]`` when the first observation lists no receptacles (no room to replay)."""
    if not traj.steps or not tx.room_receptacles(traj.steps[0].observation or ""):
        return []
    room = Room(set(tx.room_receptacles(traj.steps[0].observation or "")))
    scratch = Verdict("replay")
    rooms = [copy.deepcopy(room)]
    for step in traj.steps[1:]:
        if step.action is not None and not is_reasoning(step):
            _step(room, step.index, step.action, step.observation or "", scratch)
        rooms.append(copy.deepcopy(room))
    return rooms


def _step(room: Room, index: int, action: str, observation: str, verdict: Verdict) -> None:
    """Check one command against ``room``, apply it when the game would run it, read its observation."""
    cmd = tx.parse_command(action)
    if tx.rejected(observation):
        verdict.add(index, "env_rejected", "rejected", f"the game answered \"Nothing happens.\" to {action!r}")
        return
    if cmd is None:
        verdict.add(index, "not_in_grammar", "impossible", f"{action!r} matches no ALFWorld command template, "
                    "yet the record shows an answer other than \"Nothing happens.\"")
        return
    problems: list[tuple[str, str, str | None]] = []
    cmd = _names(room, cmd, action, problems)
    problems += _preconditions(room, cmd)
    for rule, detail, repair in problems:
        verdict.add(index, rule, "impossible", detail, repair)
    if not any(rule != "unknown_receptacle" or repair is None for rule, _, repair in problems):
        _apply(room, cmd)  # a repairable name alone: follow the record's intent, so later steps are judged alone
    _read_observation(room, index, observation, verdict)


def _names(room: Room, cmd: tx.Command, action: str, problems: list) -> tx.Command:
    """``cmd`` with each mis-spaced receptacle that has exactly one game name replaced by it;
    unknown names appended to ``problems`` as ``(rule, detail, repaired action or None)``."""
    args = list(cmd.args)
    for pos, name in enumerate(args):
        if _is_receptacle_slot(cmd.verb, pos, name, room):
            if name in room.receptacles:
                continue
            matches = [r for r in room.receptacles if tx.squash(r) == tx.squash(name)]
            repair = " ".join(action.split()).replace(name, matches[0]) if len(matches) == 1 and \
                name in " ".join(action.split()) else None
            problems.append(("unknown_receptacle", f"{name!r} is not a receptacle of this room"
                             + (f" (the room has {matches[0]!r}; the game needs the exact name)" if matches else ""),
                             repair))
            if len(matches) == 1:
                args[pos] = matches[0]
        elif not tx.GAME_NAME.fullmatch(name) or name not in room.seen | room.receptacles:
            problems.append(("unknown_object", f"{name!r} " + ("is not a game name (one word and a number)"
                             if not tx.GAME_NAME.fullmatch(name) else "was not shown by any earlier observation"),
                             None))
    return tx.Command(cmd.verb, tuple(args))


def _is_receptacle_slot(verb: str, pos: int, name: str, room: Room) -> bool:
    """Whether argument ``pos`` of ``verb`` names a receptacle (examine: whichever it names)."""
    if verb in ("goto", "open", "close"):
        return True
    if verb in ("take", "put", "heat", "cool", "clean"):
        return pos == 1
    if verb == "examine":
        return name not in room.seen and (name in room.receptacles or
                                          any(tx.squash(r) == tx.squash(name) for r in room.receptacles))
    return False


def _preconditions(room: Room, cmd: tx.Command) -> list[tuple[str, str, None]]:
    """Broken preconditions of ``cmd`` in ``room`` (ALFWorld's PDDL, module docstring)."""
    out: list[tuple[str, str, None]] = []
    v, a = cmd.verb, cmd.args
    # open/close are left out: ReAct's expert ALFWorld transcripts (real game output) open the
    # fridge from the middle of the room, so the game does not require the agent there
    if v in ("take", "put", "heat", "cool", "clean") and room.location != a[-1]:
        out.append(("not_at_receptacle", f"the agent is at {room.location or 'the middle of the room'}, not at {a[-1]!r}", None))
    if v in ("take", "put") and room.closed.get(a[1]):
        out.append(("receptacle_closed", f"{a[1]!r} is closed", None))
    if v == "take":
        if room.held is not None:
            out.append(("holds_two", f"the agent already holds {room.held!r}", None))
        if a[1] in room.contents and a[0] not in room.contents[a[1]]:
            out.append(("object_not_there", f"{a[1]!r} was last seen without {a[0]!r}", None))
    if v in ("put", "heat", "cool", "clean") and room.held != a[0]:
        out.append(("not_held", f"the agent holds {room.held or 'nothing'}, not {a[0]!r}", None))
    if v == "slice" and room.held != a[1]:
        out.append(("not_held", f"the agent holds {room.held or 'nothing'}, not {a[1]!r}", None))
    if v in tx.APPLIANCES and tx.name_type(a[1]) not in tx.APPLIANCES[v]:
        out.append(("wrong_appliance", f"{v} needs a {' or '.join(tx.APPLIANCES[v])}, not {a[1]!r}", None))
    if v == "use" and room.location is not None and room.location in room.contents \
            and a[0] not in room.contents[room.location]:
        out.append(("not_at_receptacle", f"{a[0]!r} is not at {room.location!r}", None))
    return out


def _apply(room: Room, cmd: tx.Command) -> None:
    """The effect of a command the game runs (PDDL effects)."""
    v, a = cmd.verb, cmd.args
    if v == "goto":
        room.location = a[0]
    elif v in ("open", "close"):
        room.closed[a[0]] = v == "close"
    elif v == "take":
        room.held = a[0]
        room.contents.get(a[1], set()).discard(a[0])
    elif v == "put":
        room.held = None
        room.contents.setdefault(a[1], set()).add(a[0])
        room.placed.append((a[0], a[1]))
    elif v in tx.PROPERTY:
        room.props.setdefault(a[0], set()).add(tx.PROPERTY[v])
    elif v == "use" and tx.name_type(a[0]) in tx.LAMPS:
        room.lamp_on_at = room.location
    if room.lamp_on_at is not None and room.lamp_on_at == room.location and room.held:
        room.looked_at.add(tx.name_type(room.held))


def _read_observation(room: Room, index: int, observation: str, verdict: Verdict) -> None:
    """Learn object lists and open/closed states from ``observation``; flag contradictions."""
    for name in tx.closed_named(observation):
        room.closed[_canonical(room, name)] = True
    for rec, objs in tx.listings(observation):
        rec = _canonical(room, rec)
        if rec not in room.receptacles:
            continue
        room.closed[rec] = False  # a receptacle whose contents show is open (or not openable)
        now = set(objs)
        if room.held and room.held in now:
            verdict.add(index, "observation_contradicts", "impossible",
                        f"the observation lists {room.held!r} on {rec!r}, but the agent holds it")
        before = room.contents.get(rec)
        if before is not None and before - now:
            gone = sorted(before - now)
            verdict.add(index, "observation_contradicts", "impossible",
                        f"{', '.join(gone)} lay on {rec!r} and was not taken, but the observation no longer lists it")
        room.contents[rec] = now
        room.seen |= now


def _canonical(room: Room, name: str) -> str:
    """``name`` as the room's receptacle it squashes to (observations may be mis-spaced too)."""
    if name in room.receptacles:
        return name
    return next((r for r in room.receptacles if tx.squash(r) == tx.squash(name)), name)


def goal(traj: Trajectory) -> tuple[str, str, str] | None:
    """``(task type, object type, receptacle or lamp type)`` of an ALFWorld ``traj`` (its
    ``game_file`` folder, else its goal sentence), or ``None`` when the sentence fits no template."""
    names = tx.goal_names(traj.task)
    if names is None:
        return None
    try:
        game_file = json.loads(traj.metadata or "{}").get("game_file")
    except (ValueError, AttributeError):
        game_file = None
    kind = alf_env.category_from_gamefile(game_file) or alf_env.classify(traj.task)
    return kind, names[0], names[1]


def _goal_text(kind: str, obj: str, rec: str) -> str:
    prop = {"heat": "hot ", "cool": "cool ", "clean": "clean "}.get(kind, "")
    if kind == "look_at_obj_in_light":
        return f"a {obj} held under a {rec} that is on"
    return f"{'two' if kind == 'pick_two_obj_and_place' else 'a'} {prop}{obj} in a {rec}"


def _reached(room: Room, kind: str, obj: str, rec: str) -> bool:
    """Whether the goal (module docstring) holds in ``room`` after the last step."""
    if kind == "look_at_obj_in_light":
        return obj in room.looked_at
    prop = {"heat": "hot", "cool": "cool", "clean": "clean"}.get(kind)
    placed = {o for o, r in room.placed
              if tx.name_type(o) == obj and tx.name_type(r) == rec and o in room.contents.get(r, set())
              and (prop is None or prop in room.props.get(o, set()))}
    return len(placed) >= (2 if kind == "pick_two_obj_and_place" else 1)

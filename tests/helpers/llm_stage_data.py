"""Literal inputs and helpers shared by the LLM-stage tests (memory, skills, distill).

The trajectories are short hand-written ALFWorld episodes in the SkillRL rollout wording; the
upstream artifacts are written straight into a tmp :class:`ArtifactStore`, so each stage is
tested on its own with exact inputs.
"""
from __future__ import annotations

import contextlib

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.records import TRAJECTORY_SCHEMA, Step, Trajectory, to_table

ROOM = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, "
        "a countertop 1, a fridge 1, a microwave 1, and a sinkbasin 1.")
ROOM_ACTIONS = ["go to cabinet 1", "go to countertop 1", "go to fridge 1", "go to microwave 1",
                "go to sinkbasin 1", "inventory", "look"]


def cool_apple(outcome: str = "success", tid: str = "traj-cool-1") -> Trajectory:
    """Cool an apple and put it on the countertop: 5 actions; the failure stops after 3."""
    steps = [
        Step(0, None, ROOM, ROOM_ACTIONS),
        Step(1, "go to countertop 1", "On the countertop 1, you see a apple 1, and a knife 1.",
             ["take apple 1 from countertop 1", "take knife 1 from countertop 1", "go to fridge 1"]),
        Step(2, "take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1.",
             ["go to fridge 1", "go to microwave 1", "put apple 1 in/on countertop 1"]),
        Step(3, "go to fridge 1", "The fridge 1 is closed.",
             ["cool apple 1 with fridge 1", "open fridge 1", "go to countertop 1"]),
    ]
    if outcome == "success":
        steps += [
            Step(4, "cool apple 1 with fridge 1", "You cool the apple 1 using the fridge 1.",
                 ["go to countertop 1", "open fridge 1", "inventory"]),
            Step(5, "go to countertop 1", "On the countertop 1, you see a knife 1.",
                 ["put apple 1 in/on countertop 1", "take knife 1 from countertop 1", "inventory", "look"]),
            Step(6, "put apple 1 in/on countertop 1", "You put the apple 1 in/on the countertop 1.",
                 ["take apple 1 from countertop 1", "go to fridge 1", "inventory", "look"], reward=10.0, done=True),
        ]
    else:
        steps[-1] = Step(3, "go to microwave 1", "The microwave 1 is closed.",
                         ["heat apple 1 with microwave 1", "open microwave 1"], done=True)
    return Trajectory(tid, "alfworld", "pick_cool_then_place_in_recep-Apple-None-CounterTop-10/trial_1",
                      "cool some apple and put it in countertop.", "cool", outcome,
                      10.0 if outcome == "success" else 0.0, steps, "rollouts/env001/test1.txt", "skillrl_txt", 0,
                      source_line=1)


def heat_mug(tid: str = "traj-heat-1") -> Trajectory:
    """Heat a mug and put it in the cabinet: 3 actions, a success."""
    steps = [
        Step(0, None, ROOM, ROOM_ACTIONS),
        Step(1, "go to cabinet 1", "The cabinet 1 is open. In it, you see a mug 1.",
             ["take mug 1 from cabinet 1", "close cabinet 1", "go to microwave 1"]),
        Step(2, "take mug 1 from cabinet 1", "You pick up the mug 1 from the cabinet 1.",
             ["go to microwave 1", "put mug 1 in/on cabinet 1"]),
        Step(3, "heat mug 1 with microwave 1", "You heat the mug 1 using the microwave 1.",
             ["put mug 1 in/on cabinet 1", "go to cabinet 1", "look"], reward=10.0, done=True,
             thought="I need to heat the mug first."),  # a ReAct-style thought recorded before action 3
    ]
    return Trajectory(tid, "alfworld", "pick_heat_then_place_in_recep-Mug-None-Cabinet-5/trial_2",
                      "heat some mug and put it in cabinet.", "heat", "success", 10.0, steps,
                      "rollouts/env002/test1.txt", "skillrl_txt", 0, source_line=1)


def write_upstream(store: ArtifactStore, stage: str, rows: list[dict], schema, fingerprint: str = "") -> None:
    """Write ``rows`` as the complete artifact of ``stage`` (as if that stage had run)."""
    store.write(stage, to_table(rows, schema), [], {"stage": stage, "fingerprint": fingerprint or f"fp-{stage}",
                                                    "counts": {"out": len(rows)}})


def write_trajectories(store: ArtifactStore, trajs: list[Trajectory], val_fraction: float = 0.0) -> None:
    """``trajs`` as the ``verify`` artifact, and the ``split`` artifact the split stage
    would write for them with ``export.val_fraction = val_fraction`` (default 0: all train)."""
    from pipeline.core.records import SPLIT_SCHEMA
    from pipeline.core.split import split_rows
    write_upstream(store, "verify", [t.to_row() for t in trajs], TRAJECTORY_SCHEMA)
    succeeded = {t.env_instance for t in trajs if t.outcome == "success"}
    write_upstream(store, "split", split_rows([t.env_instance for t in trajs], succeeded, val_fraction, 0),
                   SPLIT_SCHEMA)


@contextlib.contextmanager
def embedded_llm(log_dir: str, **overrides):
    """An :class:`LLMClient` on the real embedded SmolLM2 server (started and stopped here)."""
    from pipeline.core.config import LLMConfig
    from pipeline.llm.client import LLMClient
    from pipeline.llm.server import EmbeddedServer

    with EmbeddedServer(log_dir=log_dir) as url:
        yield LLMClient(LLMConfig(**overrides), base_url=url)

"""TextWorld Express: the ground truth is the engine itself; a trajectory is replayed in it.

The game is rebuilt from the trajectory's metadata ``task_key`` (``{game, seed, fold, params}``,
written by ``skillpipe rl rollout``) or from an ``env_instance`` of the form
``<game>-<fold>-<seed>`` (:class:`pipeline.envs.sim.textworld.EnvTask`; default parameters). Each
recorded action is sent to the engine (``textworld_express``, :mod:`pipeline.envs.sim.textworld`):

* an action outside the engine's ``validActions`` of that state is ``env_rejected``: kind
  ``rejected`` when the recorded observation is the engine's own answer (the record shows the
  refusal), ``impossible`` when the record shows something else;
* a recorded observation that differs from the engine's (whitespace collapsed) is
  ``observation_mismatch`` (kind ``impossible``), and the replay stops there: the record has
  left the game;
* the engine's ``tasksuccess`` after the last action is the outcome (``goal_not_reached``).

When the engine cannot run (the package or Java is missing) or the game cannot be rebuilt, the
verdict is ``checked = False`` with the reason, and the stage counts it as unchecked.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from pipeline.core.records import Trajectory
from pipeline.verify.base import Checker, Verdict

RULES = {
    "env_rejected": "the engine does not list the action among the valid actions of that state",
    "observation_mismatch": "the recorded observation differs from the engine's answer to the same action",
    "goal_not_reached": "the engine's task is not solved after the last action",
}

_INSTANCE = re.compile(r"(?P<game>[a-z]+)-(?P<fold>train|dev|test)-(?P<seed>\d+)")


def _norm(text: str) -> str:
    return " ".join((text or "").split())


def task_of(traj: Trajectory):
    """The :class:`~pipeline.envs.sim.textworld.EnvTask` of ``traj``, or ``None``."""
    from pipeline.envs.sim.textworld import GAME_CATEGORIES, EnvTask
    try:
        key = json.loads(traj.metadata or "{}").get("task_key")
    except (ValueError, AttributeError):
        key = None
    if isinstance(key, dict) and key.get("game") in GAME_CATEGORIES:
        return EnvTask(key["game"], int(key.get("seed", 0)), str(key.get("fold", "train")), str(key.get("params", "")))
    m = _INSTANCE.fullmatch(traj.env_instance or "")
    return EnvTask(m["game"], int(m["seed"]), m["fold"]) if m and m["game"] in GAME_CATEGORIES else None


def gold_trajectory(env, task) -> Trajectory:
    """The engine's own gold plan for ``task`` played in ``env`` (a
    :class:`~pipeline.envs.sim.textworld.TextWorldExpressEnv`) and recorded as a trajectory with
    metadata ``task_key``, as ``skillpipe rl rollout --policy gold`` records it: an expert record
    that is true by construction (the benchmark's and the tests' clean base)."""
    from pipeline.core.records import Step
    r = env.reset(task)
    steps, won = [Step(0, None, r.observation, list(r.admissible_actions))], False
    for action in env.gold_actions()[1:]:  # the first gold action is the reset's 'look around'
        t = env.step(action)
        won = t.won
        steps.append(Step(len(steps), action, t.observation, list(t.admissible_actions), 10.0 if won else 0.0, t.done))
        if t.done:
            break
    return Trajectory(f"gold-{task.instance}", "textworld", task.instance, r.task, task.category,
                      "success" if won else "failure", 10.0 if won else 0.0, steps, f"rollout://textworld/{task.instance}",
                      "rollout", 0, metadata=json.dumps({"task_key": dataclasses.asdict(task)}))


class TextworldChecker(Checker):
    """Replay in TextWorld Express (module docstring); one engine per stage run."""
    name = "textworld"
    RULES = RULES

    def __init__(self) -> None:
        self._engine: Any = None
        self._error = ""

    def applies(self, traj: Trajectory) -> bool:
        """TextWorld trajectories."""
        return traj.env == "textworld"

    def _env(self):
        if self._engine is None and not self._error:
            from pipeline.envs.sim.textworld import TextWorldExpressEnv
            try:
                self._engine = TextWorldExpressEnv()
            except Exception as e:  # no package, no Java: counted unchecked, the run goes on
                self._error = f"{type(e).__name__}: {e}"
        return self._engine

    def check(self, traj: Trajectory, options: dict[str, Any]) -> Verdict:
        """Replay ``traj`` action by action in the engine."""
        verdict = Verdict(self.name)
        task = task_of(traj)
        env = self._env() if task is not None else None
        if env is None:
            verdict.checked = False
            verdict.note = "no game to rebuild (metadata task_key or env_instance <game>-<fold>-<seed>)" \
                if task is None else f"TextWorld Express unavailable: {self._error}"
            return verdict
        reset = env.reset(task)
        valid, won = list(reset.admissible_actions), False
        if _norm(reset.observation) != _norm(traj.steps[0].observation):
            verdict.add(0, "observation_mismatch", "impossible", "the first observation is not the one of game "
                        f"{task.instance}")
            return verdict
        for step in traj.steps[1:]:
            t = env.step(step.action or "")
            same = _norm(t.observation) == _norm(step.observation)
            if (step.action or "") not in valid:
                verdict.add(step.index, "env_rejected", "rejected" if same else "impossible",
                            f"{step.action!r} is not a valid action of that state")
            if not same:
                verdict.add(step.index, "observation_mismatch", "impossible", f"the engine answers "
                            f"{t.observation[:120]!r}, the record shows {(step.observation or '')[:120]!r}")
                return verdict
            valid, won = list(t.admissible_actions), t.won
        verdict.goal_reached = won
        if not won:
            verdict.add(traj.steps[-1].index, "goal_not_reached", "goal", f"game {task.instance} is not won")
        return verdict

    def close(self) -> None:
        """Stop the engine's JVM."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None

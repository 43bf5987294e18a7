"""ALFWorld (text) behind the same interface as :mod:`pipeline.envs.sim.textworld`.

Enabled only when the ``alfworld`` package is importable AND ``ALFWORLD_DATA`` points at the
downloaded game files (``alfworld-download``); otherwise :func:`check_available` raises
:class:`EnvUnavailable` saying exactly what is missing. Neither is present on the machines this
project is tested on, so the test suite covers only the error path; TextWorld
Express is the default environment.

Games are the ``game.tw-pddl`` files under ``$ALFWORLD_DATA/json_2.1.1/<split>/*/*/`` (ALFWorld's
layout); an :class:`AlfTask` names one by path. Reward is ``10 * won`` as in SkillRL's text env.
The category comes from the game-file folder (``pipeline.envs.alfworld``).
"""
from __future__ import annotations

import glob
import importlib.util
import os
import re
from dataclasses import dataclass

from pipeline.envs import alfworld as _alf
from pipeline.envs.sim.textworld import Reset, SimEnv, Transition

ENV = "alfworld"
WIN_REWARD = 10.0
_TASK = re.compile(r"Your task is to:\s*(.+)")


class EnvUnavailable(RuntimeError):
    """The environment's package or game data is not installed."""


def check_available() -> str:
    """Return the ALFWorld data folder, or raise :class:`EnvUnavailable` naming what is missing."""
    missing = []
    if importlib.util.find_spec("alfworld") is None or importlib.util.find_spec("textworld") is None:
        missing.append("the 'alfworld' package (pip install alfworld[full])")
    data = os.environ.get("ALFWORLD_DATA", "")
    if not data or not os.path.isdir(os.path.join(data, "json_2.1.1")):
        missing.append("its game files: run `alfworld-download` and set ALFWORLD_DATA to that folder"
                       f" (ALFWORLD_DATA={data!r} has no json_2.1.1/)")
    if missing:
        raise EnvUnavailable("ALFWorld is not available: missing " + " and ".join(missing)
                             + ". Use env 'textworld' (TextWorld Express) instead.")
    return data


@dataclass(frozen=True)
class AlfTask:
    """One ALFWorld game: the path of its ``game.tw-pddl`` file."""
    game_file: str

    @property
    def instance(self) -> str:
        """The trial folder name, e.g. ``pick_heat_then_place_in_recep-Egg-None-Fridge-13/trial_T2019...``."""
        parts = os.path.normpath(self.game_file).split(os.sep)
        return "/".join(parts[-3:-1])

    @property
    def category(self) -> str:
        """Category key from the game-file folder (:func:`pipeline.envs.alfworld.category_from_gamefile`),
        ``"other"`` when unknown."""
        return _alf.category_from_gamefile(self.game_file) or "other"


def list_tasks(split: str = "valid_seen", limit: int = 0) -> list[AlfTask]:
    """Game files of ``split`` (train | valid_seen | valid_unseen), sorted; ``limit`` 0 = all."""
    data = check_available()
    files = sorted(glob.glob(os.path.join(data, "json_2.1.1", split, "*", "*", "game.tw-pddl")))
    return [AlfTask(f) for f in (files[:limit] if limit else files)]


class AlfWorldEnv(SimEnv):
    """One ALFWorld text game at a time (TextWorld engine with ALFWorld's demangler).

    Raises :class:`EnvUnavailable` at construction when the package or data is missing.
    """

    def __init__(self, step_limit: int = 50):
        check_available()
        self.step_limit = step_limit
        self._env = None

    def reset(self, task: AlfTask) -> Reset:
        """Close any open game, start ``task``; returns the first observation, the task text (after
        ``Your task is to:``, ``""`` if absent) and the admissible actions."""
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        self.close()
        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        env_id = textworld.gym.register_game(task.game_file, infos, max_episode_steps=self.step_limit,
                                             wrappers=[AlfredDemangler(), AlfredInfos])
        self._env = textworld.gym.make(env_id)
        obs, info = self._env.reset()
        m = _TASK.search(obs)
        task_text = m.group(1).strip() if m else ""
        return Reset(observation=obs.strip(), task=task_text,
                     admissible_actions=list(info.get("admissible_commands") or []),
                     category=task.category, instance=task.instance)

    def step(self, action: str) -> Transition:
        """Apply ``action``; reward :data:`WIN_REWARD` on a win, else 0; ``done`` on a win or at the
        step limit. Raises ``RuntimeError`` before :meth:`reset`."""
        if self._env is None:
            raise RuntimeError("step() before reset()")
        obs, _score, done, info = self._env.step(action)
        won = bool(info.get("won", False))
        return Transition(observation=obs.strip(), reward=WIN_REWARD if won else 0.0, done=bool(done) or won,
                          won=won, score=1.0 if won else 0.0,
                          admissible_actions=list(info.get("admissible_commands") or []))

    def close(self) -> None:
        """Close the current game (idempotent)."""
        if self._env is not None:
            self._env.close()
            self._env = None

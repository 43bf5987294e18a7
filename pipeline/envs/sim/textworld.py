"""TextWorld Express behind the small environment interface used by rollouts and GRPO.

Interface (shared with :mod:`pipeline.envs.sim.alfworld`)::

    env.reset(task: EnvTask) -> Reset(observation, task, admissible_actions)
    env.step(action: str)    -> Transition(observation, reward, done, won, score, admissible_actions)
    env.close()

TextWorld Express (``textworld_express`` 1.1.0, a Java engine driven over py4j; one JVM per
env object, ~0.8 s to start) generates a game from (game name, params, fold, seed), so an
:class:`EnvTask` is fully reproducible. Its reset text has no task line: the task comes from
``infos["taskDescription"]`` ("Your task is to ...", the prefix is stripped so the prompt's
``Your task is to: <task>`` line reads naturally). ``won`` is the engine's ``tasksuccess``;
``reward`` is the change of the normalised score (0..1) caused by the step.

Categories are derived from the game name (:data:`GAME_CATEGORIES`), or from the task text
when the game is unknown (a parsed rollout). The module is registered in
``pipeline.envs.REGISTRY`` as env ``textworld``; its prompt wording (:data:`HEADER`, and
ALFWorld's :data:`TURN_INSTRUCTION`) is also what ``pipeline.prompts`` shows for an env
without a module.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Self

from pipeline.envs.alfworld import TURN_INSTRUCTION as ALFWORLD_TURN_INSTRUCTION

ENV = "textworld"

#: Prompt header (our own) and turn instruction (SkillRL's ALFWorld text: same protocol).
HEADER = "You are an expert agent operating in a text-based game environment."
TURN_INSTRUCTION = ALFWORLD_TURN_INSTRUCTION

#: Game name -> category key (our own names; one category per game).
GAME_CATEGORIES = {"twc": "put_away_objects", "cookingworld": "cooking", "coin": "find_coin",
              "mapreader": "map_reading", "arithmetic": "arithmetic", "sorting": "sorting",
              "simonsays": "simon_says", "peckingorder": "pecking_order"}

#: Small, fast default game parameters per game (one room, no doors), used in tests and `make run`.
DEFAULT_PARAMS = {
    "twc": "numLocations=1,numItemsToPutAway=1,includeDoors=0,limitInventorySize=0",
    "cookingworld": "numLocations=1,numIngredients=1,numDistractorItems=0,includeDoors=0,limitInventorySize=0",
}
CATEGORIES = tuple(dict.fromkeys(GAME_CATEGORIES.values()))
_TASK_PREFIX = "your task is to"
#: Words of each game's task description (engine text), for parsed rollouts with no game name.
_TASK_WORDS = (("cooking", ("meal", "cookbook", "recipe")), ("put_away_objects", ("usual locations", "put away")),
               ("find_coin", ("coin",)), ("sorting", ("sort",)), ("arithmetic", ("math", "arithmetic")))


def category(game: str) -> str:
    """Category key of a TextWorld Express game (``"twc"`` -> ``"put_away_objects"``); unknown -> ``"other"``."""
    return GAME_CATEGORIES.get(game, "other")


def classify(task: str, hint: str | None = None) -> str:
    """Category from the game name given as ``hint``; without one, from the task's wording."""
    if hint in GAME_CATEGORIES:
        return category(hint)
    low = task.lower()
    return next((cat for cat, words in _TASK_WORDS if any(w in low for w in words)), "other")


@dataclass(frozen=True)
class EnvTask:
    """One reproducible game: ``game`` in :data:`GAME_CATEGORIES`, ``params`` the engine's
    ``gameParams`` string ('' = :data:`DEFAULT_PARAMS`), ``fold`` train | dev | test, ``seed`` >= 0."""
    game: str
    seed: int
    fold: str = "train"
    params: str = ""

    @property
    def instance(self) -> str:
        """Stable instance id, the unit of train/val splits: ``"twc-train-7"``."""
        return f"{self.game}-{self.fold}-{self.seed}"

    @property
    def category(self) -> str:
        """Category key of ``game`` (:func:`category`), ``"other"`` when unknown."""
        return category(self.game)

    def game_params(self) -> str:
        """The ``gameParams`` string sent to the engine: ``params``, else the game's
        :data:`DEFAULT_PARAMS` entry, else ``""`` (the engine's defaults)."""
        return self.params or DEFAULT_PARAMS.get(self.game, "")


@dataclass
class Reset:
    """State after reset: raw observation, task text, admissible actions (engine order)."""
    observation: str
    task: str
    admissible_actions: list[str]
    category: str = "other"
    instance: str = ""


@dataclass
class Transition:
    """Result of one action. ``reward`` in env units; ``won`` True only on task success."""
    observation: str
    reward: float
    done: bool
    won: bool
    score: float = 0.0
    admissible_actions: list[str] = field(default_factory=list)


def strip_task_prefix(description: str) -> str:
    """``"Your task is to pick up X."`` -> ``"pick up X."`` (case-insensitive prefix; else unchanged)."""
    text = description.strip()
    if text.lower().startswith(_TASK_PREFIX):
        text = text[len(_TASK_PREFIX):].lstrip(" :")
    return text


class SimEnv:
    """Base of the simulators (module docstring interface): ``with Env(...) as env:`` calls
    :meth:`close` on the way out, also on an error."""

    def close(self) -> None:
        """Release the engine (idempotent)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TextWorldExpressEnv(SimEnv):
    """One TextWorld Express game engine (one JVM); reuse it across resets.

    Args:
        step_limit: the engine's own step limit (``envStepLimit``); rollouts stop earlier at
            their ``max_steps``.

    Raises ``RuntimeError`` when ``textworld_express`` (or Java) is unavailable, and
    ``ValueError`` for an unknown game name.
    """

    def __init__(self, step_limit: int = 100):
        try:
            from textworld_express import TextWorldExpressEnv as _Engine
        except ImportError as e:
            raise RuntimeError("TextWorld Express needs the package 'textworld-express' "
                               "(pip install textworld-express==1.1.0) and a Java runtime") from e
        self._engine = _Engine(envStepLimit=step_limit)
        self._task: EnvTask | None = None
        self._score = 0.0

    def reset(self, task: EnvTask) -> Reset:
        """Start ``task``; returns the first observation, the task text and admissible actions."""
        if task.game not in GAME_CATEGORIES:
            raise ValueError(f"unknown TextWorld Express game {task.game!r}; known: {sorted(GAME_CATEGORIES)}")
        obs, infos = self._engine.reset(seed=task.seed, gameFold=task.fold, gameName=task.game,
                                        gameParams=task.game_params(), generateGoldPath=True)
        self._task, self._score = task, float(infos.get("score", 0.0))
        return Reset(observation=obs.strip(), task=strip_task_prefix(infos["taskDescription"]),
                     admissible_actions=list(infos["validActions"]), category=task.category,
                     instance=task.instance)

    def step(self, action: str) -> Transition:
        """Apply ``action`` (any text; the engine answers unknown ones with a message)."""
        if self._task is None:
            raise RuntimeError("step() before reset()")
        obs, _reward, done, infos = self._engine.step(action)
        score = float(infos.get("score", 0.0))
        reward, self._score = score - self._score, score
        won = bool(infos.get("tasksuccess", False))
        return Transition(observation=obs.strip(), reward=reward, done=bool(done) or won, won=won, score=score,
                          admissible_actions=list(infos.get("validActions") or []))

    def gold_actions(self) -> list[str]:
        """The engine's gold action sequence for the current game (first item is ``look around``)."""
        return list(self._engine.getGoldActionSequence())

    def close(self) -> None:
        """Stop the JVM (idempotent)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None


def make_tasks(games: list[str], n: int, fold: str = "train", seed0: int = 0, params: str = "") -> list[EnvTask]:
    """``n`` tasks cycling over ``games`` with consecutive seeds from ``seed0`` (deterministic)."""
    return [EnvTask(games[i % len(games)], seed0 + i, fold, params) for i in range(n)]

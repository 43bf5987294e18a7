"""Run a policy in an environment, step by step, with the SFT prompt renderer.

The online policy sees exactly what SFT trained on (D-R1): each episode is recorded
as a :class:`~pipeline.core.records.Trajectory` *while it runs*, and the prompt for action ``k`` is
``prompts.render_step_messages(trajectory, k, skills_block, prompt_cfg)`` - the function the
validate stage uses to build SFT pairs - with the skills block selected once per episode by
``prompts.select_skills`` / ``render_skills_block`` (skills at every step, first step included).

Episodes of all slots advance in lock-step so one batched generation call serves every active
episode (a policy sees a list of chat prompts and returns one :class:`Completion` each).

Action projection (as SkillRL's text envs): the action is the lowercased, whitespace-collapsed content of
the first ``<action>...</action>``; without the tag the reference's fallback (last 30 characters
of the lowercased output) is sent, so the env answers it like SkillRL's did. A step is *valid*
when the output has ``<think>``, ``</think>`` and an ``<action>`` block and no CJK text (the
reference's format-only rule) and, unlike the reference, the action is in the admissible list.

Policies: :class:`OpenAIPolicy` (any OpenAI-compatible endpoint, e.g. the embedded llama.cpp
server of :mod:`pipeline.llm.server`) here; the Hugging Face policy that also returns token ids
for GRPO is ``sft.rl.policy.HFPolicy``. An *expert* policy (:class:`GoldPolicy`, the engine's gold
plan with optional injected noise) has ``start_episode(slot, env, task)`` and
``act(slot, trajectory) -> Completion`` instead: it needs the env and the episode, not a prompt.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from pipeline import rules
from pipeline.core.config import PromptConfig
from pipeline.formats.common import build_trajectory
from pipeline.prompts import render_skills_block, render_step_messages, select_skills
from pipeline.core.records import Step, Trajectory

SOURCE_FORMAT = "rollout"
WIN_REWARD = 10.0  # reward logged on the winning step: 10 * won, as SkillRL's text envs
_ACTION = re.compile(r"<action>(.*?)</action>", re.S | re.I)


@dataclass
class Completion:
    """One policy output; token ids are filled by policies that can (``sft.rl.policy.HFPolicy``)."""
    text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)


class Policy(Protocol):
    """Anything that maps a batch of chat prompts to one completion each (same order)."""
    model_id: str

    def generate(self, prompts: list[list[dict[str, str]]]) -> list[Completion]:
        """One :class:`Completion` per prompt (a list of chat messages ``{"role", "content"}``), in order."""


def project_action(text: str) -> tuple[str, bool]:
    """``(action sent to the env, format_ok)`` for a raw model output (module docstring).

    >>> project_action("<think>go</think>\\n<action>Take  Shirt</action>")
    ('take shirt', True)
    """
    low = text.lower()
    m = _ACTION.search(low)
    action = m.group(1) if m else low[-30:]
    action = " ".join(action.split())
    ok = bool(m) and "<think>" in low and "</think>" in low and not rules.has_cjk(text)
    return action, ok


@dataclass
class StepSample:
    """One policy decision: the prompt shown for action ``k`` and what came back."""
    k: int
    messages: list[dict[str, str]]
    completion: Completion
    action: str
    format_ok: bool
    admissible: bool

    @property
    def valid(self) -> bool:
        """Well-formed output (``format_ok``) whose action is in the admissible list shown."""
        return self.format_ok and self.admissible


@dataclass
class Episode:
    """A finished (or step-capped) episode: its trajectory plus the samples that produced it."""
    trajectory: Trajectory
    samples: list[StepSample]
    group_id: str
    won: bool
    score: float
    skills_block: str
    skill_ids: list[str]

    @property
    def n_invalid(self) -> int:
        """Number of samples that are not :attr:`StepSample.valid`."""
        return sum(not s.valid for s in self.samples)


@dataclass
class _Live:
    traj: Trajectory
    env: Any
    task: Any
    group_id: str
    block: str
    skill_ids: list[str]
    samples: list[StepSample] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    won: bool = False
    done: bool = False


def skills_for(bank_rows: list[dict], env: str, category: str, cfg: PromptConfig) -> tuple[str, list[str]]:
    """``(skills block, skill ids)`` shown for a task: the SFT selection and rendering (prompts.py)."""
    chosen = select_skills(bank_rows, env, category, cfg)
    return render_skills_block(chosen), [r["skill_id"] for r in chosen]


def run_episodes(envs: Sequence[Any], tasks: Sequence[Any], group_ids: Sequence[str], policy: Policy,
                 bank_rows: list[dict], prompt_cfg: PromptConfig, max_steps: int, env_name: str,
                 record_offset: int = 0, bank_version: str = "") -> list[Episode]:
    """Play ``tasks[i]`` in ``envs[i]`` (all in lock-step) until done or ``max_steps`` actions.

    Args:
        envs: objects with ``reset(task) -> Reset`` and ``step(action) -> Transition``
            (:mod:`pipeline.envs.sim.textworld`, :mod:`pipeline.envs.sim.alfworld`); one per task.
        tasks: env tasks (``EnvTask`` / ``AlfTask``); several equal tasks form a GRPO group.
        group_ids: group key of each slot (advantages are normalised per key, never by position).
        policy: see :class:`Policy`.
        bank_rows: skill rows (``records.SKILL_SCHEMA``); ``[]`` = no skills block.
        max_steps: actions per episode at most (SkillRL's ``env.max_steps``).
        env_name: ``Trajectory.env`` value (``"textworld"``, ``"alfworld"``).
        record_offset: added to the slot index for ``record_index`` (unique ids across calls).

    Returns one :class:`Episode` per slot, in slot order. Step rewards follow SkillRL's rollout
    logs: ``10`` on the winning step, else ``0``; engine scores go to ``metadata.scores``.
    """
    if not (len(envs) == len(tasks) == len(group_ids)):
        raise ValueError(f"envs, tasks and group_ids differ in length: {len(envs)}, {len(tasks)}, {len(group_ids)}")
    live = []
    for env, task, gid in zip(envs, tasks, group_ids):
        r = env.reset(task)
        block, ids = skills_for(bank_rows, env_name, r.category, prompt_cfg)
        traj = Trajectory(trajectory_id=f"live-{len(live)}", env=env_name, env_instance=r.instance, task=r.task,
                          category=r.category, outcome="failure", reward=0.0,
                          steps=[Step(0, None, r.observation, list(r.admissible_actions))],
                          source_uri="", source_format=SOURCE_FORMAT, record_index=len(live))
        if hasattr(policy, "start_episode"):  # an expert policy (GoldPolicy) reads the engine's plan
            policy.start_episode(len(live), env, task)
        live.append(_Live(traj, env, task, gid, block, ids))
    for _ in range(max_steps):
        active = [e for e in live if not e.done]
        if not active:
            break
        prompts = [render_step_messages(e.traj, len(e.traj.steps), e.block, prompt_cfg) for e in active]
        if hasattr(policy, "act"):  # an expert policy answers per slot, from the episode so far
            outs = [policy.act(live.index(e), e.traj) for e in active]
        else:
            outs = policy.generate(prompts)
        for e, msgs, out in zip(active, prompts, outs):
            k = len(e.traj.steps)
            action, ok = project_action(out.text)
            shown = e.traj.steps[-1].admissible_actions
            e.samples.append(StepSample(k, msgs, out, action, ok, action in shown))
            t = e.env.step(action)
            e.won, e.done = t.won, t.done
            e.scores.append(t.score)
            e.traj.steps.append(Step(k, action, t.observation, list(t.admissible_actions),
                                     WIN_REWARD if t.won else 0.0, t.done, None))
    stats = getattr(policy, "noise_stats", None)
    return [_finish(e, i + record_offset, policy.model_id, bank_version, stats(i) if stats else None)
            for i, e in enumerate(live)]


def _finish(e: _Live, record_index: int, model_id: str, bank_version: str, extra: dict | None = None) -> Episode:
    steps = e.traj.steps
    meta = {"group_id": e.group_id, "model": model_id, "scores": e.scores, "bank_version": bank_version,
            "skill_ids": e.skill_ids, "task_key": dataclasses.asdict(e.task) if dataclasses.is_dataclass(e.task) else str(e.task),
            "invalid_steps": [s.k for s in e.samples if not s.valid], **(extra or {})}
    traj = build_trajectory(env=e.traj.env, env_instance=e.traj.env_instance, task=e.traj.task,
                            outcome="success" if e.won else "failure", reward=WIN_REWARD if e.won else 0.0,
                            steps=steps, source_uri=f"rollout://{e.traj.env}/{e.traj.env_instance}/{e.group_id}",
                            source_format=SOURCE_FORMAT, record_index=record_index, source_line=None,
                            category=e.traj.category, metadata=meta)
    return Episode(traj, e.samples, e.group_id, e.won, e.scores[-1] if e.scores else 0.0, e.block, e.skill_ids)


class OpenAIPolicy:
    """Policy served by an OpenAI-compatible chat endpoint (free text, one request per prompt).

    Args:
        base_url: endpoint ending in ``/v1`` (e.g. ``pipeline.llm.server.EmbeddedServer``'s URL).
        model: model name at the endpoint.
        api_key_env: name of the environment variable with the key ('' = no key); never logged.
        temperature, max_tokens, seed: sampling settings sent with every request.
        model_id: identity recorded in trajectories (default ``model``).

    Transport errors are retried by the ``openai`` client (``max_retries``) and then raised.
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "", temperature: float = 0.4,
                 max_tokens: int = 256, seed: int = 0, model_id: str = "", max_retries: int = 3,
                 timeout_s: float = 120.0):
        import openai
        key = os.environ.get(api_key_env, "") if api_key_env else "sk-no-key"
        if api_key_env and not key:
            raise ValueError(f"api_key_env names {api_key_env!r}, which is unset or empty")
        self._client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=max_retries, timeout=timeout_s)
        self.model, self.temperature, self.max_tokens, self.seed = model, temperature, max_tokens, seed
        self.model_id = model_id or model

    def generate(self, prompts: list[list[dict[str, str]]]) -> list[Completion]:
        """See :meth:`Policy.generate`: one chat-completion request per prompt, in turn; text only
        (no token ids), ``""`` for an empty answer. Raises the ``openai`` error once its retries
        are spent."""
        out = []
        for msgs in prompts:
            r = self._client.chat.completions.create(model=self.model, messages=msgs, temperature=self.temperature,
                                                     max_tokens=self.max_tokens, seed=self.seed)
            out.append(Completion(r.choices[0].message.content or ""))
        return out


#: Inverse of an action, used by :class:`GoldPolicy` to undo an injected wrong action so the
#: gold plan can continue (TextWorld Express command words; ``take`` has no general inverse).
_UNDO_VERB = {"open": "close", "close": "open"}
_OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}


def undo_action(action: str) -> str | None:
    """The action that reverses ``action`` in TextWorld Express, or ``None`` when there is none.

    >>> undo_action("move north"), undo_action("open door to east"), undo_action("take coin")
    ('move south', 'close door to east', None)
    """
    words = action.split()
    if len(words) == 2 and words[0] == "move" and words[1] in _OPPOSITE:
        return f"move {_OPPOSITE[words[1]]}"
    if words and words[0] in _UNDO_VERB:
        return " ".join([_UNDO_VERB[words[0]]] + words[1:])
    return None


@dataclass
class _GoldState:
    plan: list[str]
    rng: Any
    next: int = 0
    undo: str | None = None
    injected: list[int] = field(default_factory=list)
    recovered: list[int] = field(default_factory=list)


class GoldPolicy:
    """Expert policy: plays TextWorld Express's gold action sequence, with optional injected noise.

    With probability ``noise`` per step it sends an *admissible wrong* action instead (uniform
    over the admissible actions other than the next gold one, seeded), then, if that action has
    an inverse (:func:`undo_action`: ``move``, ``open``/``close``), sends the inverse before
    resuming the plan. That yields recoveries (an error, then its correction, then success) and
    failures (an irreversible error such as eating an ingredient, or the step cap), from the
    real engine, with no model or API key. ``noise = 0`` plays the gold path. The engine builds
    the gold plan of a multi-room game differently in each JVM (coin seed 1: 11 to 22 actions
    measured), so only one-room games replay action for action across processes.

    Args:
        noise: probability in [0, 1] of a wrong action at a step.
        seed: seed of the noise; each episode's generator is seeded by (seed, instance, episode
            number), so results do not depend on batch order.

    Used through the expert hooks of :func:`run_episodes` (``start_episode``, ``act``); the env
    must have ``gold_actions()`` (:class:`pipeline.envs.sim.textworld.TextWorldExpressEnv`), else
    ``ValueError``. Per-episode counts: :meth:`noise_stats`.
    """

    def __init__(self, noise: float = 0.0, seed: int = 0, think: str = "Following the plan."):
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1], got {noise!r}")
        self.noise, self.seed, self.think = noise, seed, think
        self.model_id = f"gold:noise={noise:g}:seed={seed}" if noise else "gold"
        self._state: dict[int, _GoldState] = {}
        self._episodes = 0

    def start_episode(self, slot: int, env: Any, task: Any) -> None:
        """Read the engine's gold plan for the game just reset in ``env``."""
        import random
        if not hasattr(env, "gold_actions"):
            raise ValueError(f"--policy gold needs an env with a gold action sequence (TextWorld Express); "
                             f"{type(env).__name__} has none")
        key = f"{self.seed}:{getattr(task, 'instance', task)}:{self._episodes}"
        self._episodes += 1
        self._state[slot] = _GoldState(list(env.gold_actions()), random.Random(key))

    def act(self, slot: int, traj: Trajectory) -> Completion:
        """The next action of episode ``slot`` given its trajectory so far (last step's admissible list)."""
        st = self._state[slot]
        k = len(traj.steps) - 1
        gold = st.plan[st.next] if st.next < len(st.plan) else "look around"
        shown = traj.steps[-1].admissible_actions
        if st.undo is not None:
            action, st.undo = st.undo, None
            st.recovered.append(k)
        elif self.noise and st.rng.random() < self.noise and any(a != gold for a in shown):
            action = st.rng.choice(sorted(a for a in shown if a != gold))  # the engine's order varies by JVM
            st.injected.append(k)
            st.undo = undo_action(action)  # sent next step (the engine answers it even if now moot)
        else:
            action = gold
            st.next += 1
        return Completion(f"<think>{self.think}</think>\n<action>{action}</action>")

    def generate(self, prompts: list[list[dict[str, str]]]) -> list[Completion]:
        """Always raises ``TypeError``: this policy plays through :meth:`start_episode` / :meth:`act`."""
        raise TypeError("GoldPolicy plays through run_episodes' expert hooks (start_episode/act), not generate()")

    def noise_stats(self, slot: int) -> dict[str, list[int]]:
        """Step indices (0-based actions) of injected wrong actions and of undo actions in ``slot``'s last episode."""
        st = self._state[slot]
        return {"injected": list(st.injected), "recovered": list(st.recovered)}


def episode_summary(episodes: list[Episode]) -> dict[str, Any]:
    """Counts for logs and manifests: episodes, wins, success rate, mean actions, invalid steps."""
    n = len(episodes)
    wins = sum(e.won for e in episodes)
    return {"episodes": n, "wins": wins, "success_rate": wins / n if n else 0.0,
            "mean_actions": sum(len(e.trajectory.steps) - 1 for e in episodes) / n if n else 0.0,
            "invalid_steps": sum(e.n_invalid for e in episodes)}

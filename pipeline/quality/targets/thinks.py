"""Targets ``think`` (the thinks of one distill answer) and ``episode_thinks`` (every think of
one trajectory, across its calls), with their checks in the order distill runs them."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

from pipeline import envs
from pipeline.core.config import QualityConfig
from pipeline.core.records import Trajectory
from pipeline.encoder import Encoder
from pipeline.llm.templates import clip_middle
from pipeline.quality import alignment, echo, gamefacts, grounding, text, topic
from pipeline.quality.registry import Check, Example, Target
from pipeline.quality.targets import example_trajectory
from pipeline.quality.violation import Violation

#: Characters of a step's observation its think is compared with (``off_topic``): as the
#: distill prompt shows it (``pipeline.stages.distill.OBS_CHARS``).
OBS_CHARS = 500


@dataclass
class Thinks:
    """Subject of target ``think``: one answer's ``thinks`` (``[{step_index, think}]``) for
    ``traj``, whose distill entries (``{step_index, observation, admissible, action, effect}``)
    are keyed by step index in ``entries``; ``vocab``: content words of the distill prompt's
    fixed text (``echo_prompt``); ``examples``: its worked-example strings; ``max_chars``: the
    schema bound of an LLM think (``None``: a recorded thought, no ``cut_off``); ``others``:
    ``(step_index, think)`` the trajectory already has from other calls (``reused_think``)."""
    thinks: list[dict[str, Any]]
    entries: dict[int, dict[str, Any]]
    traj: Trajectory
    qcfg: QualityConfig
    vocab: frozenset[str] = frozenset()
    examples: Sequence[str] = ()
    encoder: Encoder | None = None
    max_chars: int | None = None
    others: tuple[tuple[int, str], ...] = ()
    kind: str = ""

    @property
    def env(self) -> str:
        return self.traj.env

    @cached_property
    def named(self) -> list[tuple[str, str]]:
        """``("think for step <i>", think)`` of each think."""
        return [(f"think for step {t['step_index']}", str(t.get("think") or "")) for t in self.thinks]

    @cached_property
    def pairs(self) -> list[tuple[int, str]]:
        """``(step_index, think)`` of each think."""
        return [(t["step_index"], str(t.get("think") or "")) for t in self.thinks]


def _degenerate(s: Thinks) -> list[Violation]:
    return [v for name, t in s.named for v in text.field_violations(name, t, s.qcfg)]


def _reused(s: Thinks) -> list[Violation]:
    return text.reused_with(s.pairs, s.others, s.traj.task)  # with no others: text.reused


def _future_leak(s: Thinks) -> list[Violation]:
    return [v for i, t in s.pairs for v in grounding.future_leak(t, s.traj, i)]


def _false_comparison(s: Thinks) -> list[Violation]:
    return [v for _, t in s.pairs for v in grounding.false_comparisons(t)]


def _false_fact(s: Thinks) -> list[Violation]:
    return [v for name, t in s.named for v in gamefacts.false_fact_violations(name, t)]


def _ungrounded(s: Thinks) -> list[Violation]:
    return [v for i, t in s.pairs
            for v in grounding.ungrounded_think(t, s.traj, i, s.entries[i]["action"], s.entries[i]["admissible"])]


def _restated(s: Thinks) -> list[Violation]:
    # a think that only restates what the prompt says the action does is a restated action too
    steps = {i: (e["action"], [*e["admissible"], e.get("effect") or ""]) for i, e in s.entries.items()}
    return echo.think_violations(s.pairs, steps, [st.action or "" for st in s.traj.steps[1:]])


def _prompt_echo(s: Thinks) -> list[Violation]:
    return echo.think_echo_violations(s.pairs, s.vocab)


def _lists(s: Thinks) -> list[Violation]:
    seen = [st.observation or "" for st in s.traj.steps]
    return echo.list_violations(s.pairs, {i: " ".join(seen[:i + 1]) for i in s.entries}, s.traj.task)


def _alignment(s: Thinks) -> list[Violation]:
    return alignment.think_violations(s.pairs, s.traj, {i: e["action"] for i, e in s.entries.items()})


def _example_copy(s: Thinks) -> list[Violation]:
    return echo.example_violations(s.named, s.examples)


def _cut_off(s: Thinks) -> list[Violation]:
    if not s.max_chars:
        return []
    return [v for i, t in s.pairs for v in text.cut_off(f"think for step {i}", t, s.max_chars)]


def _off_topic(s: Thinks) -> list[Violation]:
    sources = [[f"{clip_middle(s.entries[t['step_index']]['observation'], OBS_CHARS)} "
                f"{s.entries[t['step_index']]['action']}", s.traj.task] for t in s.thinks]
    return topic.off_topic(s.named, sources, s.qcfg.off_topic_threshold, s.encoder)


@dataclass
class ThinkSequence:
    """Subject of target ``episode_thinks``: ``thinks`` (``(step_index, think)``) of one
    trajectory judged together with ``others`` it already has, for its ``task``."""
    thinks: Sequence[tuple[int, str]]
    task: str
    env: str
    others: Sequence[tuple[int, str]] = ()
    kind: str = ""


def _reused_across(s: ThinkSequence) -> list[Violation]:
    return text.reused_with(s.thinks, s.others, s.task)


def _think_example(ex: Example) -> Thinks:
    """The output as the think of step ``step`` (default: the last action's) of
    :func:`example_trajectory`; ``others``, ``prompt`` (the fixed prompt text), ``examples``,
    ``max_chars`` and ``quality`` (config overrides) from the context."""
    c = ex.context
    traj = example_trajectory(ex)
    entries = {i: {"step_index": i, "observation": traj.steps[i].observation,
                   "admissible": list(traj.steps[i].admissible_actions), "action": traj.steps[i + 1].action or "",
                   "effect": envs.action_effect(ex.env, traj.steps[i + 1].action or "")}
               for i in range(len(traj.steps) - 1)}
    step = c.get("step", len(traj.steps) - 2)
    return Thinks([{"step_index": step, "think": ex.output}], entries, traj, QualityConfig(**c.get("quality", {})),
                  vocab=echo.prompt_words([c.get("prompt", "")]), examples=tuple(c.get("examples", ())),
                  max_chars=c.get("max_chars"), others=tuple(map(tuple, c.get("others", ()))))


def _sequence_example(ex: Example) -> ThinkSequence:
    """The output as the list of a trajectory's thinks, in step order from 0."""
    return ThinkSequence(list(enumerate(ex.output)), ex.context.get("task", ""), ex.env)


TARGETS = (Target("think", "the thinks of one distill answer (each with its step's action, admissible actions "
                           "and observations so far)", _think_example, "distill",
                  ("pipeline.stages.distill.think_violations",)),
           Target("episode_thinks", "every think of one trajectory, across its distill calls", _sequence_example, "distill",
                  ("pipeline.stages.distill.repeats",)))
ALFWORLD = frozenset({"alfworld"})
CHECKS = (
    Check("think.degenerate", "think", ("no_words", "ngram_loop"), _degenerate, reads="each think"),
    Check("think.reused", "think", ("reused_think",), _reused, reads="each think, and the trajectory's other thinks"),
    Check("think.future_leak", "think", ("future_leak",), _future_leak, reads="each think, later observations"),
    Check("think.false_comparison", "think", ("false_comparison",), _false_comparison, reads="each think"),
    Check("think.false_game_fact", "think", ("false_game_fact",), _false_fact, envs=ALFWORLD, reads="each think"),
    Check("think.ungrounded", "think", ("ungrounded_think",), _ungrounded,
          reads="each think, the task, observations so far, the action and admissible actions"),
    Check("think.restated_action", "think", ("think_is_action",), _restated,
          reads="each think, its action, admissible actions and what the action does, the trajectory's actions"),
    Check("think.prompt_echo", "think", ("echo_prompt",), _prompt_echo, reads="each think, the distill prompt's text"),
    Check("think.lists_observation", "think", ("lists_observation",), _lists,
          reads="each think, the observations so far"),
    Check("think.alignment", "think", ("narration", "think_misaligned", "think_unrelated"), _alignment,
          reads="each think, its action, the task and the trajectory up to it"),
    Check("think.example_copy", "think", ("echo_prompt",), _example_copy,
          reads="each think, the distill prompt's worked examples"),
    Check("think.cut_off", "think", ("cut_off",), _cut_off, reads="each LLM think, its schema length bound"),
    Check("think.off_topic", "think", ("off_topic",), _off_topic, reads="each think, its step's observation and "
                                                                       "action, the task"),
    Check("episode_thinks.reused", "episode_thinks", ("reused_think",), _reused_across, reads="every think"),
)

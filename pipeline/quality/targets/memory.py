"""Target ``memory``: one memory answer for its trajectory, with its checks in the order the
memory stage runs them (item kind: the outcome, ``success`` or ``failure``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Sequence

from pipeline.core.config import QualityConfig
from pipeline.core.records import Trajectory
from pipeline.encoder import Encoder
from pipeline.quality import echo, grounding, text, topic
from pipeline.quality.registry import Check, Example, Target
from pipeline.quality.targets import example_trajectory
from pipeline.quality.violation import Violation

MISTAKE_FIELDS = ("trigger_condition", "bad_action")


def mistake_text(m: dict[str, Any]) -> str:
    """``"<trigger_condition>: <bad_action>"`` of one mistake (what the content rules read)."""
    return f"{str(m.get('trigger_condition') or '').strip()}: {str(m.get('bad_action') or '').strip()}"


def bounded_fields(value: dict[str, Any]) -> list[tuple[str, str]]:
    """Every free-text field of a memory answer that ``cut_off`` judges, as ``(name, text)``:
    ``contextual_description``, ``planning_pattern``, ``refined_trajectory[j].reasoning``,
    ``mistakes_to_avoid[j].<f>``. A critical observation is a quote of the record (checked, or
    replaced by it, before): a quote that stops at the bound is still true."""
    out = [(k, str(value.get(k) or "")) for k in ("contextual_description", "planning_pattern")]
    for j, s in enumerate(value.get("refined_trajectory") or []):
        out.append((f"refined_trajectory[{j}].reasoning", str(s.get("reasoning") or "")))
    for j, m in enumerate(value.get("mistakes_to_avoid") or []):
        out += [(f"mistakes_to_avoid[{j}].{f}", str(m.get(f) or "")) for f in MISTAKE_FIELDS]
    return out


def bound_key(name: str) -> str:
    """``refined_trajectory[2].reasoning`` -> ``refined_trajectory.reasoning`` (a key of the
    memory stage's ``schema_bounds``)."""
    head, _, tail = name.partition("[")
    return f"{head}.{tail.split('.', 1)[1]}" if tail else head


@dataclass
class MemoryAnswer:
    """Subject of target ``memory``: the answer ``value`` for ``traj``; ``bounds``:
    ``{field: maxLength}`` of its schema (``cut_off``); ``examples``: the memory prompt's
    worked-example strings (``echo_prompt``)."""
    value: dict[str, Any]
    traj: Trajectory
    qcfg: QualityConfig
    bounds: dict[str, int] = field(default_factory=dict)
    examples: Sequence[str] = ()
    encoder: Encoder | None = None

    @property
    def env(self) -> str:
        return self.traj.env

    @property
    def kind(self) -> str:
        return "success" if self.traj.success else "failure"

    @cached_property
    def named(self) -> list[tuple[str, str]]:
        """``(name, text)`` of the description, the planning pattern, each refined step's
        reasoning and each mistake (:func:`mistake_text`)."""
        v = self.value
        out = [("contextual_description", str(v.get("contextual_description") or "")),
               ("planning_pattern", str(v.get("planning_pattern") or ""))]
        out += [(f"refined_trajectory[{j}].reasoning", str(s.get("reasoning") or ""))
                for j, s in enumerate(v.get("refined_trajectory") or [])]
        return out + [(f"mistakes_to_avoid[{j}]", mistake_text(m)) for j, m in enumerate(v.get("mistakes_to_avoid") or [])]


def _degenerate(s: MemoryAnswer) -> list[Violation]:
    return [v for name, t in s.named for v in text.field_violations(name, t, s.qcfg)]


def _cut_off(s: MemoryAnswer) -> list[Violation]:
    return [v for name, t in bounded_fields(s.value) for v in text.cut_off(name, t, s.bounds.get(bound_key(name)))]


def _example_copy(s: MemoryAnswer) -> list[Violation]:
    return echo.example_violations(bounded_fields(s.value), s.examples)


def _grounding(s: MemoryAnswer) -> list[Violation]:
    return grounding.memory_step_violations(s.value.get("refined_trajectory") or [], s.traj,
                                            s.qcfg.min_observation_overlap)


def _missing_key_step(s: MemoryAnswer) -> list[Violation]:
    return grounding.missing_key_step(s.value.get("refined_trajectory") or [], s.traj)


def _off_topic(s: MemoryAnswer) -> list[Violation]:
    sources = [s.traj.task, "; ".join(st.action or "" for st in s.traj.steps[1:])]
    topical = [(n, t) for n, t in s.named if not n.startswith("refined_trajectory")]
    return topic.off_topic(topical, [sources] * len(topical), s.qcfg.off_topic_threshold, s.encoder)


def _memory_example(ex: Example) -> MemoryAnswer:
    """The output as the answer for :func:`pipeline.quality.targets.thinks.example_trajectory`
    (``outcome`` from the kind); ``bounds``, ``examples`` and ``quality`` from the context."""
    c = ex.context
    traj = example_trajectory(Example(ex.target, ex.output, ex.reject, ex.env, ex.kind,
                                      {**c, "outcome": ex.kind or c.get("outcome", "success")}))
    return MemoryAnswer(dict(ex.output), traj, QualityConfig(**c.get("quality", {})), dict(c.get("bounds", {})),
                        tuple(c.get("examples", ())))


TARGETS = (Target("memory", "one memory answer: description, refined steps (action, critical observation, "
                            "reasoning), planning pattern, mistakes (trigger, bad action); its trajectory",
                  _memory_example, "memory",
                  ("pipeline.stages.memory.content_violations",)),)
CHECKS = (
    Check("memory.degenerate", "memory", ("no_words", "ngram_loop"), _degenerate,
          reads="description, planning pattern, each step's reasoning, each mistake"),
    Check("memory.cut_off", "memory", ("cut_off",), _cut_off,
          reads="description, planning pattern, each step's reasoning, each mistake field; schema bounds"),
    Check("memory.example_copy", "memory", ("echo_prompt",), _example_copy,
          reads="the fields of cut_off, the memory prompt's worked examples"),
    Check("memory.grounding", "memory", ("ungrounded_step", "ungrounded_observation"), _grounding,
          reads="each refined step's index, action and critical observation; the recorded steps"),
    Check("memory.missing_key_step", "memory", ("missing_key_step",), _missing_key_step, kinds=frozenset({"success"}),
          reads="the refined steps' indices; the recorded actions"),
    Check("memory.off_topic", "memory", ("off_topic",), _off_topic,
          reads="description, planning pattern, each mistake; the task and actions"),
)

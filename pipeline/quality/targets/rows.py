"""Targets of rows written before the content rules existed or outside an LLM answer: ``pair``
(the think of one SFT pair, build_pairs) and ``skill_row`` (a skill row and the memory artifact
its sources must be in, skills)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from pipeline.quality import echo, grounding
from pipeline.quality.registry import Check, Example, Target
from pipeline.quality.violation import Violation


@dataclass
class PairThink:
    """Subject of target ``pair``: the ``think`` of step ``step_index`` (0-based: it explains
    ``action``, the trajectory's action ``step_index + 1``), with the admissible actions shown and
    every recorded action of the trajectory. A think taken from the source's recorded thoughts or
    from a distill artifact written before a rule existed never went through distill's checks."""
    think: str
    step_index: int
    action: str
    admissible: Sequence[str]
    trajectory_actions: Sequence[str]
    env: str
    kind: str = ""


def _restated(s: PairThink) -> list[Violation]:
    if not s.think:
        return []  # a blank think is build_pairs' own empty_think
    return echo.think_violations([(s.step_index, s.think)], {s.step_index: (s.action, s.admissible)},
                                 s.trajectory_actions)


@dataclass
class SkillSources:
    """Subject of target ``skill_row``: a skill ``row`` (its ``source_memory_ids``, ``kind``,
    ``category``) and ``memories``, every memory of the run by id."""
    row: dict[str, Any]
    memories: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def env(self) -> str:
        return str(self.row.get("env") or "")

    @property
    def kind(self) -> str:
        return str(self.row.get("kind") or "")


def _sources(s: SkillSources) -> list[Violation]:
    return grounding.skill_source_violations(s.row, s.memories)


def _pair_example(ex: Example) -> PairThink:
    """The output as the think of the last of the context's ``actions`` (``admissible``: the
    list shown before it)."""
    actions = list(ex.context.get("actions") or [])
    return PairThink(ex.output, len(actions) - 1, actions[-1] if actions else "", list(ex.context.get("admissible", ())),
                     actions, ex.env)


def _row_example(ex: Example) -> SkillSources:
    """The output as the skill row; ``memories``: the memory rows of the run (a list)."""
    return SkillSources({"env": ex.env, "kind": ex.kind, **ex.output},
                        {m["memory_id"]: m for m in ex.context.get("memories", ())})


TARGETS = (Target("pair", "the think of one SFT pair, its action, the admissible actions shown and the "
                          "trajectory's actions", _pair_example, "build_pairs",
                  ("pipeline.stages.build_pairs.content_violations",)),
           Target("skill_row", "a skill row's source memory ids and category, and the memory artifact",
                  _row_example, "skills", ("pipeline.stages.skills.source_check",)))
CHECKS = (
    Check("pair.restated_action", "pair", ("think_is_action",), _restated,
          reads="the think, its action, admissible actions and the trajectory's actions"),
    Check("skill_row.sources", "skill_row", ("unknown_source_memory", "category_mismatch"), _sources,
          reads="source memory ids, kind and category; the memories' categories"),
)

"""Targets ``bank_item`` (one skill or common mistake of a skills answer) and ``bank_answer``
(all items of one answer, for the rules that compare items): their subjects, and
:func:`judge_items`, which runs both. Item kinds: ``general``, ``task_specific``, ``mistake``.
Their checks: :mod:`pipeline.quality.targets.bank_checks`."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Sequence

from pipeline.core.config import QualityConfig
from pipeline.core.records import MISTAKE_FIELDS, SKILL_FIELDS, Trajectory
from pipeline.quality import actions as act
from pipeline.quality import echo
from pipeline.quality.registry import Example, Registry, Target
from pipeline.quality.targets import example_trajectory
from pipeline.quality.violation import Violation



@dataclass
class BankContext:
    """What the items of one skills answer are judged against.

    Attributes:
        kind: ``general`` | ``task_specific`` | ``mistake``.
        qcfg: thresholds and the policy (``quality`` config section).
        vocab: content words of the prompt's fixed text (``echo_prompt``).
        sources: what the items must be about (task and description of the memories fed; ``off_topic``).
        actions: the recorded actions of those memories (``not_actionable``, and the object kinds
            ``restated_action`` may name).
        successes: successful trajectories the prescribed orders are checked against
            (``contradicts_success``; empty: not checked).
        category: the task category of a task-specific call ("" otherwise).
        bounds: ``{field: maxLength}`` of the answer schema (``cut_off``).
        examples: the prompt's worked-example strings an item must not copy (``echo_prompt``).
        env: the environment of the items.
    """
    kind: str
    qcfg: QualityConfig
    vocab: frozenset[str] = frozenset()
    sources: Sequence[str] = ()
    actions: Sequence[str] = ()
    successes: Sequence[Trajectory] = ()
    category: str = ""
    bounds: dict[str, int] = field(default_factory=dict)
    examples: Sequence[str] = ()
    env: str = ""

    @functools.cached_property
    def seen_text(self) -> str:
        """Lower-cased observations and admissible actions of :attr:`successes`: what the source
        games show (TextWorld ``false_game_fact`` of a door, key or lock)."""
        return "\n".join(f"{s.observation or ''} {' '.join(s.admissible_actions or [])}".lower()
                         for t in self.successes for s in t.steps)

    @functools.cached_property
    def nouns(self) -> set[str]:
        """The nouns of :attr:`actions` (:func:`pipeline.quality.actions.nouns_of`)."""
        return act.nouns_of(self.actions)

    @property
    def key(self) -> str:
        """The answer's array key: ``mistakes`` or ``skills``."""
        return "mistakes" if self.kind == "mistake" else "skills"

    @property
    def fields(self) -> tuple[str, ...]:
        """The text fields of one item."""
        return MISTAKE_FIELDS if self.kind == "mistake" else SKILL_FIELDS


@dataclass
class BankItem:
    """Subject of target ``bank_item``: item ``index`` of an answer judged against ``ctx``."""
    ctx: BankContext
    item: dict[str, Any]
    index: int

    @property
    def env(self) -> str:
        return self.ctx.env

    @property
    def kind(self) -> str:
        return self.ctx.kind

    @property
    def name(self) -> str:
        """The item in messages: ``skills[2]``."""
        return f"{self.ctx.key}[{self.index}]"

    def value(self, f: str) -> str:
        return str(self.item.get(f) or "")

    def named(self, fields: Sequence[str]) -> list[tuple[str, str]]:
        """``("<name>.<field>", text)`` of those of ``fields`` the item's kind has, in that order."""
        return [(f"{self.name}.{f}", self.value(f)) for f in fields if f in self.ctx.fields]


@dataclass
class BankAnswer:
    """Subject of target ``bank_answer``: every item of one answer; violations carry the item index."""
    ctx: BankContext
    items: Sequence[dict[str, Any]]

    @property
    def env(self) -> str:
        return self.ctx.env

    @property
    def kind(self) -> str:
        return self.ctx.kind


def judge_items(ctx: BankContext, items: Sequence[dict[str, Any]], registry: Registry) -> list[list[Violation]]:
    """Every violation of each item (same order as ``items``): its ``bank_item`` checks, then
    the ``bank_answer`` violations about it (a mistake that repeats an earlier one is reported on
    the later item)."""
    per = [registry.run("bank_item", BankItem(ctx, it, i)) for i, it in enumerate(items)]
    for v in registry.run("bank_answer", BankAnswer(ctx, items)):
        per[v.item].append(v)
    return per


def _context(ex: Example) -> BankContext:
    """The :class:`BankContext` of an example: ``sources``, ``actions``, ``successes`` (one
    action list per successful trajectory, or ``observations`` too as ``[actions, observations]``),
    ``category``, ``bounds``, ``examples``, ``prompt`` (the fixed prompt text) and ``quality``."""
    c = ex.context
    wins = [example_trajectory(Example(ex.target, "", True, ex.env, "", {**_trajectory(w), "category": c.get("category", "")}))
            for w in c.get("successes", ())]
    return BankContext(ex.kind or "general", QualityConfig(**c.get("quality", {})), echo.prompt_words([c.get("prompt", "")]),
                       tuple(c.get("sources", ())), tuple(c.get("actions", ())), wins, c.get("category", ""),
                       dict(c.get("bounds", {})), tuple(c.get("examples", ())), ex.env)


def _trajectory(w: Any) -> dict[str, Any]:
    return {"actions": w["actions"], "observations": w.get("observations", [])} if isinstance(w, dict) else {"actions": w}


#: Who judges bank items: pipeline.bank.judge.ItemJudge, for the skills stage and skill evolution.
SKILLS_STAGES = "skills; skill evolution during GRPO (pipeline.bank.evolving)"
TARGETS = (Target("bank_item", "one skill (title, principle, when-to-apply) or common mistake (description, why "
                               "it happens, how to avoid), with the memories and successes of its call",
                  lambda ex: BankItem(_context(ex), dict(ex.output), 0), SKILLS_STAGES,
                  ("pipeline.quality.targets.bank.judge_items",)),
           Target("bank_answer", "every item of one skills answer",
                  lambda ex: BankAnswer(_context(ex), [dict(x) for x in ex.output]), SKILLS_STAGES,
                  ("pipeline.quality.targets.bank.judge_items",)))


"""The content rules of skill-bank items, judged one item at a time.

A skills answer holds several items (skills or common mistakes). Judging the answer as a whole
lost every good skill of a call to one bad one; here each item gets its own verdict, so the
skills stage keeps the good items of an answer and quarantines the others, each with its rule
(:mod:`pipeline.stages.skills`), and skill evolution during GRPO applies the same rules
(:mod:`pipeline.bank.evolving`). An answer whose every item breaks a rule is rejected as a whole,
so the client's repair round asks the model again.

The rules are the checks of targets ``bank_item`` (each item: the form of its text, then what it
means) and ``bank_answer`` (rules that compare items: ``duplicate_mistake``, ``off_topic``) of
the content-rule registry, in their registry order (:mod:`pipeline.quality.targets.bank_checks`;
the reference: ``docs/content_rules.md``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pipeline import quality
from pipeline.quality.registry import Registry
from pipeline.quality.rulebook import REGISTRY
from pipeline.quality.targets.bank import MISTAKE_FIELDS, SKILL_FIELDS, BankContext, judge_items
from pipeline.quality.violation import Violation

__all__ = ["ItemJudge", "MISTAKE_FIELDS", "SKILL_FIELDS", "blocking", "field_bounds"]


def field_bounds(schema: dict[str, Any]) -> dict[str, int]:
    """``{field: maxLength}`` of the item schema inside an answer schema (``{"skills": {"items":
    ...}}`` or a bare array); ``{}`` when it has none."""
    node = schema
    if node.get("type") == "object":
        node = next(iter(node.get("properties", {}).values()), {})
    props = (node.get("items") or {}).get("properties", {})
    return {k: v["maxLength"] for k, v in props.items() if isinstance(v, dict) and "maxLength" in v}


@dataclass
class ItemJudge(BankContext):
    """Verdicts on the items of one skills or mistakes answer: what they are judged against
    (the attributes of :class:`~pipeline.quality.targets.bank.BankContext`: kind, thresholds and
    policy, the prompt's words and worked examples, the memories' sources and actions, the
    successes, the category, the schema bounds, the env)."""

    def judge(self, items: Sequence[dict[str, Any]], registry: Registry | None = None) -> list[list[Violation]]:
        """Every rule's violations, per item (same order as ``items``), by the rules of
        ``registry`` (default :data:`pipeline.quality.rulebook.REGISTRY`). A mistake that
        repeats an earlier one (``duplicate_mistake``) is reported on the later item."""
        return judge_items(self, items, registry or REGISTRY)


def blocking(violations: Sequence[Violation], tally: quality.Tally) -> Violation | None:
    """The first violation whose rule quarantines under ``tally``'s policy (not counted)."""
    return next((v for v in violations if v.reason not in tally.flag_rules), None)

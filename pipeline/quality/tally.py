"""The policy gate of the content rules and the count of what each rejected."""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from pipeline.quality.catalog import RULES
from pipeline.quality.violation import Violation

_NAMES = frozenset(r.name for r in RULES)


def flagged_reasons(flag_rules: Iterable[str] = ()) -> set[str]:
    """The reasons only counted, never quarantined: ``flag_rules`` (``quality.flag_rules``) and
    every rule whose default policy is ``flag``."""
    return set(flag_rules) | {r.name for r in RULES if r.policy == "flag"}


def reason_of(error: str, detail: str) -> str:
    """Quarantine reason of a failed LLM result: the content rule's reason when the client's
    ``check_failed`` detail starts with one (``"ungrounded_step: ..."``), else ``error``
    (``schema_invalid``, ``length``, ... or ``llm_failed`` when empty)."""
    if error == "check_failed":
        head = (detail or "").split(":", 1)[0].strip()
        if head in _NAMES:
            return head
    return error or "llm_failed"


class Tally:
    """Counts of rule violations seen by one stage, and the policy gate.

    Args:
        flag_rules: reasons counted but not rejected (``quality.flag_rules``; with the rules
            whose default policy is ``flag``, :func:`flagged_reasons`); every other reason
            rejects the answer (policy quarantine).

    ``rejected`` counts answers rejected per reason (first answers and repairs, so a violation
    that the repair round fixed still shows); ``flagged`` counts violations let through.
    """

    def __init__(self, flag_rules: Iterable[str] = ()):
        self.flag_rules = flagged_reasons(flag_rules)
        self.rejected: Counter = Counter()
        self.flagged: Counter = Counter()
        self.repaired: Counter = Counter()  # fields fixed from the record (grounding.reground_steps)

    def gate(self, violations: Iterable[Violation]) -> str | None:
        """Count ``violations``; return the message of the first one whose rule quarantines, else None."""
        first = None
        for v in violations:
            if v.reason in self.flag_rules:
                self.flagged[v.reason] += 1
            elif first is None:
                first = v
        if first is not None:
            self.rejected[first.reason] += 1
            return first.message()
        return None

    def record(self, items: int, quarantined: Counter) -> dict[str, Any]:
        """Manifest record: ``{items, quarantined: {reason: n}, rate: {reason: n / items},
        rejected_answers: {...}, flagged: {...}, repaired: {field: n}}`` over the stage's ``items`` (rates rounded to 4
        places; only content-rule reasons of ``quarantined`` are listed)."""
        q = {r: n for r, n in sorted(quarantined.items()) if r in _NAMES}
        return {"items": items, "quarantined": q,
                "rate": {r: round(n / items, 4) if items else 0.0 for r, n in q.items()},
                "rejected_answers": dict(sorted(self.rejected.items())), "flagged": dict(sorted(self.flagged.items())),
                "repaired": dict(sorted(self.repaired.items()))}

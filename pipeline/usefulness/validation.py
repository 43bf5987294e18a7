"""Measuring a score and a set of rules against human labels.

Labels are ``helps`` / ``empty`` / ``harmful`` (``tests/data/usefulness/GUIDE.md``). The positive
class is ``helps``: the gate should keep exactly those. For each detector this module reports:

* ``auroc``: the chance that a random ``helps`` item scores above a random other item
  (scikit-learn's ``roc_auc_score``); also ``auroc_harmful``, ``helps`` against ``harmful`` only;
* at a threshold (keep when score > threshold): ``precision`` of the kept items (share that
  help), ``recall`` of ``helps`` (share kept), and the same for catching bad items
  (``catch_precision``: share of the rejected that are empty or harmful; ``catch_recall``: share of
  the empty and harmful that are rejected);
* for rules, a *verdict* (rejected or not) stands in for the score.

:func:`rule_extras` weighs each rule by what it rejects that the score keeps, split by label.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

LABELS = ("helps", "empty", "harmful")


def auroc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """Area under the ROC curve of ``scores`` for the ``positive`` items; ``None`` when either
    class is empty. Ties count half (scikit-learn's definition)."""
    from sklearn.metrics import roc_auc_score
    if all(positive) or not any(positive):
        return None
    return float(roc_auc_score([int(p) for p in positive], list(scores)))


def confusion(kept: Sequence[bool], labels: Sequence[str]) -> dict[str, Any]:
    """Precision/recall of a keep decision against ``labels`` (module docstring), with counts."""
    helps = [lab == "helps" for lab in labels]
    tp = sum(k and h for k, h in zip(kept, helps))
    kept_n, helps_n = sum(kept), sum(helps)
    rejected = [not k for k in kept]
    caught = sum(r and not h for r, h in zip(rejected, helps))
    bad_n, rej_n = len(labels) - helps_n, sum(rejected)
    ratio = lambda a, b: round(a / b, 4) if b else None  # noqa: E731
    return {"kept": kept_n, "rejected": rej_n, "precision": ratio(tp, kept_n), "recall": ratio(tp, helps_n),
            "catch_precision": ratio(caught, rej_n), "catch_recall": ratio(caught, bad_n)}


def evaluate(scores: Sequence[float | None], rejected_by_rules: Sequence[bool], labels: Sequence[str],
             threshold: float) -> dict[str, Any]:
    """The report of one item kind: label counts, the score's AUROCs, and the keep decisions of the
    rules alone, the score alone (score > ``threshold``) and both (kept by both). An item without a
    score is kept by the score (it cannot be judged)."""
    helps = [lab == "helps" for lab in labels]
    have = [i for i, s in enumerate(scores) if s is not None]
    by_score = [s is None or s > threshold for s in scores]
    by_rules = [not r for r in rejected_by_rules]
    not_harmful = [i for i in have if labels[i] != "empty"]
    return {"n": len(labels), "labels": dict(Counter(labels)), "threshold": threshold,
            "auroc": _round(auroc([scores[i] for i in have], [helps[i] for i in have])),
            "auroc_harmful": _round(auroc([scores[i] for i in not_harmful], [helps[i] for i in not_harmful])),
            "rules": confusion(by_rules, labels), "score": confusion(by_score, labels),
            "both": confusion([a and b for a, b in zip(by_rules, by_score)], labels)}


def rule_extras(violations: Sequence[Sequence[str]], scores: Sequence[float | None], labels: Sequence[str],
                threshold: float) -> dict[str, dict[str, int]]:
    """Per rule reason: how many items it rejects (``hits``), and among those the ones the score
    would keep (``extra``, by label): what the rule adds to the score. ``violations[i]`` lists the
    reasons that reject item ``i``."""
    out: dict[str, dict[str, int]] = {}
    for reasons, s, lab in zip(violations, scores, labels):
        for r in set(reasons):
            rec = out.setdefault(r, {"hits": 0, "extra_helps": 0, "extra_empty": 0, "extra_harmful": 0})
            rec["hits"] += 1
            if s is None or s > threshold:
                rec[f"extra_{lab}"] += 1
    return dict(sorted(out.items()))


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)

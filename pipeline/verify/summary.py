"""The verify stage's counts as rows and text, for the places users look: the ``skillpipe run``
summary, the dataset card and the run report. Input: the ``counters`` of verify's manifest
(:class:`pipeline.stages.verify.Tally`)."""
from __future__ import annotations

from typing import Any

#: Verdict columns shown per source, in order.
COLUMNS = ("trajectories", "valid", "cut", "demoted", "quarantined", "failure", "unchecked")


def source_rows(counters: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per source (``env/source_format``): the verdict counts of :data:`COLUMNS` and
    ``rules`` (steps per rule, largest first, as ``"rule n"`` text)."""
    out = []
    for source, c in sorted((counters.get("by_source") or {}).items()):
        rules = sorted((c.get("rules") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
        out.append({"source": source, **{k: c.get(k, 0) for k in COLUMNS},
                    "rules": ", ".join(f"{r} {n}" for r, n in rules) or "-"})
    return out


def rule_rows(counters: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per ``checker.rule`` that fired: steps and trajectories."""
    return [{"rule": r, "steps": c.get("steps", 0), "trajectories": c.get("trajectories", 0)}
            for r, c in sorted((counters.get("by_rule") or {}).items())]


def headline(counters: dict[str, Any]) -> str:
    """One sentence: how many trajectories were valid, cut, demoted, unchecked."""
    return (f"verify: {counters.get('valid', 0)} valid, {counters.get('cut', 0)} with refused steps cut "
            f"({counters.get('cut_steps', 0)} steps), {counters.get('demoted', 0)} successes demoted to failures "
            f"(off the SFT path), {counters.get('failure', 0)} recorded failures, {counters.get('unchecked', 0)} "
            f"unchecked; {counters.get('outcome_verified', 0)} outcomes verified, "
            f"{counters.get('repaired_steps', 0)} names repaired")


def card_section(counters: dict[str, Any] | None) -> str:
    """The dataset card's ``Environment rules (verify)`` section (Markdown)."""
    lines = ["## Environment rules (verify)", ""]
    if not counters:
        return "\n".join(lines + ["This run has no verify artifact: its trajectories were not checked against "
                                  "their environments' rules.", ""])
    lines += [headline(counters) + ".", "", "| source | " + " | ".join(COLUMNS) + " | findings (steps per rule) |",
              "|---|" + "---|" * len(COLUMNS) + "---|"]
    lines += [f"| {r['source']} | " + " | ".join(str(r[k]) for k in COLUMNS) + f" | {r['rules']} |"
              for r in source_rows(counters)]
    reasons = counters.get("demoted_reasons") or {}
    if reasons:
        lines += ["", "Demoted (first rule broken): " + ", ".join(f"{k} {v}" for k, v in reasons.items())
                  + ". No SFT pair comes from a demoted trajectory or from a refused step."]
    return "\n".join(lines + [""])

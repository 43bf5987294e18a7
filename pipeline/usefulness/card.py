"""The dataset card's "Usefulness" section: how the exported thinks and bank items scored.

A text histogram of the think gains (:func:`histogram`), the gate's counts from the
``usefulness`` stage's manifest, and each bank item's score with its 95 % interval and sample
size, lowest first, so a reader sees at a glance what the gate kept and how close it was.
"""
from __future__ import annotations

from typing import Any

#: Bin edges of the think-gain histogram: gains lie in [-1, 1], most near 0.
EDGES = (-1.0, -0.2, -0.1, -0.05, 0.0, 0.05, 0.1, 0.2, 1.0)
BAR = 30


def histogram(values: list[float], edges: tuple[float, ...] = EDGES) -> list[tuple[str, int]]:
    """``[(label, count)]`` of ``values`` in the half-open bins ``(edges[i], edges[i+1]]`` (the
    first bin also takes ``edges[0]``); values outside the edges fall in the nearest end bin."""
    counts = [0] * (len(edges) - 1)
    for v in values:
        i = next((j for j in range(len(edges) - 1) if v <= edges[j + 1]), len(edges) - 2)
        counts[i] += 1
    return [(f"({edges[j]:+.2f}, {edges[j + 1]:+.2f}]", c) for j, c in enumerate(counts)]


def _bars(hist: list[tuple[str, int]]) -> list[str]:
    top = max((c for _, c in hist), default=0) or 1
    return [f"    {label:>16} {c:4d} {'#' * round(BAR * c / top)}" for label, c in hist]


def _capped(u: dict[str, Any]) -> bool:
    """Whether the action-set check capped this score (its method ends ``+actionset``)."""
    return "+actionset" in str(u.get("method") or "")


def bank_lines(bank_rows: list[dict[str, Any]]) -> list[str]:
    """One table row per scored bank item, lowest score first: kind, title, score (marked when the
    action-set check capped it), the gain's 95 % interval, n."""
    scored = sorted((r for r in bank_rows if r.get("usefulness")), key=lambda r: r["usefulness"]["score"])
    if not scored:
        return ["No bank item was scored."]
    lines = ["| item | kind | score | 95 % interval | held-out steps |", "|---|---|---|---|---|"]
    for r in scored:
        u = r["usefulness"]
        name = (r.get("title") or r.get("description") or "")[:60].replace("|", "/")
        # a capped item scores below its gain's interval: say why
        capped = " (capped: asks for actions the env lacks)" if _capped(u) else ""
        lines.append(f"| {name} | {r['kind']} | {u['score']:+.3f}{capped} | [{u['lo']:+.3f}, {u['hi']:+.3f}] | "
                     f"{u['n']} |")
    if any(_capped(r["usefulness"]) for r in scored):
        lines += ["", "The interval is that of the mean gain; a capped item's score is minus the share of its "
                      "actions the environment does not offer."]
    return lines


def usefulness_card(rows: list[dict[str, Any]], bank_rows: list[dict[str, Any]], counts: dict[str, Any],
                    cfg: Any) -> str:
    """The card section (module docstring) for exported pairs ``rows``, the bank ``bank_rows``, the
    ``usefulness`` stage's manifest ``counts`` and the ``usefulness`` config ``cfg``."""
    gains = [r["usefulness"]["gain"] for r in rows if r.get("usefulness")]
    lines = ["## Usefulness", ""]
    if cfg.policy == "off":
        return "\n".join(lines + ["The usefulness gate is off (`usefulness.policy: off`): nothing was scored.", ""])
    gated = (counts.get("quarantine_reasons") or {}).get("no_gain", 0)
    lines += [f"Thinks: {len(gains)} exported thinks carry a score (gain of the expert action's share over "
              f"an empty think); the gate ({cfg.policy}, threshold {cfg.think_threshold:+.2f}) quarantined "
              f"{gated}. Histogram of the exported gains:", ""]
    lines += _bars(histogram(gains)) if gains else ["    (no scored think)"]
    lines += ["", f"Bank items (threshold {cfg.skill_threshold:+.2f}), lowest score first:", ""]
    return "\n".join(lines + bank_lines(bank_rows) + [""])

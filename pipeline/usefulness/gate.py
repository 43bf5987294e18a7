"""The usefulness gate of bank items, as the skills stage and skill evolution run it.

:func:`gate_bank` scores one environment's bank items (:mod:`pipeline.usefulness.bank`) on
held-out expert steps: the run's verified successes that made none of the items, then the
environment's shipped probe set (:mod:`pipeline.usefulness.heldout`). Each item gets its
``usefulness`` record; by ``usefulness.policy``:

* ``quarantine`` (default): an item whose score is at or below ``usefulness.skill_threshold`` leaves
  the bank with reason ``no_measured_gain`` (its row is kept in the quarantine with the score);
* ``flag``: it stays, scored, and is counted;
* ``off``: nothing is scored.

An item that no held-out step applies to (no expert step of its env, or of its category) stays
unscored (``usefulness`` null) and is counted ``unmeasured``: the gate cannot say it does not help.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from pipeline.core.records import QuarantineRow
from pipeline.usefulness import SCORE_VERSION

REASON = "no_measured_gain"


def heldout_pool(env: str, own: Sequence[Any]) -> list[Any]:
    """Held-out candidates of ``env``: the run's own verified successes ``own`` of that env, then the
    shipped probe trajectories (module docstring)."""
    from pipeline.usefulness.heldout import probe_trajectories
    return [t for t in own if t.env == env] + list(probe_trajectories(env))


def gate_bank(items: list[dict[str, Any]], own: Sequence[Any], cfg: Any, messages_of: Callable,
              scorer_factory: Callable[[], Any], scorer_name: str, stage: str
              ) -> tuple[list[dict[str, Any]], list[QuarantineRow], dict[str, Any]]:
    """Score and gate one env's bank ``items`` (module docstring).

    Args:
        own: the run's verified successful trajectories (any env; filtered here).
        cfg: the ``usefulness`` config section.
        messages_of: ``step -> [system, user]`` scorer prompt of a held-out step.
        scorer_factory: opens the scorer (called only when there is something to score).
        scorer_name: the scorer's id, stored with each score.
        stage: the stage name of the quarantine rows.

    Returns ``(kept items, quarantine rows, record)``; ``record`` holds the counts, the whole bank's
    gain against no bank (mean, interval, steps) and the scoring's wall time in seconds (``wall_s``,
    the scorer's loading included).
    """
    import time
    from pipeline.usefulness.bank import interval, plan_steps, score_items

    t0 = time.monotonic()
    if cfg.policy == "off" or not items:
        return items, [], {"scored": 0}
    env = items[0].get("env") or ""
    steps = plan_steps(items, heldout_pool(env, own), cfg.heldout_steps, cfg.max_candidates)
    if not steps:
        return items, [], {"scored": 0, "unmeasured": len(items), "steps": 0}
    scores, bank = score_items(scorer_factory(), items, steps, messages_of)
    kept, dropped, gated = [], [], 0
    for it, s in zip(items, scores):
        if s is None:
            kept.append(it)
            continue
        it = {**it, "usefulness": {"score": s.score, "n": s.n, "lo": s.lo, "hi": s.hi, "method": s.method,
                                   "scorer": scorer_name, "version": SCORE_VERSION}}
        if s.score > cfg.skill_threshold or cfg.policy == "flag":
            gated += s.score <= cfg.skill_threshold
            kept.append(it)
        else:
            dropped.append(QuarantineRow(stage=stage, reason=REASON, item_id=it["skill_id"],
                                         detail=f"{it['kind']} {(it.get('title') or it.get('description') or '')[:60]!r}: "
                                                f"score {s.score:+.3f} [{s.lo:+.3f}, {s.hi:+.3f}] over {s.n} held-out "
                                                f"steps <= usefulness.skill_threshold {cfg.skill_threshold:+.3f}",
                                         raw=json.dumps(it, ensure_ascii=False, sort_keys=True)))
    mean, lo, hi = interval(bank) if bank else (0.0, 0.0, 0.0)
    record = {"scored": sum(s is not None for s in scores), "unmeasured": sum(s is None for s in scores),
              "quarantined": len(dropped), "flagged": gated, "steps": len(steps),
              "bank_vs_none": {"gain": round(mean, 4), "lo": round(lo, 4), "hi": round(hi, 4), "n": len(bank),
                               "improved": sum(g > 0 for g in bank)},
              "wall_s": round(time.monotonic() - t0, 2)}
    return kept, dropped, record


def evolution_gate(policy: str, pcfg: Any, cfg: Any = None) -> Callable:
    """``rows -> (kept, quarantine rows)``: :func:`gate_bank` for the skills GRPO's updater adds
    (stage ``skill_evolution``), with ``policy`` as ``usefulness.policy`` and the run's prompt
    ``pcfg``; the held-out steps are the env's shipped probe set (the updater's failures are no
    expert steps). The scorer is opened on the first call that has something to score."""
    import dataclasses
    from pipeline.core.usefulness_config import UsefulnessConfig
    from pipeline.usefulness.bank import step_messages
    from pipeline.usefulness.load import open_scorer, scorer_id
    ucfg = dataclasses.replace(cfg or UsefulnessConfig(), policy=policy)
    held: dict[str, Any] = {}

    def factory():
        held["scorer"] = held.get("scorer") or open_scorer(ucfg)
        return held["scorer"]

    def gate(rows: list[dict[str, Any]]):
        kept, dropped, _ = gate_bank(rows, [], ucfg, lambda step: step_messages(step, pcfg), factory,
                                     scorer_id(ucfg.scorer), "skill_evolution")
        return kept, dropped
    return gate

"""Stage ``verify``: check every trajectory against its environment's rules before it can teach.

The stages before it check a trajectory's form; this one checks that the environment would have
produced it. Each trajectory of ``remove_loops`` goes to the first checker of
:mod:`pipeline.verify` that applies (ALFWorld state rules, WebShop pages, Search/QA answers,
SkillRL admissible lists, TextWorld Express replay, or a user's checker) and
:func:`pipeline.verify.policy.decide` applies ``verify:`` to the verdict. Every trajectory's
metadata gets ``verify``: the checker, the verdict (``valid``, ``cut``, ``demoted``, ``flagged``,
``failure``, ``unchecked``), one code per step (``ok`` or the rules it breaks), the findings with
step index, rule, kind and explanation, and the steps cut and names repaired.

**Leaving the SFT path without leaving the run.** A success with an impossible step or an
unreached goal is not a demonstration, but it is still a real failure to learn from. By default
(``on_flagged: demote``) it stays a row of this artifact with ``outcome: failure`` and
``outcome_source: verified`` (the old outcome under metadata ``verify_demoted_from``): memory
writes its mistakes, skills' common mistakes learn from it, and distill quarantines it as
``not_success`` like every failure, so no SFT pair is built from it. Why it left is one row of
``verify/_quarantine`` (reason = the first acting rule in step order; detail = every finding
with its step and source line), which is a *demotion record* (``kind: demotion``), not a unit:
the trajectory is counted in ``out``, so units in = out + quarantined holds, and the manifest
counts the demotions (``counts.quarantine_kinds.demotion``; ``counters.demoted``,
``demoted_reasons``). Only ``on_flagged: quarantine`` and trajectories
that cannot be checked at all (``malformed_trajectory``: a row that is not a trajectory;
``verify_error``: the checker raised) are quarantined units.

Counters (manifest ``counters``, the ``make run`` summary, the dataset card, the report):
``by_source`` (``env/source_format``: trajectories and each verdict, findings per rule) and
``by_rule`` (``checker.rule``: steps and trajectories), plus ``cut_steps``, ``repaired_steps``,
``outcome_verified`` and ``unchecked``. Units: trajectories.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pipeline.core.config import to_dict
from pipeline.core.records import TRAJECTORY_SCHEMA, QuarantineRow, Trajectory
from pipeline.stage.stage import Stage, StageContext, StageOutput, reject
from pipeline.verify import checker_classes, checker_for
from pipeline.verify.policy import Decision, decide

NAME = "verify"
VERDICTS = ("valid", "cut", "demoted", "quarantined", "flagged", "failure", "unchecked")


class Tally:
    """The stage's counters (module docstring), filled one decision at a time."""

    def __init__(self) -> None:
        self.by_source: dict[str, Counter] = {}
        self.rules_by_source: dict[str, Counter] = {}
        self.by_rule: dict[str, Counter] = {}
        self.totals: Counter = Counter()
        self.demoted_reasons: Counter = Counter()

    def add(self, source: str, d: Decision, checker: str) -> None:
        """Count decision ``d`` of a trajectory from ``source`` checked by ``checker``."""
        self.by_source.setdefault(source, Counter()).update({"trajectories": 1, d.action: 1})
        rules = Counter(f.rule for f in d.findings + d.flags) + Counter(r for c in d.cut for r in c["rules"])
        for rule, n in rules.items():
            key = f"{checker}.{rule}"
            self.by_rule.setdefault(key, Counter()).update({"steps": n, "trajectories": 1})
            self.rules_by_source.setdefault(source, Counter())[rule] += n
        if rules:
            self.by_source[source]["with_findings"] += 1
        self.totals.update({"cut_steps": len(d.cut), "repaired_steps": len(d.repairs),
                            "outcome_verified": int(d.verified), d.action: 1})
        if d.action == "demoted":
            self.demoted_reasons[d.findings[0].rule] += 1

    def counters(self) -> dict[str, Any]:
        """JSON-ready counters for the manifest."""
        return {**{k: self.totals.get(k, 0) for k in (*VERDICTS, "cut_steps", "repaired_steps", "outcome_verified")},
                "demoted_reasons": dict(sorted(self.demoted_reasons.items())),
                "by_source": {s: {**dict(sorted(c.items())), "rules": dict(sorted(self.rules_by_source.get(s, {}).items()))}
                              for s, c in sorted(self.by_source.items())},
                "by_rule": {r: dict(sorted(c.items())) for r, c in sorted(self.by_rule.items())}}


def findings_text(d: Decision) -> str:
    """Every acting finding as ``step N (line L) rule: explanation``, joined by ``; ``."""
    lines = {s.index: s.line for s in d.traj.steps}
    return "; ".join(f"step {f.index}{f' (line {lines[f.index]})' if lines.get(f.index) else ''} {f.rule}: {f.detail}"
                     for f in d.findings)


def _left_row(d: Decision, raw_row: dict[str, Any], reason_prefix: str, kind: str = "unit") -> QuarantineRow:
    """The quarantine row of a trajectory that left the SFT path (a ``unit``, or a ``demotion`` record)."""
    first = d.findings[0]
    line = next((s.line for s in d.traj.steps if s.index == first.index and s.line), d.traj.source_line)
    raw = json.dumps({"findings": [f.to_dict() for f in d.findings], "trajectory": raw_row}, ensure_ascii=False,
                     default=str)
    return reject(NAME, first.rule, reason_prefix + findings_text(d), d.traj.trajectory_id, raw,
                  d.traj.source_uri, line, kind=kind)


def _malformed(row: Any, why: str) -> QuarantineRow:
    get = row.get if isinstance(row, dict) else (lambda k, default=None: default)
    return reject(NAME, "malformed_trajectory", why, str(get("trajectory_id", "") or ""),
                  json.dumps(row, ensure_ascii=False, default=str), str(get("source_uri", "") or ""),
                  get("source_line"))


def to_trajectory(row: Any) -> Trajectory | str:
    """The trajectory of an upstream row, or why it is not one (shape checks a checker relies on:
    at least the reset step, step indices 0..n-1, text actions after the reset)."""
    try:
        traj = Trajectory.from_row(row)
    except (TypeError, KeyError, ValueError, AttributeError) as e:
        return f"not a trajectory row: {type(e).__name__}: {e}"
    if not traj.steps:
        return "no steps (not even the reset observation)"
    if [s.index for s in traj.steps] != list(range(len(traj.steps))):
        return f"step indices {[s.index for s in traj.steps][:10]} are not 0..{len(traj.steps) - 1}"
    bad = [s.index for s in traj.steps[1:] if not isinstance(s.action, (str, type(None)))
           or not isinstance(s.observation, (str, type(None)))]
    return f"steps {bad[:10]} have a non-text action or observation" if bad else traj


def verify_row(row: Any, checkers: list, ctx_cfg, options: dict[str, Any], tally: Tally
               ) -> tuple[dict | None, QuarantineRow | None, QuarantineRow | None]:
    """``(row to write, quarantine unit, demotion record)`` for one upstream row; never raises."""
    traj = to_trajectory(row)
    if isinstance(traj, str):
        return None, _malformed(row, traj), None
    checker = checker_for(traj, checkers)
    try:
        d = decide(traj, checker, ctx_cfg, options)
    except Exception as e:  # one trajectory a checker cannot read costs that trajectory, not the run
        return None, reject(NAME, "verify_error", f"checker {checker.name if checker else '-'} raised "
                            f"{type(e).__name__}: {e}", traj.trajectory_id, json.dumps(row, ensure_ascii=False,
                                                                                          default=str),
                            traj.source_uri, traj.source_line), None
    tally.add(f"{traj.env}/{traj.source_format}", d, checker.name if checker else "none")
    if d.action == "quarantined":
        return None, _left_row(d, row, "quarantined (verify.on_flagged: quarantine): "), None
    demotion = _left_row(d, row, f"demoted to failure: left the SFT path, kept for memory and skills as a "
                                 f"failure ({traj.outcome} -> failure): ", "demotion") \
        if d.action == "demoted" else None
    return d.traj.to_row(), None, demotion


class Verify(Stage):
    """Check each trajectory against its environment's rules (module docstring)."""
    name = NAME
    inputs = ("remove_loops",)
    schema = TRAJECTORY_SCHEMA
    config_sections = ("verify", "parse")  # parse: success_threshold decides a WebShop purchase's outcome
    sharded = True  # one trajectory at a time: runs per shard

    def run(self, ctx: StageContext) -> StageOutput:
        """One verdict per trajectory; counts: in = out + quarantined (demotions are records, not units)."""
        cfg = ctx.config.verify
        options = {**to_dict(cfg), "success_threshold": ctx.config.parse.success_threshold}
        checkers = [cls() for cls in checker_classes() if cfg.textworld_replay or cls.name != "textworld"]
        upstream = ctx.upstream("remove_loops").read_rows()
        rows, quarantine, tally = [], [], Tally()
        try:
            for row in upstream:
                out, qrow, demotion = verify_row(row, checkers, cfg, options, tally)
                if out is not None:
                    rows.append(out)
                if qrow is not None:
                    quarantine.append(qrow)
                if demotion is not None:  # a record beside the units (written after them)
                    quarantine.append(demotion)
        finally:
            for c in checkers:
                c.close()
        return StageOutput(rows, quarantine, rows_in=len(upstream), counters=tally.counters())


STAGE = Verify()

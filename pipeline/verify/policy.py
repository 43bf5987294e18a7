"""What the verify stage does with one trajectory's verdict (config section ``verify:``).

:func:`decide` turns a trajectory and its checker into a :class:`Decision`: the row to write
(``None`` when the trajectory is quarantined), the per-step verdicts and findings recorded in
its metadata under ``verify``, and what happened, in this order:

1. rules in ``verify.disabled_rules`` are dropped, those in ``verify.flag_rules`` are recorded
   as flags only; the rest *act*;
2. ``verify.repair_names``: a finding with a repair (a mis-spaced receptacle name that matches
   exactly one room name) has its action replaced, the trajectory is checked again, and each
   repair is recorded (``verify.repairs``);
3. a success whose acting findings are all of kind ``rejected`` (the environment refused the
   step and the record says so) has those steps cut with their observations
   (``verify.rejected_steps = cut``), if the cut trajectory then checks clean: a refused step
   changed nothing, so the rest is a real episode; the cut steps' original indices join
   ``removed_step_indices`` and ``verify.cut``;
4. a success with acting findings left *leaves the SFT path* (``verify.on_flagged``): ``demote``
   rewrites its outcome to ``failure`` (``outcome_source: verified``; an assumed reward becomes
   0) so that distill quarantines it as ``not_success`` and memory and skills learn from it as a
   failure; ``quarantine`` drops it; ``flag`` keeps it as it was;
5. a success the checker confirms, whose outcome was ``assumed`` by the reader, becomes
   ``outcome_source: verified``.

A failure keeps its outcome; its findings are recorded and counted.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from pipeline.core.config import VerifyConfig
from pipeline.core.records import Trajectory
from pipeline.verify.base import Checker, Finding, Verdict

VERIFIED = "verified"


@dataclass
class Decision:
    """The outcome of :func:`decide` for one trajectory.

    ``action``: ``valid`` (checked, nothing acts), ``cut`` (rejected steps cut, still a success),
    ``demoted``, ``quarantined``, ``flagged`` (findings act but ``on_flagged: flag``),
    ``failure`` (a recorded failure, findings recorded) or ``unchecked``.
    """
    traj: Trajectory
    action: str
    findings: list[Finding] = field(default_factory=list)   # acting findings (of the final check)
    flags: list[Finding] = field(default_factory=list)
    cut: list[dict[str, Any]] = field(default_factory=list)
    repairs: list[dict[str, Any]] = field(default_factory=list)
    verified: bool = False                                 # outcome_source became "verified"


def _rule_set(names: list, checker: str) -> set[str]:
    return {n for n in map(str, names) if "." not in n} | \
        {n.split(".", 1)[1] for n in map(str, names) if n.startswith(checker + ".")}


def split_findings(verdict: Verdict, cfg: VerifyConfig) -> tuple[list[Finding], list[Finding]]:
    """``(acting, flags)`` of ``verdict`` after ``disabled_rules`` and ``flag_rules``."""
    off, flag = _rule_set(cfg.disabled_rules, verdict.checker), _rule_set(cfg.flag_rules, verdict.checker)
    kept = [f for f in verdict.findings if f.rule not in off]
    return [f for f in kept if f.rule not in flag], [f for f in kept if f.rule in flag]


def _meta(traj: Trajectory) -> dict[str, Any]:
    try:
        meta = json.loads(traj.metadata or "{}")
    except ValueError:
        meta = {"unparsed_metadata": traj.metadata}
    return meta if isinstance(meta, dict) else {"metadata": meta}


def repair(traj: Trajectory, acting: list[Finding]) -> tuple[Trajectory, list[dict[str, Any]]]:
    """``traj`` with every repairable finding's action replaced, and the repairs made."""
    fixes = {f.index: f for f in acting if f.repair}
    if not fixes:
        return traj, []
    steps = [replace(s, action=fixes[s.index].repair) if s.index in fixes else s for s in traj.steps]
    done = [{"index": i, "rule": f.rule, "from": traj.steps[i].action, "to": f.repair} for i, f in sorted(fixes.items())]
    return replace(traj, steps=steps), done


def cut_steps(traj: Trajectory, indices: set[int]) -> tuple[Trajectory, list[int]]:
    """``traj`` without the steps at ``indices`` (positions = ``Step.index``), renumbered, and
    their original (parse) indices, which join ``removed_step_indices``. Reader annotations
    ``invalid_actions`` follow their steps (entries of cut steps are dropped)."""
    removed = set(traj.removed_step_indices)
    original = [i for i in range(len(traj.steps) + len(removed)) if i not in removed]
    new_pos: dict[int, int] = {}
    steps = []
    for s in traj.steps:
        if s.index not in indices:
            new_pos[s.index] = len(steps)
            steps.append(replace(s, index=len(steps)))
    gone = sorted(original[i] for i in indices if i < len(original))
    meta = _meta(traj)
    if meta.get("invalid_actions"):
        meta["invalid_actions"] = [{**e, "index": new_pos[e["index"]]} for e in meta["invalid_actions"]
                                   if e.get("index") in new_pos]
    return replace(traj, steps=steps, removed_step_indices=sorted(removed | set(gone)),
                   metadata=json.dumps(meta, ensure_ascii=False, sort_keys=True)), gone


def decide(traj: Trajectory, checker: Checker | None, cfg: VerifyConfig, options: dict[str, Any]) -> Decision:
    """Check ``traj`` with ``checker`` and apply the policy (module docstring). Exceptions of the
    checker propagate (the stage quarantines the trajectory as ``verify_error``)."""
    if checker is None:
        return _record(Decision(traj, "unchecked"), Verdict("", checked=False, note=(
            f"no checker applies to env {traj.env!r} from {traj.source_format!r}")))
    verdict = checker.check(traj, options)
    if not verdict.checked:
        return _record(Decision(traj, "unchecked"), verdict)
    acting, flags = split_findings(verdict, cfg)
    fixes: list[dict[str, Any]] = []
    if cfg.repair_names and any(f.repair for f in acting):
        traj, fixes = repair(traj, acting)
        verdict = checker.check(traj, options)
        acting, flags = split_findings(verdict, cfg)
    if not traj.success:
        return _record(Decision(traj, "failure", acting, flags, repairs=fixes), verdict)
    if acting and cfg.rejected_steps == "cut" and all(f.kind == "rejected" for f in acting):
        cut = _try_cut(traj, acting, flags, checker, cfg, options)
        if cut is not None:
            shorter, done, again, later_flags = cut
            # the re-check's flags: they name the steps of the shorter trajectory
            return _record(Decision(shorter, "cut", [], later_flags, cut=done, repairs=fixes), again)
    if acting:
        return _record(_leave_sft_path(traj, acting, flags, fixes, cfg), verdict)
    return _record(Decision(traj, "valid", [], flags, repairs=fixes), verdict)


def _try_cut(traj: Trajectory, acting: list[Finding], flags: list[Finding], checker: Checker, cfg: VerifyConfig,
             options: dict[str, Any]) -> tuple[Trajectory, list[dict[str, Any]], Verdict, list[Finding]] | None:
    """``(trajectory without its rejected steps, the cut steps with every rule found there, its
    new verdict, its flags)`` when it then checks clean (no acting finding); else ``None``."""
    indices = {f.index for f in acting}
    if 0 in indices or len(indices) >= len(traj.steps) - 1:
        return None
    shorter, gone = cut_steps(traj, indices)
    verdict = checker.check(shorter, options)
    again, later_flags = split_findings(verdict, cfg)
    if again:
        return None
    rules: dict[int, list[str]] = {}
    for f in acting + [f for f in flags if f.index in indices]:
        rules.setdefault(f.index, []).append(f.rule)
    cut = [{"index": gi, "rules": rules[i], "action": traj.steps[i].action, "observation": traj.steps[i].observation}
           for gi, i in zip(gone, sorted(rules))]
    return shorter, cut, verdict, later_flags


def _leave_sft_path(traj: Trajectory, acting: list[Finding], flags: list[Finding], fixes: list[dict],
                    cfg: VerifyConfig) -> Decision:
    """A success with acting findings, by ``verify.on_flagged``."""
    if cfg.on_flagged == "flag":
        return Decision(traj, "flagged", acting, flags, repairs=fixes)
    if cfg.on_flagged == "quarantine":
        return Decision(traj, "quarantined", acting, flags, repairs=fixes)
    meta = _meta(traj)
    assumed = meta.get("outcome_source") == "assumed"
    meta["verify_demoted_from"] = {"outcome": traj.outcome, "reward": traj.reward,
                                   "outcome_source": meta.get("outcome_source")}
    meta["outcome_source"] = VERIFIED
    steps = traj.steps
    if assumed:  # the reader's reward was assumed with the outcome
        steps = steps[:-1] + [replace(steps[-1], reward=0.0)]
    demoted = replace(traj, outcome="failure", reward=0.0 if assumed else traj.reward, steps=steps,
                      metadata=json.dumps(meta, ensure_ascii=False, sort_keys=True))
    return Decision(demoted, "demoted", acting, flags, repairs=fixes, verified=True)


def _record(d: Decision, verdict: Verdict) -> Decision:
    """``d`` with its trajectory's metadata ``verify`` written (and an assumed outcome verified)."""
    meta = _meta(d.traj)
    if d.action in ("valid", "cut") and verdict.goal_reached and meta.get("outcome_source") == "assumed":
        meta["outcome_source"] = VERIFIED
        d.verified = True
    by_step: dict[int, list[str]] = {}
    for f in d.findings + d.flags:
        by_step.setdefault(f.index, []).append(f.rule)
    meta["verify"] = {
        "checker": verdict.checker, "checked": verdict.checked, "verdict": d.action,
        "goal_reached": verdict.goal_reached, "note": verdict.note,
        "steps": [",".join(by_step.get(s.index, [])) or "ok" for s in d.traj.steps],
        "findings": [f.to_dict() for f in d.findings], "flags": [f.to_dict() for f in d.flags],
        "cut": d.cut, "repairs": d.repairs,
    }
    d.traj = replace(d.traj, metadata=json.dumps(meta, ensure_ascii=False, sort_keys=True))
    return d

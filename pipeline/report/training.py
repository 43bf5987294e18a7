"""Training, evaluation and data-quality facts for the report.

Sources (all optional; each loader returns ``None``/``[]`` plus a note when absent):

* SFT: ``<run>/sft_fit/skillpipe_sft_manifest.json`` (``losses``, ``global_step``, config
  ``logging_steps``) and, for exact step numbers, the newest ``checkpoint-N/trainer_state.json``
  (transformers' ``log_history``);
* GRPO: ``<run>/grpo/grpo_log.jsonl`` (``sft/rl/grpo.py``: one ``train`` line per step with loss,
  KL, groups with rewards/advantages; one ``validation`` line per evaluation);
* eval: ``<run>/eval_<label>/summary.json`` (``sft/eval.py``: success rate, Wilson 95 % interval);
* data quality: the export manifest's quality metrics (``counters["quality_metrics"]``, written by
  ``pipeline.quality.metrics`` via export; also ``quality``/``data_quality``, top level or in counters);
* outcome experiment: ``<root>/outcome.json`` (``bench/outcome.py``: one entry per arm with its run
  id, eval summary and data figures), shown for the runs it names.
"""
from __future__ import annotations

import glob
import json
import math
import os
from typing import Any

from pipeline.core.layout import EVAL_PREFIX, EVAL_SUMMARY, GRPO_LOG, GRPO_STEP, SFT_MANIFEST, SFT_STEP
from pipeline.report.runinfo import read_json


def _checkpoint_history(sft_dir: str) -> list[dict[str, Any]]:
    def step_of(p: str) -> int:
        tail = os.path.basename(os.path.dirname(p)).rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else -1
    states = sorted(glob.glob(os.path.join(sft_dir, "checkpoint-*", "trainer_state.json")), key=step_of)
    if not states:
        return []
    state, _ = read_json(states[-1])
    return [h for h in (state or {}).get("log_history", []) if "loss" in h and "step" in h]


def sft_curve(run_dir: str) -> dict[str, Any]:
    """``{"steps": [int], "losses": [float], "global_step", "final_loss", "note"}`` of the run's SFT fit."""
    sft_dir = os.path.join(run_dir, SFT_STEP)
    m, why = read_json(os.path.join(sft_dir, SFT_MANIFEST))
    if not isinstance(m, dict):
        return {"steps": [], "losses": [], "note": f"no SFT fit for this run ({why})"}
    hist = _checkpoint_history(sft_dir)
    losses = [float(x) for x in m.get("losses") or []]
    if hist and len(hist) >= len(losses):
        steps, losses = [int(h["step"]) for h in hist], [float(h["loss"]) for h in hist]
    else:  # the manifest's losses were logged every logging_steps optimizer steps
        every = int((m.get("config") or {}).get("logging_steps") or 1)
        steps = [every * (i + 1) for i in range(len(losses))]
    return {"steps": steps, "losses": losses, "global_step": m.get("global_step"), "final_loss": m.get("final_loss"),
            "bank_versions": (m.get("export") or {}).get("bank_versions"), "note": "" if losses else
            "the SFT manifest records no logged loss"}


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _std(xs: list[float]) -> float | None:
    if not xs:
        return None
    mu = sum(xs) / len(xs)
    return math.sqrt(sum((x - mu) ** 2 for x in xs) / len(xs))


def grpo_steps(run_dir: str) -> dict[str, Any]:
    """Per GRPO step: loss, KL, mean reward, advantage mean/std/min/max, no-signal groups, success;
    plus validations and the no-signal groups themselves. ``{"steps", "validations", "no_signal", "note"}``.

    Advantage statistics are over every episode of the step (group-relative advantages, so the
    mean is ~0 by construction; the spread shows how much signal the step had).
    """
    path = os.path.join(run_dir, GRPO_STEP, GRPO_LOG)
    if not os.path.isfile(path):
        return {"steps": [], "validations": [], "no_signal": [], "note": f"no GRPO log for this run ({path})"}
    steps, vals, no_signal, bad = [], [], [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if e.get("kind") == "train":
                groups = e.get("groups") or []
                rewards = [float(r) for g in groups for r in g.get("rewards", [])]
                adv = [float(a) for g in groups for a in g.get("advantages", [])]
                steps.append({"step": e.get("step"), "loss": e.get("loss"), "kl": e.get("kl"),
                              "reward_mean": _mean(rewards), "adv_mean": _mean(adv), "adv_std": _std(adv),
                              "adv_min": min(adv) if adv else None, "adv_max": max(adv) if adv else None,
                              "groups": len(groups), "no_signal_groups": e.get("no_signal_groups", 0),
                              "success_rate": e.get("success_rate"), "wall_s": e.get("wall_s")})
                no_signal += [{"step": e.get("step"), "group_id": g.get("group_id"), "task": g.get("task"),
                               "rewards": g.get("rewards")} for g in groups if g.get("no_signal")]
            elif e.get("kind") == "validation":
                evo = e.get("evolution") or {}
                vals.append({"step": e.get("step"), "success_rate": e.get("success_rate"),
                             "episodes": e.get("episodes"), "bank_version": e.get("bank_version"),
                             "evolved_to": evo.get("version", "")})
    note = f"{bad} unreadable line(s) in {path}" if bad else ""
    return {"steps": steps, "validations": vals, "no_signal": no_signal, "note": note}


def _interval(d: dict[str, Any]) -> tuple[float | None, float | None]:
    for lo, hi in (("ci_low", "ci_high"), ("ci95_low", "ci95_high"), ("success_ci_low", "success_ci_high")):
        if d.get(lo) is not None and d.get(hi) is not None:
            return float(d[lo]), float(d[hi])
    for key in ("success_ci95", "ci95", "ci_95", "ci", "success_ci", "success_rate_ci"):
        v = d.get(key)
        if isinstance(v, (list, tuple)) and len(v) == 2:
            return float(v[0]), float(v[1])
        if isinstance(v, dict) and "low" in v and "high" in v:
            return float(v["low"]), float(v["high"])
    return None, None


def _eval_row(name: str, file: str, d: dict[str, Any]) -> dict[str, Any]:
    lo, hi = _interval(d)
    return {"name": name, "file": file, "success_rate": float(d["success_rate"]), "low": lo, "high": hi,
            "episodes": d.get("episodes", d.get("n")), "valid_action_rate": d.get("valid_action_rate"),
            "mean_steps": d.get("mean_steps")}


def eval_results(run_dir: str) -> dict[str, Any]:
    """Success rates with 95 % intervals from the run's eval artifacts ``<run>/eval*/``
    (``sft/eval.py``: ``summary.json`` with ``success_rate``, ``success_ci95`` and ``per_game``;
    without a ``summary.json``, any JSON object in the folder holding ``success_rate``).

    Returns ``{"rows": [{name, file, success_rate, low, high, episodes, valid_action_rate,
    mean_steps}], "note"}``: one row per evaluation, then one per game when it played several.
    """
    rows = []
    for folder in sorted(glob.glob(os.path.join(run_dir, EVAL_PREFIX + "*"))):
        if not os.path.isdir(folder):
            continue
        summary = os.path.join(folder, EVAL_SUMMARY)
        files = [summary] if os.path.isfile(summary) else sorted(glob.glob(os.path.join(folder, "*.json")))
        for path in files:
            d, _ = read_json(path)
            if not isinstance(d, dict) or "success_rate" not in d:
                continue
            rel = os.path.relpath(path, run_dir)
            label = str(d.get("label") or d.get("policy") or os.path.basename(folder))
            rows.append(_eval_row(label, rel, d))
            games = d.get("per_game") if isinstance(d.get("per_game"), dict) else {}
            if len(games) > 1:
                rows += [_eval_row(f"{label} / {g}", rel, v) for g, v in sorted(games.items())
                         if isinstance(v, dict) and "success_rate" in v]
            break
    return {"rows": rows, "note": "" if rows else "no eval results for this run (run `skillpipe eval`)"}


def flatten(d: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``[(dotted.key, scalar)]`` of a nested dict (lists of scalars kept as one value)."""
    if not isinstance(d, dict):
        return [(prefix, d)]
    out = []
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out += flatten(v, key) if isinstance(v, dict) else [(key, v)]
    return out


def quality_metrics(export_manifest: dict[str, Any] | None) -> dict[str, Any]:
    """``{"rows": [(metric, value)], "note"}`` from the export manifest (see module docstring)."""
    if not export_manifest:
        return {"rows": [], "note": "Not available: this run has no export artifact"}
    counters = export_manifest.get("counters") or {}
    for src in (export_manifest, counters):
        for key in ("quality", "quality_metrics", "data_quality"):
            if isinstance(src.get(key), dict) and src[key]:
                return {"rows": flatten(src[key]), "note": ""}
    return {"rows": [], "note": "Not available: the export manifest records no data-quality metrics "
                                "(computed by export from the evaluation work)"}


#: The outcome experiment's result file in the root that holds ``runs/`` (bench/outcome.py writes it).
OUTCOME_FILE = "outcome.json"


def _outcome_row(arm: dict[str, Any], run_id: str) -> dict[str, Any]:
    ev = arm.get("eval") if isinstance(arm.get("eval"), dict) else {}
    data = arm.get("data") if isinstance(arm.get("data"), dict) else {}
    lo, hi = _interval(ev) if ev else (None, None)
    return {"name": str(arm.get("name", "")), "label": str(arm.get("label", "")),
            "run_id": str(arm.get("run_id", "")), "this_run": arm.get("run_id") == run_id,
            "why": str(arm.get("why") or ""), "success_rate": ev.get("success_rate"), "wins": ev.get("wins"),
            "episodes": ev.get("episodes"), "low": lo, "high": hi, "valid_action_rate": ev.get("valid_action_rate"),
            "format_error_rate": ev.get("format_error_rate"), "mean_steps": ev.get("mean_steps"),
            "pairs": data.get("pairs"), "skill_use": data.get("skill_use"), "think_words": data.get("think_words"),
            "quarantine_distill": data.get("quarantine_distill"), "quarantine_pairs": data.get("quarantine_pairs")}


def outcome_arms(root: str, run_id: str) -> dict[str, Any]:
    """The arms of the outcome experiment side by side, when ``<root>/outcome.json`` names
    ``run_id`` as one arm's run: ``{"rows": [one per arm: name, label, run_id, this_run, why,
    success_rate, wins, episodes, low, high, valid_action_rate, format_error_rate, mean_steps, pairs,
    skill_use, think_words, quarantine_distill, quarantine_pairs], "where": the skills arm's
    citations or None, "verdict": [lines], "date", "commit", "machine", "game", "budget", "note"}``.
    ``rows`` is empty (with a note) when the file is missing, unreadable or about other runs."""
    empty = {"rows": [], "where": None, "verdict": [], "date": "", "commit": "", "machine": "", "game": "",
             "budget": {}}
    path = os.path.join(root, OUTCOME_FILE)
    doc, why = read_json(path)
    if doc is None:
        return {**empty, "note": f"no outcome experiment for this root ({why}; bench/outcome.py writes it)"}
    arms = doc.get("arms") if isinstance(doc, dict) else None
    if not isinstance(arms, list) or not all(isinstance(a, dict) for a in arms):
        return {**empty, "note": f"{path} has no list of arms"}
    if run_id not in {a.get("run_id") for a in arms}:
        return {**empty, "note": f"the outcome experiment in {path} is about other runs"}
    where = doc.get("where_skills_used")
    return {"rows": [_outcome_row(a, run_id) for a in arms], "where": where if isinstance(where, dict) else None,
            "verdict": [str(v) for v in doc.get("verdict") or []], "date": str(doc.get("date") or ""),
            "commit": str(doc.get("commit") or ""), "machine": str(doc.get("machine") or ""),
            "game": f"{doc.get('game', '')} ({doc.get('game_params', '')})",
            "budget": doc.get("budget") if isinstance(doc.get("budget"), dict) else {}, "note": ""}

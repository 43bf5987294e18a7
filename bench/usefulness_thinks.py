"""The thinks half of bench/usefulness_validate.py: score and rule verdicts of every labelled think.

``tests/data/usefulness/thinks.jsonl`` holds one labelled think per line (``trajectory_id``, ``k``
= the action it explains, 1-based as in SFT pairs, ``action``, ``think``, ``origin``, ``label``,
``reason``); ``trajectories.jsonl`` the trajectory rows they belong to. Per think the raw shares of
the expert action under the empty think, a task-restating think, the unmasked think and the
masked think are cached, so the score variants are computed without rescoring.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os


def _entries(traj, synth):
    from pipeline.stages.distill import step_entries
    return {e["step_index"]: e for e in step_entries(traj, synth)}


def think_raw(scorer, labelled: list[dict], trajs: dict, max_candidates: int) -> list[dict]:
    """Expert shares per think: ``[empty, task, unmasked, masked]`` and the candidate count."""
    from pipeline.core.config_base import PromptConfig
    from pipeline.prompts import render_step_messages, synthetic_done_admissible
    from pipeline.usefulness.candidates import step_candidates
    from pipeline.usefulness.mask import mask_think
    from pipeline.usefulness.score import suffix, variant
    from pipeline.verify.alfworld import replay
    pcfg = dataclasses.replace(PromptConfig(), skills=False)
    rooms, out = {}, []
    for r in labelled:
        t = trajs[r["trajectory_id"]]
        k = r["k"]
        synth = synthetic_done_admissible(t, 0) if k == len(t.steps) else None
        if t.env == "alfworld" and t.trajectory_id not in rooms:
            rooms[t.trajectory_id] = replay(t)
        cands = step_candidates(t, k, r["action"], synth, rooms.get(t.trajectory_id), max_candidates)
        texts = ["", f"I need to {t.task.rstrip('.')}.", r["think"], mask_think(r["think"], r["action"], t.env)]
        if len(cands) < 2:
            out.append({"id": r["id"], "candidates": len(cands), "expert": [1.0] * 4})
            continue
        res = scorer.shares(render_step_messages(t, k, "", pcfg, synth), [variant(x, t.env) for x in texts],
                            cands, suffix(t.env))
        out.append({"id": r["id"], "candidates": len(cands), "expert": [row[0] for row in res.shares]})
    return out


def think_scores(raw: list[dict]) -> dict[str, dict[str, float | None]]:
    """Score variants per think id: ``default`` (masked - empty: what the stage stores),
    ``logratio`` (log masked / empty), ``task`` (masked - task-restating think), ``unmasked``
    (unmasked - empty). A step with one candidate has no score."""
    out = {}
    for rec in raw:
        if rec["candidates"] < 2:
            out[rec["id"]] = {"default": None, "logratio": None, "task": None, "unmasked": None}
            continue
        empty, task, unmasked, masked = rec["expert"]
        out[rec["id"]] = {"default": masked - empty, "task": masked - task, "unmasked": unmasked - empty,
                          "logratio": math.log(max(masked, 1e-12) / max(empty, 1e-12))}
    return out


def think_rules(labelled: list[dict], trajs: dict) -> list[list[str]]:
    """Reasons the distill stage's content rules reject each think for (the think checked alone, as
    a one-step answer; recorded thoughts are not compared with the others)."""
    from pipeline.core.config import QualityConfig
    from pipeline.prompts import synthetic_done_admissible
    from pipeline.stages.distill import think_violations
    qcfg, out = QualityConfig(), []
    for r in labelled:
        t = trajs[r["trajectory_id"]]
        synth = synthetic_done_admissible(t, 0) if r["k"] == len(t.steps) else None
        i = r["k"] - 1
        found = think_violations([{"step_index": i, "think": r["think"]}], _entries(t, synth), t, qcfg,
                                 max_chars=None)
        out.append(sorted({v.reason for v in found}))
    return out


def raw_cached(a, scorer, items: list[dict], trajs: dict) -> dict[str, dict]:
    """Raw shares per think id, from ``--cache`` where scored before (same scorer, candidates and
    text), the rest scored now and added to the cache."""
    path = os.path.join(a.cache, f"thinks-{os.path.basename(a.scorer.rstrip('/')) or 'base'}-c{a.max_candidates}.json")
    cache = json.load(open(path)) if os.path.exists(path) else {}
    key = lambda r: f"{r['id']}|{r['think']}"  # noqa: E731
    todo = [r for r in items if key(r) not in cache]
    model = scorer() if todo else None
    os.makedirs(a.cache, exist_ok=True)
    for start in range(0, len(todo), 10):  # saved every 10 thinks: an interrupted run keeps what it scored
        chunk = todo[start:start + 10]
        for r, rec in zip(chunk, think_raw(model, chunk, trajs, a.max_candidates)):
            cache[key(r)] = rec
        json.dump(cache, open(path, "w"))
        print(f"  thinks {start + len(chunk)}/{len(todo)} scored", flush=True)
    return {r["id"]: cache[key(r)] for r in items}


def validate_thinks(a, scorer) -> dict:
    """Score (cached), rule verdicts and the report of the labelled thinks."""
    from bench.usefulness_validate import DATA, load_jsonl, report
    from pipeline.core.records import Trajectory
    labelled = load_jsonl(os.path.join(DATA, "thinks.jsonl"))
    if getattr(a, "sample", 0) and a.sample < len(labelled):  # a seeded subset, for a slow scorer
        import random
        labelled = sorted(random.Random(0).sample(labelled, a.sample), key=lambda r: r["id"])
    trajs = {r["trajectory_id"]: Trajectory.from_row(r) for r in load_jsonl(os.path.join(DATA, "trajectories.jsonl"))}
    raw = raw_cached(a, scorer, labelled, trajs)
    sc = think_scores(list(raw.values()))
    labels = [r["label"] for r in labelled]
    variants = {k: [sc[r["id"]][k] for r in labelled] for k in ("logratio", "task", "unmasked")}
    return report("thinks", [sc[r["id"]]["default"] for r in labelled], think_rules(labelled, trajs), labels,
                  a.think_threshold, variants)

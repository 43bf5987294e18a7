"""Validate the usefulness score against human labels (tests/data/usefulness/).

    .venv/bin/python bench/usefulness_validate.py                      # skills and thinks, default scorer
    .venv/bin/python bench/usefulness_validate.py --kind skills --steps 6
    .venv/bin/python bench/usefulness_validate.py --scorer runs/x/sft_fit    # another scorer (an SFT checkpoint)

For each labelled item it computes the score the pipeline would store (thinks: the gain of the
expert action's share over an empty think, with the answer masked; bank items: the mean gain on
held-out expert steps of the shipped probe set, with the action-set check) and the content rules'
verdict (the registry's checks, as distill and the skills stage run them), then prints, for
thinks and for skills separately: AUROC of the score (helps against the rest, and against
harmful only), and precision/recall of the keep decision for the rules alone, the score alone and
both, at the default threshold; then, per rule, what it rejects that the score keeps
(:func:`pipeline.usefulness.validation.rule_extras`). Score variants measured beside the default
are printed too (the raw gain, the log-ratio of the shares, a task-restating baseline, the
action-set check alone). Per-item raw shares are cached in ``--cache`` so a second run with other
aggregations scores nothing.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

DATA = os.path.join(ROOT, "tests", "data", "usefulness")


def load_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def item_row(r: dict) -> dict:
    """A labelled skill as a bank row (the fields the scorer and the rules read)."""
    from pipeline.core.lineage import skill_id
    texts = {k: r.get(k) or "" for k in ("title", "principle", "when_to_apply", "description", "why_it_happens",
                                         "how_to_avoid")}
    return {"skill_id": skill_id(r["kind"], r.get("category") or "", texts), "env": r["env"], "kind": r["kind"],
            "category": r.get("category") or "", **texts, "source_trajectory_ids": []}


def skill_raw(scorer, rows: list[dict], steps_cap: int, max_candidates: int) -> dict:
    """Per env: the held-out steps and, per step, the expert's share under the empty think, the
    whole block of the applicable items and each applicable item alone."""
    from pipeline.core.config_base import PromptConfig
    from pipeline.usefulness.bank import applies, item_text, plan_steps, step_messages
    from pipeline.usefulness.gate import heldout_pool
    from pipeline.usefulness.score import suffix, variant
    from pipeline.prompts import render_skills_block
    out = {}
    for env in sorted({r["env"] for r in rows}):
        items = [r for r in rows if r["env"] == env]
        steps = plan_steps(items, heldout_pool(env, []), steps_cap, max_candidates)
        cats = {s.traj.category or "" for s in steps}
        recs = []
        for n, step in enumerate(steps):
            idx = [i for i, it in enumerate(items) if applies(it, step, cats)]
            task = f"I need to {step.traj.task.rstrip('.')}."
            texts = ["", task, render_skills_block([items[i] for i in idx])] + [item_text(items[i]) for i in idx]
            res = scorer.shares(step_messages(step, PromptConfig()), [variant(t, env) for t in texts],
                                list(step.candidates), suffix(env))
            recs.append({"traj": step.traj.trajectory_id, "k": step.k, "items": [items[i]["skill_id"] for i in idx],
                         "expert": [row[0] for row in res.shares]})
            print(f"  {env} step {n + 1}/{len(steps)}: {len(idx)} items", flush=True)
        out[env] = recs
    return out


def skill_scores(raw: dict, rows: list[dict]) -> dict[str, dict[str, float | None]]:
    """Score variants per item id from the raw shares: ``gain`` (alone - empty, mean), ``logratio``
    (mean log of alone / empty), ``task`` (alone - task-restating think), ``default`` (gain with the
    action-set check, as the pipeline stores it), ``actionset`` (minus the foreign share only)."""
    from pipeline.usefulness.actionset import foreign_share
    from pipeline.usefulness.bank import combine
    acc: dict[str, dict[str, list[float]]] = {}
    for env, recs in raw.items():
        for rec in recs:
            empty, task = rec["expert"][0], rec["expert"][1]
            for sid, x in zip(rec["items"], rec["expert"][3:]):
                a = acc.setdefault(sid, {"gain": [], "logratio": [], "task": []})
                a["gain"].append(x - empty)
                a["logratio"].append(math.log(max(x, 1e-12) / max(empty, 1e-12)))
                a["task"].append(x - task)
    out = {}
    for r in rows:
        a = acc.get(r["skill_id"])
        mean = {k: (sum(v) / len(v) if v else None) for k, v in (a or {}).items()}
        out[r["skill_id"]] = {**mean, "n": len(a["gain"]) if a else 0,
                              "default": combine(mean["gain"], r, r["env"])[0] if a else None,
                              "actionset": -foreign_share(r, r["env"])}
    return out


def skill_rules(rows: list[dict]) -> list[list[str]]:
    """Reasons the skills stage's item judge rejects each labelled item for (no recorded actions or
    source memories: the rules that need them do not fire)."""
    from pipeline.bank.judge import ItemJudge
    from pipeline.core.config import QualityConfig
    from pipeline.stages.skills import _prompt_vocab
    from pipeline.usefulness.heldout import probe_trajectories
    out = []
    for r in rows:
        judge = ItemJudge(r["kind"], QualityConfig(), _prompt_vocab(), (), (), probe_trajectories(r["env"]),
                          r.get("category") or "", {}, (), r["env"])
        out.append(sorted({v.reason for v in judge.judge([r])[0]}))
    return out


def report(name: str, scores: list, rules: list[list[str]], labels: list[str], threshold: float,
           variants: dict[str, list]) -> dict:
    """Print and return the evaluation of one item kind."""
    from pipeline.usefulness.validation import auroc, evaluate, rule_extras
    rep = evaluate(scores, [bool(r) for r in rules], labels, threshold)
    rep["variants"] = {}
    for k, vals in variants.items():
        have = [i for i, v in enumerate(vals) if v is not None]
        rep["variants"][k] = {
            "auroc": auroc([vals[i] for i in have], [labels[i] == "helps" for i in have]),
            "auroc_harmful": auroc([vals[i] for i in have if labels[i] != "empty"],
                                   [labels[i] == "helps" for i in have if labels[i] != "empty"])}
    rep["rule_extras"] = rule_extras(rules, scores, labels, threshold)
    print(f"\n== {name}: n={rep['n']} labels={rep['labels']}")
    print(f"usefulness_auroc_{name}={rep['auroc']} (helps vs harmful: {rep['auroc_harmful']})")
    for k, v in rep["variants"].items():
        print(f"  variant {k:10s} auroc={_f(v['auroc'])} helps-vs-harmful={_f(v['auroc_harmful'])}")
    for who in ("rules", "score", "both"):
        c = rep[who]
        print(f"  {who:6s} kept={c['kept']:3d} precision={c['precision']} recall={c['recall']} "
              f"catch_precision={c['catch_precision']} catch_recall={c['catch_recall']}")
    for rule, e in rep["rule_extras"].items():
        print(f"  rule {rule:22s} hits={e['hits']:3d} beyond the score: helps {e['extra_helps']}, "
              f"empty {e['extra_empty']}, harmful {e['extra_harmful']}")
    return rep


def _f(x):
    return "n/a" if x is None else f"{x:.3f}"


def validate_skills(a, scorer) -> dict:
    labelled = load_jsonl(os.path.join(DATA, "skills.jsonl"))
    rows = [item_row(r) for r in labelled]
    cache = os.path.join(a.cache, f"skills-{a.tag}.json")
    if os.path.exists(cache):
        raw = json.load(open(cache))
    else:
        raw = skill_raw(scorer(), rows, a.steps, a.max_candidates)
        os.makedirs(a.cache, exist_ok=True)
        json.dump(raw, open(cache, "w"))
    sc = skill_scores(raw, rows)
    labels = [r["label"] for r in labelled]
    variants = {k: [sc[r["skill_id"]].get(k) for r in rows] for k in ("gain", "logratio", "task", "actionset")}
    return report("skills", [sc[r["skill_id"]]["default"] for r in rows], skill_rules(rows), labels,
                  a.skill_threshold, variants)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=("skills", "thinks", "both"), default="both")
    p.add_argument("--scorer", default="", help="scorer folder ('' = the student's base model)")
    p.add_argument("--steps", type=int, default=6, help="held-out steps per env and category (skills)")
    p.add_argument("--max-candidates", type=int, default=16)
    p.add_argument("--skill-threshold", type=float, default=0.0)
    p.add_argument("--think-threshold", type=float, default=0.0)
    p.add_argument("--cache", default=os.path.join(ROOT, ".usefulness_cache"), help="raw shares cache folder")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--sample", type=int, default=0,
                   help="thinks: score a seeded random subset of this many labelled items (0 = all; for a slow scorer)")
    a = p.parse_args(argv)
    import hashlib
    data = b"".join(open(os.path.join(DATA, n), "rb").read() for n in ("skills.jsonl", "thinks.jsonl")
                    if os.path.exists(os.path.join(DATA, n)))
    a.tag = (f"{os.path.basename(a.scorer.rstrip('/')) or 'base'}-s{a.steps}-c{a.max_candidates}-"
             f"{hashlib.sha256(data).hexdigest()[:8]}")

    def scorer():
        from pipeline.core.usefulness_config import UsefulnessConfig
        from pipeline.usefulness.load import open_scorer
        return open_scorer(UsefulnessConfig(scorer=a.scorer, threads=a.threads))
    t0 = time.time()
    results = {}
    if a.kind in ("skills", "both"):
        results["skills"] = validate_skills(a, scorer)
    if a.kind in ("thinks", "both") and os.path.exists(os.path.join(DATA, "thinks.jsonl")):
        from bench.usefulness_thinks import validate_thinks
        results["thinks"] = validate_thinks(a, scorer)
    wall = time.time() - t0
    print(f"\nwall_s={wall:.0f}")
    if not a.sample:  # a subset's figures are not the validation's
        from bench.results import write_result
        figures = {kind: {k: rep[k] for k in ("n", "labels", "auroc", "auroc_harmful", "rules", "score", "both",
                                              "variants", "rule_extras")} for kind, rep in results.items()}
        write_result("usefulness_validation", dict(figures, wall_s=round(wall)),
                     {"scorer": a.scorer or "student base model (SmolLM2-135M-Instruct)", "steps": a.steps,
                      "max_candidates": a.max_candidates, "think_threshold": a.think_threshold,
                      "skill_threshold": a.skill_threshold})
    return 0


if __name__ == "__main__":
    sys.exit(main())

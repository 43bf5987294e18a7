"""Build the unlabelled items of the usefulness validation set (tests/data/usefulness/).

    .venv/bin/python bench/usefulness_labelset.py --runs ROOT/runs/alf ROOT/runs/web ROOT/runs/tw \
        --thinks direct_thinks.jsonl --out tests/data/usefulness

Inputs: the ``verify`` artifacts of runs over data outside ``data/samples/`` (parse, remove_loops,
verify of the shared real sets and TextWorld gold rollouts), and the teacher's distill answers
for their successful trajectories (one JSON line per request: ``trajectory_id``, ``ok``,
``value`` = ``{"thinks": [{step_index, think}]}``). Writes ``trajectories.jsonl`` (the rows the
items refer to) and ``thinks.unlabelled.jsonl``:

* every teacher think (``origin: teacher``);
* up to ``--recorded`` thoughts the source recorded (ETO/ReAct), as they are (``origin: recorded``)
  and in four synthetic corruptions (``origin: corrupt:<kind>``, labelled by construction, see
  GUIDE.md): another step's thought, the action restated, the goal object or receptacle swapped for
  another the state shows, a fact negated.

Labels are added by reading each item against its state (GUIDE.md); this script never labels a
teacher think or a recorded thought.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

NEGATIONS = ((r"\bI need to\b", "I do not need to"), (r"\bI have\b", "I do not have"),
             (r"\bthere is\b", "there is no"), (r"\bis\b", "is not"), (r"\bcan\b", "cannot"),
             (r"\bshould\b", "should not"), (r"\bmatches\b", "does not match"))


def restated(action: str) -> str:
    """The action in words and nothing else."""
    return f"I will {action.replace('[', ' ').replace(']', '').strip()}."


def negated(thought: str) -> str | None:
    """``thought`` with its first negatable fact turned into its opposite; ``None`` when none matches."""
    for pattern, repl in NEGATIONS:
        if re.search(pattern, thought):
            return re.sub(pattern, repl, thought, count=1)
    return None


def wrong_object(thought: str, action: str, traj, k: int, rng: random.Random) -> str | None:
    """``thought`` with the name of the action's object or receptacle (ALFWorld) or a word of the
    clicked button (WebShop) swapped for another one the state shows; ``None`` when it names none."""
    from pipeline.usefulness.mask import action_arguments
    words = [w for a in action_arguments(action, traj.env) for w in re.findall(r"[a-z]{4,}", a.lower())]
    seen = " ".join((s.observation or "") for s in traj.steps[:k]).lower()
    others = sorted({w for w in re.findall(r"\b[a-z]{4,}\b", seen)} - set(words) - {"your", "task", "with",
                                                                                   "that", "this", "from", "look"})
    for w in words:
        if re.search(rf"\b{w}\b", thought, re.I) and others:
            return re.sub(rf"\b{w}\b", rng.choice(others), thought, flags=re.I)
    return None


def items_of(trajs: dict, answers: list[dict], recorded: int, seed: int) -> list[dict]:
    """Teacher thinks, then recorded thoughts and their corruptions (module docstring)."""
    out = []
    for a in answers:
        if not a["ok"]:
            continue
        t = trajs[a["trajectory_id"]]
        for th in a["value"]["thinks"]:
            k = th["step_index"] + 1
            action = t.steps[k].action if k < len(t.steps) else "done"
            out.append({"id": f"teacher/{t.trajectory_id}/{k}", "env": t.env, "trajectory_id": t.trajectory_id,
                        "k": k, "action": action, "think": " ".join(th["think"].split()), "origin": "teacher"})
    rng = random.Random(seed)
    pool = [(t, k) for t in trajs.values() if t.success for k in range(1, len(t.steps))
            if (t.steps[k].thought or "").strip() and t.steps[k].action and not t.steps[k].action.startswith("think")]
    rng.shuffle(pool)
    for t, k in pool[:recorded]:
        thought, action = " ".join(t.steps[k].thought.split()), t.steps[k].action
        base = {"env": t.env, "trajectory_id": t.trajectory_id, "k": k, "action": action}
        out.append({**base, "id": f"recorded/{t.trajectory_id}/{k}", "think": thought, "origin": "recorded"})
        other = [j for j in range(1, len(t.steps)) if j != k and (t.steps[j].thought or "").strip()]
        variants = {"other_step": " ".join(t.steps[rng.choice(other)].thought.split()) if other else None,
                    "restated_action": restated(action), "wrong_object": wrong_object(thought, action, t, k, rng),
                    "negated": negated(thought)}
        labels = {"other_step": "harmful", "restated_action": "empty", "wrong_object": "harmful", "negated": "harmful"}
        for kind, text in variants.items():
            if text and text != thought:
                out.append({**base, "id": f"corrupt:{kind}/{t.trajectory_id}/{k}", "think": text,
                            "origin": f"corrupt:{kind}", "label": labels[kind],
                            "reason": f"synthetic corruption ({kind}) of the recorded thought"})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", required=True, help="run folders with a verify artifact")
    p.add_argument("--thinks", required=True, help="teacher distill answers (JSON lines)")
    p.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "usefulness"))
    p.add_argument("--recorded", type=int, default=25, help="recorded thoughts kept (each with its corruptions)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    import pyarrow.parquet as pq
    from pipeline.core.records import Trajectory
    rows = [r for run in a.runs for r in pq.read_table(os.path.join(run, "verify")).to_pylist()]
    trajs = {r["trajectory_id"]: Trajectory.from_row(r) for r in rows}
    with open(a.thinks, encoding="utf-8") as f:
        answers = [json.loads(line) for line in f if line.strip()]
    items = items_of(trajs, answers, a.recorded, a.seed)
    used = {i["trajectory_id"] for i in items}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "trajectories.jsonl"), "w", encoding="utf-8") as f:
        for r in rows:
            if r["trajectory_id"] in used:
                f.write(json.dumps(r, ensure_ascii=False, sort_keys=True, default=str) + "\n")
    with open(os.path.join(a.out, "thinks.unlabelled.jsonl"), "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    print(f"{len(items)} items ({sum(i['origin'] == 'teacher' for i in items)} teacher) from {len(used)} trajectories")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def sheet_entry(item: dict, traj) -> str:
    """One item as a labeller reads it: the task, the steps before it, the state it was written for,
    the action and what the game answered (to see what was true), then the think."""
    k = item["k"]
    lines = [f"### {item['id']}", f"env: {traj.env} | task: {traj.task}"]
    for j in range(1, min(k, len(traj.steps))):
        obs = " ".join((traj.steps[j].observation or "").split())[:300]
        lines.append(f"  step {j}: > {traj.steps[j].action} -> {obs}")
    before = " ".join((traj.steps[k - 1].observation or "").split())[:600]
    lines.append(f"STATE (observation before the action): {before}")
    adm = [a for a in (traj.steps[k - 1].admissible_actions or []) if a != "help"]
    if adm:
        lines.append(f"admissible: {', '.join(adm[:40])}")
    after = " ".join((traj.steps[k].observation or "").split())[:300] if k < len(traj.steps) else "(episode ends)"
    lines += [f"ACTION: {item['action']}  -> answer: {after}", f"THINK: {item['think']}", ""]
    return "\n".join(lines)


def write_sheets(unlabelled: str, trajectories: str, out_dir: str, parts: int) -> list[str]:
    """Labelling sheets of the items that need a reader (teacher thinks and recorded thoughts; the
    corruptions carry their label), split into ``parts`` files in item order."""
    from pipeline.core.records import Trajectory
    with open(trajectories, encoding="utf-8") as f:
        trajs = {r["trajectory_id"]: Trajectory.from_row(r) for r in map(json.loads, f)}
    with open(unlabelled, encoding="utf-8") as f:
        items = [i for i in map(json.loads, f) if "label" not in i]
    size = -(-len(items) // parts)
    paths = []
    for p in range(parts):
        path = os.path.join(out_dir, f"sheet-{p + 1}.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(sheet_entry(i, trajs[i["trajectory_id"]]) for i in items[p * size:(p + 1) * size]))
        paths.append(path)
    return paths

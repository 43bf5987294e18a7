"""A cost model of the SkillRL reference scripts ``parse_alfworld.py`` + ``dedupe_repetitions.py``.

The reference scripts are not available offline. This module is **our own plain-Python
re-implementation of their written description** (the project's research notes on the SkillRL
SFT pipeline: its per-file parse, env selection and loop dedupe, no code copied): the same
regular expressions in spirit, the same selection rules, the same JSON files, in one process
(no multiprocessing), so that ``bench/parse_dedupe.py`` can time both on the same tree in the
same run. It reproduces the reference's behaviour *including its defects* (unsigned rewards
drop steps, "Reward: 10.000 anywhere" is success, mixed envs are dropped, files in glob order,
actions-only dedupe). It is a benchmark yardstick only: the pipeline never imports it.

Two steps, as the reference's ``run_alfworld.sh`` runs two scripts:

* ``parse``: every ``env*`` folder of the tree, sorted by name; in it every ``*.txt`` in glob
  (file-system) order, each read whole and parsed with regular expressions (:func:`parse_trajectory_file`);
  envs with fewer than ``--min_trajs_per_env`` files are skipped; each env is bucketed
  (:func:`bucket`), the first ``--n_success_envs`` all-success and ``--n_fail_envs`` all-fail
  envs are kept with ``--n_trajs_per_env`` trajectories each; written as
  ``processed_trajectories.json`` (``json.dump``, indent 2, non-ASCII kept).
* ``dedupe``: reads that JSON, removes repeated action blocks (:func:`dedupe_steps`) from every
  trajectory, writes ``processed_trajectories_cleaned.json``. The description does not give the
  cleaned file's indentation; indent 2, like the first file, is assumed.

Usage (each step prints ``key=value`` lines: counts, ``wall_s`` and ``cpu_s`` of its work (interpreter
start-up excluded), ``peak_rss_mb`` of the process)::

    python bench/reference_model.py parse TREE WORK_DIR
    python bench/reference_model.py dedupe WORK_DIR
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import sys
import time

PARSED = "processed_trajectories.json"
CLEANED = "processed_trajectories_cleaned.json"

_TASK = re.compile(r"Your task is to:\s*(.*)", re.IGNORECASE)
_SPLIT = re.compile(r"\n(?=Step -?\d+ \|)")
_HEADER = re.compile(r"Step (-?\d+) \| Action: (.*?) \| Reward: ([\d.]+) \| Done: (True|False)")
_ADMISSIBLE = re.compile(r"Your admissible actions of the current situation are:\s*\[(.*?)\]\.", re.DOTALL)
_OBS_PREFIX = re.compile(r"You are now at step \d+ and your current observation is:|Your current observation is:",
                         re.IGNORECASE)
_REASON = re.compile(r"You should first reason step-by-step.*?<think> </think> tags\.\s*", re.DOTALL)
_WELCOME = re.compile(r"-=\s*Welcome to TextWorld,\s*ALFRED!\s*=-")
_TURN = re.compile(r"Now it's your turn to take an action\.\s*Once you've finished your reasoning.*?"
                   r"<action> </action> tags\.", re.DOTALL)
_TASK_LINE = re.compile(r"\n*^Your task is to:.*$", re.MULTILINE)


def parse_admissible(obs: str) -> tuple[list[str], str]:
    """``(items, obs without the block)``: the first admissible block's bracket content split on
    newlines only; each piece trimmed, dropped if empty, one trailing comma dropped, one pair of
    surrounding quotes removed."""
    m = _ADMISSIBLE.search(obs)
    if not m:
        return [], obs
    items = []
    for piece in m.group(1).split("\n"):
        piece = piece.strip()
        if not piece:
            continue
        if piece.endswith(","):
            piece = piece[:-1].strip()
        if len(piece) >= 2 and piece[0] == piece[-1] and piece[0] in "'\"":
            piece = piece[1:-1]
        items.append(piece)
    return items, obs[:m.start()] + obs[m.end():]


def clean_observation(obs: str) -> str:
    """The text after the first "...current observation is:" phrase, without the reasoning
    sentence, the TextWorld banner, the turn instruction and "Your task is to:" lines; trimmed."""
    m = _OBS_PREFIX.search(obs)
    if m:
        obs = obs[m.end():]
    obs = _REASON.sub("", obs)
    obs = _WELCOME.sub("", obs)
    obs = _TURN.sub("", obs)
    obs = _TASK_LINE.sub("", obs)
    return obs.strip()


def parse_trajectory_file(path: str) -> dict:
    """One rollout file -> ``{is_success, length, steps, task_desc, file_path}``; each step
    ``{step_id: "Step NN", action, reward: float, done: bool, observation, admissible_actions}``.
    Segments whose header does not match (the banner, a negative reward) are skipped silently."""
    with open(path, encoding="utf-8") as f:
        content = f.read()
    m = _TASK.search(content)
    task = m.group(1).strip() if m else ""
    steps = []
    for seg in _SPLIT.split(content):
        h = _HEADER.match(seg)
        if not h:
            continue
        obs = seg[h.end():].strip()
        if obs.startswith("Obs:"):
            obs = obs[len("Obs:"):].strip()
        admissible, obs = parse_admissible(obs)
        steps.append({"step_id": f"Step {h.group(1)}", "action": h.group(2), "reward": float(h.group(3)),
                      "done": h.group(4) == "True", "observation": clean_observation(obs),
                      "admissible_actions": admissible})
    return {"is_success": "Reward: 10.000" in content, "length": len(steps), "steps": steps,
            "task_desc": task, "file_path": path}


def bucket(n_success: int, n_fail: int, n_trajs: int) -> str | None:
    """``"mixed"`` (dropped), ``"all_success"``, ``"all_fail"`` or ``None`` (dropped), in the
    reference's order of tests."""
    if n_success >= 2 and n_fail >= 1:
        return "mixed"
    if n_success >= n_trajs:
        return "all_success"
    if n_fail >= n_trajs:
        return "all_fail"
    return None


def select_envs(input_dir: str, n_success_envs: int = 70, n_fail_envs: int = 30, n_trajs: int = 3,
                min_trajs: int = 3) -> tuple[list[dict], dict]:
    """Parse every env folder and select: ``(records, counts)``. Records are all-success envs
    first, then all-fail, each ``{env_id, task, type, trajectories: [[step, ...], ...]}``;
    ``counts`` has ``files``, ``envs``, ``skipped_few_files`` and one count per bucket."""
    counts = {"files": 0, "envs": 0, "skipped_few_files": 0, "mixed": 0, "all_success": 0, "all_fail": 0,
              "dropped": 0}
    kept: dict[str, list[dict]] = {"all_success": [], "all_fail": []}
    limits = {"all_success": n_success_envs, "all_fail": n_fail_envs}
    for env_dir in sorted(d for d in glob.glob(os.path.join(input_dir, "env*")) if os.path.isdir(d)):
        counts["envs"] += 1
        files = glob.glob(os.path.join(env_dir, "*.txt"))  # glob order, unsorted, as the reference
        if len(files) < min_trajs:
            counts["skipped_few_files"] += 1
            continue
        parsed = [parse_trajectory_file(p) for p in files]
        counts["files"] += len(parsed)
        success = sorted((t for t in parsed if t["is_success"]), key=lambda t: t["length"])  # stable
        fail = [t for t in parsed if not t["is_success"]]
        task = next((t["task_desc"] for t in parsed if t["task_desc"]), "")
        kind = bucket(len(success), len(fail), n_trajs)
        counts[kind or "dropped"] += 1
        if kind in kept and len(kept[kind]) < limits[kind]:
            picks = success[:n_trajs] if kind == "all_success" else fail[:n_trajs]
            kept[kind].append({"env_id": os.path.basename(env_dir), "task": task, "type": kind,
                               "trajectories": [t["steps"] for t in picks]})
    return kept["all_success"] + kept["all_fail"], counts


def dedupe_steps(steps: list[dict]) -> list[dict]:
    """Incremental loop removal on actions only: after appending each step, for L = 1 .. n//2
    (shortest first) delete the last L steps when their actions equal the L before them, and
    stop checking for that step. The earliest copy is kept; ``A A A`` becomes ``A``."""
    cleaned: list[dict] = []
    for step in steps:
        cleaned.append(step)
        n = len(cleaned)
        for span in range(1, n // 2 + 1):
            last = [s["action"] for s in cleaned[n - span:]]
            before = [s["action"] for s in cleaned[n - 2 * span:n - span]]
            if last == before:
                del cleaned[n - span:]
                break
    return cleaned


def run_parse(input_dir: str, work_dir: str, **selection) -> dict:
    """The parse script: select (:func:`select_envs`) and write ``work_dir/processed_trajectories.json``."""
    records, counts = select_envs(input_dir, **selection)
    with open(os.path.join(work_dir, PARSED), "w", encoding="utf-8") as f:
        json.dump(records, f, indent=2, ensure_ascii=False)
    counts["kept_envs"] = len(records)
    counts["kept_trajectories"] = sum(len(r["trajectories"]) for r in records)
    return counts


def run_dedupe(work_dir: str) -> dict:
    """The dedupe script: read the parse output, dedupe every trajectory, write the cleaned file.
    Returns ``{trajectories, trajectories_shortened, steps_removed}``."""
    with open(os.path.join(work_dir, PARSED), encoding="utf-8") as f:
        records = json.load(f)
    counts = {"trajectories": 0, "trajectories_shortened": 0, "steps_removed": 0}
    for rec in records:
        if "trajectories" not in rec:
            continue
        cleaned = []
        for steps in rec["trajectories"]:
            kept = dedupe_steps(steps)
            counts["trajectories"] += 1
            counts["trajectories_shortened"] += len(kept) < len(steps)
            counts["steps_removed"] += len(steps) - len(kept)
            cleaned.append(kept)
        rec["trajectories"] = cleaned
    with open(os.path.join(work_dir, CLEANED), "w", encoding="utf-8") as f:
        json.dump(records, f, indent=2, ensure_ascii=False)
    return counts


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="step", required=True)
    sp = sub.add_parser("parse", help="parse_alfworld.py: TREE -> WORK_DIR/" + PARSED)
    sp.add_argument("tree")
    sp.add_argument("work_dir")
    sp.add_argument("--n_success_envs", type=int, default=70)
    sp.add_argument("--n_fail_envs", type=int, default=30)
    sp.add_argument("--n_trajs_per_env", type=int, default=3)
    sp.add_argument("--min_trajs_per_env", type=int, default=3)
    sd = sub.add_parser("dedupe", help="dedupe_repetitions.py: WORK_DIR/" + PARSED + " -> " + CLEANED)
    sd.add_argument("work_dir")
    a = p.parse_args(argv)
    t0, c0 = time.perf_counter(), time.process_time()
    if a.step == "parse":
        counts = run_parse(a.tree, a.work_dir, n_success_envs=a.n_success_envs, n_fail_envs=a.n_fail_envs,
                           n_trajs=a.n_trajs_per_env, min_trajs=a.min_trajs_per_env)
    else:
        counts = run_dedupe(a.work_dir)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    print(f"wall_s={wall:.3f} cpu_s={cpu:.3f} peak_rss_mb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""Lineage explorer data: each SFT pair with its source, trajectory steps, memories and skills.

The same walk as ``skillpipe inspect --lineage`` (:func:`pipeline.inspect.lineage_report`), done
once for many pairs and returned as JSON-ready dicts that the report's inline script shows.
Long text is cut (``MAX_TEXT`` characters) and at most ``limit`` pairs are kept, so the report
stays small (the acceptance bound is 5 MB).
"""
from __future__ import annotations

import json
import os
from typing import Any

from pipeline.core.artifacts import MANIFEST
from pipeline.report.bankinfo import read_rows

MAX_TEXT = 1500     # characters per prompt/observation shown
MAX_PROMPT = 6000   # the prompt is the longest field; its tail (history + admissible list) matters most


def _cut(s: Any, n: int = MAX_TEXT) -> str:
    s = "" if s is None else str(s)
    return s if len(s) <= n else s[:n] + f"… (+{len(s) - n} chars)"


def _cut_middle(s: Any, n: int = MAX_PROMPT) -> str:
    """Head (a quarter) and tail of ``s`` within ``n`` characters: a prompt's end holds the
    current observation and the admissible actions, its start the task and the skills."""
    s = "" if s is None else str(s)
    if len(s) <= n:
        return s
    head = n // 4
    return s[:head] + f"\n… ({len(s) - n} chars left out) …\n" + s[-(n - head):]


def _input_root(run_dir: str) -> str:
    try:
        with open(os.path.join(run_dir, "parse", MANIFEST), encoding="utf-8") as f:
            root = json.load(f).get("input_path", "")
    except (OSError, ValueError):
        return ""
    return root if not root or os.path.isdir(root) else os.path.dirname(root)


def _steps(traj: dict[str, Any], upto: int) -> list[dict[str, Any]]:
    """Steps ``0..upto`` (the target step included), observations cut."""
    return [{"index": s["index"], "action": s.get("action"), "observation": _cut(s.get("observation"), 400),
             "line": s.get("line")} for s in (traj.get("steps") or [])[:upto + 1]]


def _skill_view(s: dict[str, Any]) -> dict[str, Any]:
    text = s.get("principle") or s.get("how_to_avoid") or s.get("description") or ""
    return {"skill_id": s["skill_id"], "kind": s.get("kind"), "category": s.get("category") or "",
            "title": _cut(s.get("title") or s.get("description") or "", 200), "text": _cut(text, 400)}


def entries(run_dir: str, limit: int = 200) -> tuple[list[dict[str, Any]], str]:
    """``(entries, note)``: up to ``limit`` SFT pairs (export, else build_pairs) in artifact order."""
    stage = "export" if os.path.isdir(os.path.join(run_dir, "export")) else "build_pairs"
    pairs = read_rows(run_dir, stage, limit=limit + 1)
    if not pairs:
        return [], "no SFT pairs in this run (export/build_pairs artifact missing or empty)"
    note = f"the first {limit} pairs" if len(pairs) > limit else ""
    pairs = pairs[:limit]
    wanted = {p["trajectory_id"] for p in pairs}
    trajs = {}
    for s in ("parse", "remove_loops", "verify"):  # verify last: its rows (loops removed, rejected steps cut) win
        trajs.update({t["trajectory_id"]: t for t in read_rows(run_dir, s, where=("trajectory_id", wanted))})
    mem_ids = {m for p in pairs for m in p.get("memory_ids") or []}
    mems = {m["memory_id"]: m for m in read_rows(run_dir, "memory", where=("memory_id", mem_ids))}
    skills = {s["skill_id"]: s for s in read_rows(run_dir, "skills")}
    root = _input_root(run_dir)
    out = []
    for p in pairs:
        t = trajs.get(p["trajectory_id"])
        out.append({
            "pair_id": p["pair_id"], "split": p.get("split") or "", "env": p.get("env"), "category": p.get("category"),
            "source": os.path.join(root, p.get("source_uri") or "") if p.get("source_uri") else "",
            "source_line": p.get("source_line"), "trajectory_id": p["trajectory_id"], "step_id": p.get("step_id"),
            "step_index": p.get("step_index"), "task": _cut(t["task"], 300) if t else "",
            "outcome": t["outcome"] if t else "", "steps": _steps(t, p.get("step_index") or 0) if t else [],
            "memories": [{"memory_id": m, "text": _cut(mems[m]["contextual_description"], 400) if m in mems
                          else "(not found)"} for m in p.get("memory_ids") or []],
            "skills": [_skill_view(skills[s]) if s in skills else {"skill_id": s, "title": "(not found)"}
                       for s in p.get("skill_ids_used") or []],
            "bank_version": p.get("bank_version"), "model": p.get("model"), "flags": p.get("flags") or [],
            "prompt": _cut_middle(p.get("instruction")), "target": _cut(p.get("output")),
        })
    return out, note

"""Stage ``dedupe``: remove no-op loops from trajectories (DESIGN §3.2; spec §3.4, D-D1, D-D2).

A repeated block is a loop only if the normalised action **and** the normalised resulting
observation of every step repeat (the reference compared actions only and deleted, e.g., the
second ``click[next >]`` that reached page 3, or a retried action that won: D-D1). Rules:

* blocks are checked incrementally, shortest period first, and the **earliest** copy is kept
  (the reference's actual behaviour, documented and tested here: D-D2);
* reasoning-only steps (``think: ...`` / ``think[...]``) never count: they are skipped when
  comparing and never removed;
* the reset step, and any step with ``done`` or ``reward > 0``, is never removed;
* removed steps' original indices go to ``removed_step_indices`` and their spans to metadata
  ``dedupe.removed_spans``; the remaining steps are renumbered 0..n-1.

Trajectories with fewer than ``dedupe.min_actions`` actions left are quarantined ``too_short``.
Step-indexed metadata written by readers (``invalid_actions``, D-P8) is renumbered with the steps
(entries of removed steps are dropped and listed under ``dedupe.removed_invalid_actions``).

The stage streams: the parse artifact is read in record batches and rows are deduplicated as
plain dicts (no dataclass round trip), so memory does not grow with the input.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

import pyarrow.parquet as pq

from ..formats.common import bad, trajectory_row
from ..formats.parallel import ordered_map, worker_count
from ..records import TRAJECTORY_SCHEMA, Step, Trajectory
from ..runner import StageContext, StageOutput

NAME = "dedupe"
INPUTS = ("parse",)
SCHEMA = TRAJECTORY_SCHEMA
USES_LLM = False

_REASONING = re.compile(r"^\s*think\s*(?::|\[)", re.I)
_WS = re.compile(r"\s+")


def prompt_files(ctx: StageContext) -> list[str]:
    return []


def _norm(text: str | None) -> str:
    return _WS.sub(" ", (text or "").strip().lower())


def is_reasoning(step: Step | dict) -> bool:
    """True for a thinking-only step (``think: ...`` ALFWorld, ``think[...]`` WebShop)."""
    action = step["action"] if isinstance(step, dict) else step.action
    return action is not None and bool(_REASONING.match(action))


WORKERS = 0            # worker processes (0 = one per CPU)
MIN_ROWS_FOR_POOL = 5000  # smaller inputs are deduplicated in-process


def _removable(step: dict) -> bool:
    return not step["done"] and step["reward"] <= 0


def loop_steps(steps: list[dict]) -> list[list[int]]:
    """Positions (into ``steps``, row dicts) of each removed loop copy, in removal order.

    Incremental over the action steps (reset and reasoning steps excluded): after appending a
    step, for L = 1 .. n//2 (shortest first), if the last L kept steps equal the L before them on
    (normalised action, normalised observation) and none of the last L is terminal or rewarded,
    the last L are removed and checking stops for this step. O(n^2) compares; fine for n <= 100s.
    """
    kept: list[int] = []
    removed: list[list[int]] = []
    key = [(_norm(s["action"]), _norm(s["observation"])) for s in steps]
    for pos, s in enumerate(steps):
        if s["action"] is None or is_reasoning(s):
            continue
        kept.append(pos)
        n = len(kept)
        for L in range(1, n // 2 + 1):
            last, prev = kept[n - L:], kept[n - 2 * L:n - L]
            if all(key[a] == key[b] for a, b in zip(last, prev)) and all(_removable(steps[p]) for p in last):
                removed.append(last)
                del kept[n - L:]
                break
    return removed


def dedupe_row(row: dict[str, Any]) -> tuple[dict[str, Any], list[list[int]]]:
    """A ``TRAJECTORY_SCHEMA`` row without loop steps (a new dict; ``row`` is not changed) and
    the removed spans as original step indices."""
    steps = row["steps"]
    spans = loop_steps(steps)
    if not spans:
        return row, []
    gone = {p for span in spans for p in span}
    new_pos = {}
    kept_steps = []
    for p, s in enumerate(steps):
        if p not in gone:
            new_pos[p] = len(kept_steps)
            kept_steps.append({**s, "index": len(kept_steps)})
    orig = [[steps[p]["index"] for p in span] for span in spans]
    meta = json.loads(row["metadata"] or "{}")
    meta["dedupe"] = {"removed_spans": [[span[0], span[-1]] for span in orig]}
    if meta.get("invalid_actions"):  # reader annotations follow their steps (D-P8)
        moved, lost = [], []
        for entry in meta["invalid_actions"]:
            (moved if entry.get("index") in new_pos else lost).append(entry)
        meta["invalid_actions"] = [{**e, "index": new_pos[e["index"]]} for e in moved]
        if lost:
            meta["dedupe"]["removed_invalid_actions"] = lost
    removed = sorted(set(row["removed_step_indices"] or []) | {i for span in orig for i in span})
    return {**row, "steps": kept_steps, "removed_step_indices": removed,
            "metadata": json.dumps(meta, ensure_ascii=False, sort_keys=True)}, orig


def dedupe_trajectory(t: Trajectory) -> tuple[Trajectory, list[list[int]]]:
    """A copy of ``t`` without loop steps, and the removed spans as original step indices."""
    row, spans = dedupe_row(trajectory_row(t))
    return (Trajectory.from_row(row) if spans else t), spans


def _row_groups(folder: str) -> list[tuple[str, int]]:
    """``(part path, row group index)`` of every row group of the upstream artifact, in order."""
    parts = sorted(f for f in os.listdir(folder) if f.startswith("part-") and f.endswith(".parquet"))
    out = []
    for name in parts:
        path = os.path.join(folder, name)
        out += [(path, i) for i in range(pq.ParquetFile(path).num_row_groups)]
    return out


def dedupe_group(args: tuple[str, int, int]) -> tuple[list[dict], list, int, int, int]:
    """Dedupe one Parquet row group (runs in a worker): ``(kept, quarantine, n_in, shortened, removed)``."""
    path, index, min_actions = args
    rows = pq.ParquetFile(path).read_row_group(index).to_pylist()
    kept, qrows, shortened, removed = [], [], 0, 0
    for row in rows:
        new, spans = dedupe_row(row)
        if spans:
            shortened += 1
            removed += sum(len(s) for s in spans)
        n_actions = sum(1 for s in new["steps"][1:] if not is_reasoning(s))
        if n_actions < min_actions:
            qrows.append(bad("too_short", f"{n_actions} actions left after loop removal (min_actions={min_actions})",
                             new["source_uri"], new["source_line"], json.dumps(new, ensure_ascii=False),
                             item_id=new["trajectory_id"], stage=NAME, limit=None))
        else:
            kept.append(new)
    return kept, qrows, len(rows), shortened, removed


def run(ctx: StageContext) -> StageOutput:
    """Dedupe every parsed trajectory; counts: in = kept + quarantined (``too_short``)."""
    upstream = ctx.upstream("parse")
    tasks = [(path, i, ctx.config.dedupe.min_actions) for path, i in _row_groups(upstream.path)]
    n_rows = upstream.manifest.get("counts", {}).get("out", 0)
    workers = worker_count(WORKERS) if n_rows >= MIN_ROWS_FOR_POOL else 1
    out = StageOutput(rows=[], quarantine=[], rows_in=0)
    counts = {"trajectories_shortened": 0, "steps_removed": 0}

    def stream():
        for kept, qrows, n_in, shortened, removed in ordered_map(dedupe_group, tasks, workers, chunk=1):
            out.rows_in += n_in
            counts["trajectories_shortened"] += shortened
            counts["steps_removed"] += removed
            yield kept, qrows
        out.counters.update(counts)

    out.stream = stream()
    return out

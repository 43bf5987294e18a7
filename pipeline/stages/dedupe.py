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
from typing import Any, Iterator

import pyarrow.parquet as pq

from ..formats.common import bad, trajectory_row
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


BATCH = 1000  # trajectories per record batch read from the parse artifact


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


def _upstream_rows(folder: str) -> Iterator[list[dict[str, Any]]]:
    parts = sorted(f for f in os.listdir(folder) if f.startswith("part-") and f.endswith(".parquet"))
    for name in parts:
        for batch in pq.ParquetFile(os.path.join(folder, name)).iter_batches(batch_size=BATCH):
            yield batch.to_pylist()


def run(ctx: StageContext) -> StageOutput:
    """Dedupe every parsed trajectory; counts: in = kept + quarantined (``too_short``)."""
    min_actions = ctx.config.dedupe.min_actions
    out = StageOutput(rows=[], quarantine=[], rows_in=0)
    counts = {"trajectories_shortened": 0, "steps_removed": 0}

    def stream():
        for rows in _upstream_rows(ctx.upstream("parse").path):
            out.rows_in += len(rows)
            kept, qrows = [], []
            for row in rows:
                new, spans = dedupe_row(row)
                if spans:
                    counts["trajectories_shortened"] += 1
                    counts["steps_removed"] += sum(len(s) for s in spans)
                n_actions = sum(1 for s in new["steps"][1:] if not is_reasoning(s))
                if n_actions < min_actions:
                    qrows.append(bad("too_short", f"{n_actions} actions left after loop removal "
                                     f"(min_actions={min_actions})", new["source_uri"], new["source_line"],
                                     json.dumps(new, ensure_ascii=False), item_id=new["trajectory_id"],
                                     stage=NAME, limit=None))
                else:
                    kept.append(new)
            yield kept, qrows
        out.counters.update(counts)

    out.stream = stream()
    return out

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
"""
from __future__ import annotations

import json
import re

from ..formats.common import bad
from ..records import TRAJECTORY_SCHEMA, QuarantineRow, Step, Trajectory
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


def is_reasoning(step: Step) -> bool:
    """True for a thinking-only step (``think: ...`` ALFWorld, ``think[...]`` WebShop)."""
    return step.action is not None and bool(_REASONING.match(step.action))


def _removable(step: Step) -> bool:
    return not step.done and step.reward <= 0


def loop_steps(steps: list[Step]) -> list[list[int]]:
    """Positions (into ``steps``) of each removed loop copy, in removal order.

    Incremental over the action steps (reset and reasoning steps excluded): after appending a
    step, for L = 1 .. n//2 (shortest first), if the last L kept steps equal the L before them on
    (normalised action, normalised observation) and none of the last L is terminal or rewarded,
    the last L are removed and checking stops for this step. O(n^2) compares; fine for n <= 100s.
    """
    kept: list[int] = []
    removed: list[list[int]] = []
    key = [(_norm(s.action), _norm(s.observation)) for s in steps]
    for pos, s in enumerate(steps):
        if s.action is None or is_reasoning(s):
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


def dedupe_trajectory(t: Trajectory) -> tuple[Trajectory, list[list[int]]]:
    """A copy of ``t`` without loop steps, and the removed spans as original step indices."""
    spans = loop_steps(t.steps)
    gone = {p for span in spans for p in span}
    if not gone:
        return t, []
    steps = [Step(**{**s.__dict__, "index": i}) for i, s in enumerate(s for p, s in enumerate(t.steps) if p not in gone)]
    orig = [[t.steps[p].index for p in span] for span in spans]
    meta = json.loads(t.metadata or "{}")
    meta["dedupe"] = {"removed_spans": [[span[0], span[-1]] for span in orig]}
    removed = sorted(set(t.removed_step_indices) | {i for span in orig for i in span})
    return Trajectory(**{**t.__dict__, "steps": steps, "removed_step_indices": removed,
                         "metadata": json.dumps(meta, ensure_ascii=False, sort_keys=True)}), orig


def run(ctx: StageContext) -> StageOutput:
    """Dedupe every parsed trajectory; counts: in = kept + quarantined (``too_short``)."""
    rows = ctx.upstream("parse").read_rows()
    out, quarantine = [], []
    shortened = steps_removed = 0
    for row in rows:
        t, spans = dedupe_trajectory(Trajectory.from_row(row))
        if spans:
            shortened += 1
            steps_removed += sum(len(s) for s in spans)
        n_actions = sum(1 for s in t.steps[1:] if not is_reasoning(s))
        if n_actions < ctx.config.dedupe.min_actions:
            quarantine.append(bad("too_short", f"{n_actions} actions left after loop removal "
                                  f"(min_actions={ctx.config.dedupe.min_actions})", t.source_uri, t.source_line,
                                  json.dumps(t.to_row(), ensure_ascii=False), item_id=t.trajectory_id,
                                  stage=NAME, limit=None))
            continue
        out.append(t.to_row())
    return StageOutput(rows=out, quarantine=quarantine, rows_in=len(rows),
                       counters={"trajectories_shortened": shortened, "steps_removed": steps_removed})

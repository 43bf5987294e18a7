"""Stage ``remove_loops``: remove no-op loops from trajectories.

A repeated block is a loop only if the normalised action **and** the normalised resulting
observation of every step repeat (the reference compared actions only and deleted, e.g., the
second ``click[next >]`` that reached page 3, or a retried action that won). Rules:

* blocks are checked incrementally, shortest period first, and the **earliest** copy is kept
  (the reference's actual behaviour, documented and tested here);
* reasoning-only steps (``think: ...`` / ``think[...]``) never count: they are skipped when
  comparing and never removed;
* the reset step, and any step with ``done`` or ``reward > 0``, is never removed;
* removed steps' original indices go to ``removed_step_indices`` and their spans to metadata
  ``remove_loops.removed_spans``; the remaining steps are renumbered 0..n-1.

Trajectories with fewer than ``remove_loops.min_actions`` actions left are quarantined ``too_short``.
Step-indexed metadata written by readers (``invalid_actions``) is renumbered with the steps
(entries of removed steps are dropped and listed under ``remove_loops.removed_invalid_actions``).

The stage streams: the parse artifact is read one Parquet row group at a time (in a process pool
for large inputs) and deduplicated column-wise by :func:`remove_loops_table` (only actions, ``done``,
``reward`` and the observations of steps whose actions repeat become Python values; kept steps
are gathered with Arrow ``take``), so memory does not grow with the input. Each row group's
output is encoded to Parquet in the worker and becomes one part file of the artifact. :func:`remove_loops_row`
is the row-dict reference the tests compare it with.

In a sharded run, the rows of the shard that parse's cross-shard pass dropped (an exact
duplicate of a row in an earlier shard, or over a global cap: :meth:`pipeline.stages.parse.Parse.reduce_shards`)
are quarantined here with parse's reason and the whole row, before loop removal; they are units
in like every parse row, so in = out + quarantined holds per shard.
"""
from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.core.artifacts import EncodedPart, PartEncoder
from pipeline.core.artifacts import parquet_parts
from pipeline.formats.common import trajectory_row
from pipeline.stages.parse import shard_drops
from pipeline.formats.parallel import ordered_map, worker_count
from pipeline.core.records import STEP_TYPE, TEXT, TRAJECTORY_SCHEMA, Trajectory, to_table
from pipeline.core.lineage import content_hash
from pipeline.rules import REASONING, is_reasoning
from pipeline.stage.stage import Stage, StageContext, StageOutput, reject

_STEPS_TYPE = TRAJECTORY_SCHEMA.field("steps").type
_INT_LIST = TRAJECTORY_SCHEMA.field("removed_step_indices").type


def _norm(text: str | None) -> str:
    """Lower-cased, whitespace runs collapsed to one space, trimmed. Same as
    ``re.sub(r"\\s+", " ", text.strip().lower())`` (``str.split``, ``str.strip`` and the regex's ``\\s``
    share one whitespace class, and lower-casing neither makes nor removes whitespace: checked
    over every code point), ~4x faster on observations."""
    return " ".join((text or "").lower().split())


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
    return _loop_positions([s["action"] for s in steps], [_removable(s) for s in steps],
                           lambda p: steps[p]["observation"])


def _loop_positions(actions: list[str | None], removable: list[bool], observation,
                    norm_cache: dict[str, str] | None = None) -> list[list[int]]:
    """:func:`loop_steps` on columns: ``actions[p]``, ``removable[p]`` and ``observation(p)``.

    Observations are fetched and normalised only when the actions of two compared steps are
    equal (they are long; most comparisons fail on the action), which gives the same answer as
    comparing (action, observation) pairs. ``norm_cache`` (raw -> normalised action) may be
    shared across rows: actions repeat a lot.
    """
    cache = {} if norm_cache is None else norm_cache
    akey: list[str | None] = []
    for a in actions:  # None = not an action step (reset or reasoning)
        if a is None:
            akey.append(None)
            continue
        k = cache.get(a)
        if k is None:
            k = cache[a] = "" if REASONING.match(a) else "=" + _norm(a)  # "" marks reasoning
        akey.append(k or None)
    kept: list[int] = []
    removed: list[list[int]] = []
    obs: dict[int, str] = {}

    def same_obs(a: int, b: int) -> bool:
        for p in (a, b):
            if p not in obs:
                obs[p] = _norm(observation(p))
        return obs[a] == obs[b]

    seen: set[str] = set()
    for pos, k in enumerate(akey):
        if k is None:
            continue
        kept.append(pos)
        if k not in seen:  # a first occurrence cannot close a loop (every L needs an earlier equal action)
            seen.add(k)
            continue
        n = len(kept)
        for L in range(1, n // 2 + 1):
            if akey[kept[n - 1 - L]] != k:  # cheap test of the last pair first
                continue
            last = kept[n - L:]
            if all(akey[x] == akey[y] for x, y in zip(last, kept[n - 2 * L:n - L])) \
                    and all(same_obs(x, y) for x, y in zip(last, kept[n - 2 * L:n - L])) \
                    and all(removable[p] for p in last):
                removed.append(last)
                del kept[n - L:]
                break
    return removed


def remove_loops_row(row: dict[str, Any]) -> tuple[dict[str, Any], list[list[int]]]:
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
    metadata, removed = _changed_fields(row["metadata"], row["removed_step_indices"], orig, new_pos)
    return {**row, "steps": kept_steps, "removed_step_indices": removed, "metadata": metadata}, orig


def _changed_fields(metadata: str | None, removed_before: list[int] | None, orig: list[list[int]],
                    new_pos: dict[int, int]) -> tuple[str, list[int]]:
    """``(metadata JSON, removed_step_indices)`` of a shortened row: the spans recorded under
    ``remove_loops.removed_spans`` and reader annotations renumbered (``new_pos``: old -> new position)."""
    meta = json.loads(metadata or "{}")
    meta["remove_loops"] = {"removed_spans": [[span[0], span[-1]] for span in orig]}
    if meta.get("invalid_actions"):  # reader annotations follow their steps
        moved, lost = [], []
        for entry in meta["invalid_actions"]:
            (moved if entry.get("index") in new_pos else lost).append(entry)
        meta["invalid_actions"] = [{**e, "index": new_pos[e["index"]]} for e in moved]
        if lost:
            meta["remove_loops"]["removed_invalid_actions"] = lost
    removed = sorted(set(removed_before or []) | {i for span in orig for i in span})
    return json.dumps(meta, ensure_ascii=False, sort_keys=True), removed


def remove_loops_trajectory(t: Trajectory) -> tuple[Trajectory, list[list[int]]]:
    """A copy of ``t`` without loop steps, and the removed spans as original step indices."""
    row, spans = remove_loops_row(trajectory_row(t))
    return (Trajectory.from_row(row) if spans else t), spans


def _row_groups(folder: str) -> list[tuple[str, int]]:
    """``(part path, row group index)`` of every row group of the upstream artifact, in order."""
    return [(path, i) for path in parquet_parts(folder) for i in range(pq.ParquetFile(path).num_row_groups)]


def remove_loops_group(args: tuple) -> tuple[list[EncodedPart] | list[dict], list, int, int, int]:
    """Remove loops from one Parquet row group (runs in a worker or in-process):
    ``(kept rows as encoded Parquet parts, quarantine, n_in, shortened, removed)``; see
    :func:`remove_loops_table`. The part is encoded here so that only compressed bytes reach the main
    process (see ``parse.read_chunk``). ``args``: ``(part path, row group, min_actions)`` and
    optionally ``[(row position in the group, reason, why)]`` of rows to quarantine unchanged
    (parse's cross-shard drops)."""
    path, index, min_actions, *more = args
    # hand the previous group's freed Arrow buffers back to the OS first: the allocator keeps
    # them otherwise and each worker's RSS creeps up group after group (measured ~146 -> ~135 MB
    # peak per worker on the 3,000-env benchmark tree)
    pa.default_memory_pool().release_unused()
    table = pq.ParquetFile(path).read_row_group(index)
    selected: list = []
    if more and more[0]:
        table, selected = _drop_selected(table, more[0])
    if not table.schema.equals(TRAJECTORY_SCHEMA):  # e.g. an artifact of an older schema: row path
        kept_rows, qrows, n_in, shortened, removed = remove_loops_rows(table.to_pylist(), min_actions)
        return [kept_rows], selected + qrows, n_in + len(selected), shortened, removed
    kept, qrows, shortened, removed = remove_loops_table(table, min_actions)
    encoder = PartEncoder(TRAJECTORY_SCHEMA)
    encoder.write(kept)
    return encoder.finish(), selected + qrows, table.num_rows + len(selected), shortened, removed


def _drop_selected(table: pa.Table, drops: list[tuple[int, str, str]]) -> tuple[pa.Table, list]:
    """``table`` without the rows at ``drops``' positions, and those rows as parse's quarantine
    rows (:func:`pipeline.stages.parse.not_kept`: reason, why, the whole row)."""
    from pipeline.stages.parse import not_kept
    gone = {p for p, _, _ in drops}
    rows = [not_kept(table.slice(p, 1).to_pylist()[0], reason, why) for p, reason, why in drops]
    keep = pa.array([i for i in range(table.num_rows) if i not in gone], pa.int64())
    return table.take(keep), rows


def remove_loops_rows(rows: list[dict], min_actions: int) -> tuple[pa.Table | list, list, int, int, int]:
    """The row-dict form of :func:`remove_loops_table` (reference implementation; same results)."""
    kept, qrows, shortened, removed = [], [], 0, 0
    for row in rows:
        new, spans = remove_loops_row(row)
        if spans:
            shortened += 1
            removed += sum(len(s) for s in spans)
        n_actions = sum(1 for s in new["steps"][1:] if not is_reasoning(s))
        if n_actions < min_actions:
            qrows.append(_too_short(new, n_actions, min_actions))
        else:
            kept.append(new)
    return kept, qrows, len(rows), shortened, removed


def _too_short(row: dict, n_actions: int, min_actions: int):
    return reject(RemoveLoops.name, "too_short", f"{n_actions} actions left after loop removal "
                  f"(min_actions={min_actions})", row["trajectory_id"], json.dumps(row, ensure_ascii=False),
                  row["source_uri"], row["source_line"])


def remove_loops_table(table: pa.Table, min_actions: int) -> tuple[pa.Table, list, int, int]:
    """Remove loops from a ``TRAJECTORY_SCHEMA`` table without turning rows into Python objects:
    ``(kept table, too_short quarantine rows, trajectories shortened, steps removed)``.

    Only the step actions, ``done`` and ``reward`` (and, when two actions match, the two
    observations) are read as Python values; the output steps are the input steps gathered with
    ``take`` and renumbered. Rows come out identical to :func:`remove_loops_row` (the test suite
    checks this against the row path); only quarantined rows are converted to dicts.
    """
    steps = table.column("steps").combine_chunks()
    lengths = pc.list_value_length(steps).fill_null(0).to_pylist()
    flat = steps.flatten()
    if steps.null_count or flat.null_count:  # a null step list / step: keep the row path's behaviour
        kept, qrows, _, shortened, removed = remove_loops_rows(table.to_pylist(), min_actions)
        return (to_table(kept, TRAJECTORY_SCHEMA), qrows, shortened, removed)
    fields = dict(zip((f.name for f in STEP_TYPE), flat.flatten()))
    actions = fields["action"].to_pylist()
    removable = [not d and r <= 0 for d, r in zip(fields["done"].to_pylist(), fields["reward"].to_pylist())]
    observation = fields["observation"]
    index = fields["index"].to_pylist()
    metadata = table.column("metadata").to_pylist()
    removed_before = table.column("removed_step_indices").to_pylist()
    take_rows, take_steps, new_index, offsets = [], [], [], [0]
    new_meta, new_removed, qrows = [], [], []
    shortened = n_removed = start = 0
    norm_cache: dict[str, str] = {}  # raw action -> "" (reasoning) or "=" + normalised (see _loop_positions)
    for r, n in enumerate(lengths):
        row_actions = actions[start:start + n]
        spans = _loop_positions(row_actions, removable[start:start + n],
                                lambda p, base=start: observation[base + p].as_py(), norm_cache)
        if spans:
            shortened += 1
            n_removed += sum(len(sp) for sp in spans)
            gone = {p for sp in spans for p in sp}
            keep = [p for p in range(n) if p not in gone]
        else:
            keep = range(n)
        # as remove_loops_rows counts: kept steps after the first, not reasoning ("" in norm_cache)
        n_actions = sum(1 for p in keep[1:] if row_actions[p] is None or norm_cache[row_actions[p]])
        if n_actions < min_actions:
            new, _ = remove_loops_row(table.slice(r, 1).to_pylist()[0])
            qrows.append(_too_short(new, n_actions, min_actions))
        else:
            take_rows.append(r)
            take_steps += [start + p for p in keep] if spans else range(start, start + n)
            offsets.append(offsets[-1] + len(keep))
            if spans:
                new_index += range(len(keep))
                orig = [[index[start + p] for p in sp] for sp in spans]
                meta, rem = _changed_fields(metadata[r], removed_before[r], orig, {p: i for i, p in enumerate(keep)})
            else:
                new_index += index[start:start + n]
                meta, rem = metadata[r], removed_before[r]
            new_meta.append(meta)
            new_removed.append(rem)
        start += n
    out = _gather(table, fields, take_rows, take_steps, new_index, offsets)
    for name, col in (("removed_step_indices", pa.array(new_removed, _INT_LIST)), ("metadata", pa.array(new_meta, TEXT))):
        out = out.append_column(TRAJECTORY_SCHEMA.field(name), col)
    return out.select(TRAJECTORY_SCHEMA.names), qrows, shortened, n_removed


def _gather(table: pa.Table, fields: dict[str, pa.Array], take_rows: list[int], take_steps: list[int],
            new_index: list[int], offsets: list[int]) -> pa.Table:
    """The rows ``take_rows`` of ``table`` with their steps replaced by the flat step positions
    ``take_steps`` (``fields``: the flat step columns; ``new_index``: the steps' new ``index``;
    ``offsets``: list offsets per kept row), and without ``removed_step_indices``/``metadata``
    (the caller appends the new ones)."""
    take = pa.array(take_steps, pa.int64())
    step_cols = [pa.array(new_index, pa.int32()) if name == "index" else col.take(take) for name, col in fields.items()]
    new_steps = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()),
                                         pa.StructArray.from_arrays(step_cols, fields=list(STEP_TYPE)),
                                         type=_STEPS_TYPE)
    out = table.drop_columns(["steps", "removed_step_indices", "metadata"])  # replaced here and by the caller
    if len(take_rows) < table.num_rows:
        out = out.take(pa.array(take_rows, pa.int64()))
    return out.append_column(TRAJECTORY_SCHEMA.field("steps"), new_steps)


def _with_drops(tasks: list[tuple], drops: list[tuple[int, str, str]]) -> list[tuple]:
    """``tasks`` ``(path, row group, min_actions)`` each extended with the ``drops`` (row position
    in the whole artifact, reason, why) that fall in its row group, as positions in the group."""
    out, base, k = [], 0, 0
    for path, i, min_actions in tasks:
        n = pq.ParquetFile(path).metadata.row_group(i).num_rows
        mine = []
        while k < len(drops) and drops[k][0] < base + n:
            mine.append((drops[k][0] - base, drops[k][1], drops[k][2]))
            k += 1
        out.append((path, i, min_actions, mine))
        base += n
    return out


class RemoveLoops(Stage):
    """Remove no-op loops from every parsed trajectory (module docstring)."""
    name = "remove_loops"
    inputs = ("parse",)
    schema = TRAJECTORY_SCHEMA
    config_sections = ("remove_loops",)
    sharded = True

    def input_facts(self, ctx: StageContext) -> list[dict]:
        """The parse artifact's content hash; for a shard, its parse shard's and the digest of
        the rows the cross-shard pass dropped from it."""
        facts = super().input_facts(ctx)
        if ctx.shard:
            drops = shard_drops(ctx.store.stage_dir("parse"), ctx.shard)
            facts.append({"stage": "parse", "selection": ctx.shard, "drops_sha256": content_hash(drops, n=32)})
        return facts

    def run(self, ctx: StageContext) -> StageOutput:
        """Remove loops from every parsed trajectory; counts: in = kept + quarantined (``too_short``)."""
        upstream = ctx.upstream("parse")
        tasks = [(path, i, ctx.config.remove_loops.min_actions) for path, i in _row_groups(upstream.path)]
        if ctx.shard:  # a sharded run: parse's cross-shard drops for this shard, per row group
            tasks = _with_drops(tasks, shard_drops(ctx.store.stage_dir("parse"), ctx.shard))
        n_rows = upstream.manifest.get("counts", {}).get("out", 0)
        workers = worker_count(WORKERS) if n_rows >= MIN_ROWS_FOR_POOL else 1
        out = StageOutput(rows=[], quarantine=[], rows_in=0)
        counts = {"trajectories_shortened": 0, "steps_removed": 0}

        def stream():
            for kept, qrows, n_in, shortened, removed in ordered_map(remove_loops_group, tasks, workers, chunk=1,
                                                                     shrink=True, what="remove_loops worker"):
                out.rows_in += n_in
                counts["trajectories_shortened"] += shortened
                counts["steps_removed"] += removed
                for batch in kept:
                    yield batch, []
                yield [], qrows
            out.counters.update(counts)

        out.stream = stream()
        return out


STAGE = RemoveLoops()

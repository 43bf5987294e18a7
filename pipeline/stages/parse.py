"""Stage ``parse``: read every input file into normalised trajectories, then select.

Reading goes through :func:`pipeline.formats.discover.read_file` (format sniffed per file unless
``parse.format`` names one; ``ctx.env`` is the env hint). Every record read is one unit in:
a trajectory, or a quarantine row for what could not be read (an unreadable file is one unit).

Selection (spec §3.2, with D-P5 and D-P6 fixed), per (env, env_instance) and outcome:

* successes: the ``max_per_instance`` shortest (fewest actions), ties by source file name, then
  source URI, then record index (the reference broke ties by filesystem order);
* failures: the first ``max_per_instance`` by source file name, then URI, then record index;
* mixed-outcome instances keep both outcomes (the reference dropped them: D-P5);
* optional caps on instances with a success / failure-only instances, counted **per env** (the
  reference ran one env at a time: 70 success / 30 failure envs each), and a global cap on
  trajectories, all counted in the deterministic order below;
* per-env overrides of ``max_per_instance`` / ``max_success_instances`` /
  ``max_failure_instances``: ``parse.per_env`` (e.g. ``{"search": {"max_per_instance": 1}}``).

Everything not selected is quarantined with reason ``not_selected`` and the full trajectory row
as JSON in ``raw``, so nothing disappears silently.

Streaming and order: files are sorted by path and cut into **groups** = consecutive files of one
folder (an ``envNNN`` folder of a SkillRL tree). Selection is exact within a group; groups are
emitted in path order and, inside a group, instances in (env, instance) order, which is the
order global caps count in. An instance whose records lie in several folders is selected per
folder (counted as ``instances_split_across_groups``). Consecutive groups (up to ``CHUNK_FILES``
files) form one task of a process pool (:func:`~pipeline.formats.parallel.ordered_map`: ordered,
at most a few tasks in flight) when there are enough files, so memory stays bounded and both
cores are used; the output is identical to a sequential run. A worker returns its chunk's
selected rows as one Arrow table (``trajectories_table``) plus per-group ranking facts, so the
main process only applies the global caps and writes Parquet (rows dropped by a global cap are
the only ones converted back to dicts, for their quarantine JSON).

Input digest: the workers also SHA-256 every file from the bytes they read anyway, and the stage
reports ``counters["input_fingerprint"]``, equal to what ``runner._input_fingerprint`` computes
for parse (``[{"files", "sha256", "listed"}]``: one digest over ``"<relative path>\\0<sha256>\\n"``
in path order), so the runner can take it from here instead of reading every input file a second
time before the stage starts (~0.3-0.8 s of the 3,000-env benchmark; a runner change, not made
here).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Iterator

import pyarrow as pa

from ..config import ParseConfig
from ..formats.common import bad, rebase, trajectories_table, trajectory_row
from ..formats.discover import list_input_files, read_file
from ..formats.parallel import ordered_map, worker_count
from ..records import TRAJECTORY_SCHEMA, QuarantineRow, Trajectory
from ..runner import MAX_LISTED_INPUTS, StageContext, StageOutput

NAME = "parse"
INPUTS: tuple[str, ...] = ()
SCHEMA = TRAJECTORY_SCHEMA
USES_LLM = False
REPORTS_INPUT_FINGERPRINT = True  # counters["input_fingerprint"]: the runner then skips its own hashing pass

#: Worker processes (0 = one per CPU); inputs with fewer than ``MIN_FILES_FOR_POOL`` files are
#: read in-process (starting a pool costs more than it saves).
WORKERS = 0
MIN_FILES_FOR_POOL = 64
BATCH_ROWS = 500  # rows handed to the Parquet writer at a time (one Parquet row group)
CHUNK_FILES = 64  # at most this many files per worker task (whole groups; a group may exceed it)


def prompt_files(ctx: StageContext) -> list[str]:
    return []


def _file_key(t: Trajectory) -> tuple:
    return (os.path.basename(t.source_uri), t.source_uri, t.record_index)


def caps(cfg: ParseConfig, env: str) -> dict[str, int]:
    """The caps for ``env``: the config values, overridden by ``per_env[env]``."""
    per_env = cfg.per_env or {}
    base = {k: getattr(cfg, k) for k in ("max_per_instance", "max_success_instances", "max_failure_instances")}
    return {**base, **(per_env.get(env) or {})}


def rank_instances(trajs: list[Trajectory], cfg: ParseConfig
                   ) -> tuple[list[tuple[tuple[str, str], bool, list[Trajectory]]], dict[str, str]]:
    """Per-instance selection of one group.

    Returns ``([(instance key, has_success, ranked trajectories)], {trajectory_id: why dropped})``
    with instances in (env, instance) order and each instance's trajectories as successes
    (shortest first) then failures (by file), both already cut to ``max_per_instance``.
    """
    groups: dict[tuple[str, str], dict[str, list[Trajectory]]] = defaultdict(lambda: {"success": [], "failure": []})
    for t in trajs:
        groups[(t.env, t.env_instance)]["success" if t.success else "failure"].append(t)
    dropped: dict[str, str] = {}
    out = []
    for key in sorted(groups):
        limit = caps(cfg, key[0])["max_per_instance"]
        succ = sorted(groups[key]["success"], key=lambda t: (len(t.steps) - 1, *_file_key(t)))
        fail = sorted(groups[key]["failure"], key=_file_key)
        ranked = []
        for outcome, items in (("success", succ), ("failure", fail)):
            for rank, t in enumerate(items):
                if limit and rank >= limit:
                    dropped[t.trajectory_id] = f"{outcome} #{rank + 1} of instance {key[1]!r}: max_per_instance={limit}"
                else:
                    ranked.append(t)
        out.append((key, bool(succ), ranked))
    return out, dropped


@dataclass
class GlobalCaps:
    """Instance caps (per env) and the global trajectory cap, applied in stream order."""
    cfg: ParseConfig
    success_instances: Counter = field(default_factory=Counter)
    failure_instances: Counter = field(default_factory=Counter)
    kept: int = 0

    def admit(self, key: tuple[str, str], has_success: bool, n: int) -> list[str | None]:
        """For an instance with ``n`` ranked trajectories: ``None`` (kept) or the drop reason each."""
        c = caps(self.cfg, key[0])
        rule = "max_success_instances" if has_success else "max_failure_instances"
        counter = self.success_instances if has_success else self.failure_instances
        counter[key[0]] += 1
        if c[rule] and counter[key[0]] > c[rule]:
            return [f"{rule}={c[rule]} instances of env {key[0]!r} reached"] * n
        out: list[str | None] = []
        for _ in range(n):
            if self.cfg.max_trajectories and self.kept >= self.cfg.max_trajectories:
                out.append(f"max_trajectories={self.cfg.max_trajectories} reached")
            else:
                self.kept += 1
                out.append(None)
        return out


def select(trajs: list[Trajectory], cfg: ParseConfig) -> tuple[list[Trajectory], dict[str, str]]:
    """Select among ``trajs`` as one group: ``(kept in input order, {trajectory_id: why not})``."""
    ranked, dropped = rank_instances(trajs, cfg)
    gcaps = GlobalCaps(cfg)
    for key, has_success, items in ranked:
        for t, why in zip(items, gcaps.admit(key, has_success, len(items))):
            if why:
                dropped[t.trajectory_id] = why
    return [t for t in trajs if t.trajectory_id not in dropped], dropped


@dataclass
class GroupResult:
    """What a worker returns for one group (its rows travel in the chunk's table)."""
    ranked: list[tuple[tuple[str, str], bool, list[int]]]  # (instance, has_success, row positions in rank order)
    facts: list[tuple[str, str]]           # per row of the group: (source_format, "env/category/outcome")
    quarantine: list[QuarantineRow]
    read_by_format: Counter
    inputs: list[tuple[str, str]] = field(default_factory=list)  # (relative path, sha256) per file


def read_group(root: str, paths: list[str], fmt: str, env: str | None, threshold: float, cfg: ParseConfig
               ) -> tuple[list[Trajectory], GroupResult]:
    """Read and rank one group of files: ``(selected trajectories in read order, result)`` with
    positions in ``result.ranked`` indexing the returned list."""
    trajs, quarantine, by_format, inputs = [], [], Counter(), []
    for path in paths:
        rel = os.path.relpath(path, root)  # URIs relative to the input root: ids independent of location
        digest = hashlib.sha256()
        for item in read_file(path, fmt, env, threshold, source_uri=rel, digest=digest):
            if isinstance(item, QuarantineRow):
                item.source_uri = rel
                quarantine.append(item)
            else:  # ids hash (source URI, record index, content): unique per record
                trajs.append(item if item.source_uri == rel else rebase(item, rel))
                by_format[item.source_format] += 1
        inputs.append((rel, digest.hexdigest()))
    ranked, dropped = rank_instances(trajs, cfg)
    kept = []
    for t in trajs:
        if t.trajectory_id in dropped:
            quarantine.append(_not_selected(t, dropped[t.trajectory_id]))
        else:
            kept.append(t)
    pos = {t.trajectory_id: i for i, t in enumerate(kept)}
    return kept, GroupResult([(key, has_s, [pos[t.trajectory_id] for t in items]) for key, has_s, items in ranked],
                             [(t.source_format, f"{t.env}/{t.category}/{t.outcome}") for t in kept],
                             quarantine, by_format, inputs)


def read_chunk(args: tuple[str, list[list[str]], str, str | None, float, ParseConfig]
               ) -> tuple[pa.Table | None, list[GroupResult]]:
    """Read consecutive groups (runs in a worker process): one Arrow table with the selected rows
    of all of them, group after group, and each group's result. One table per chunk, not per
    group: pickling a table has a fixed cost that dominated the main process at 3,000 groups."""
    root, groups, fmt, env, threshold, cfg = args
    kept, results = [], []
    for paths in groups:
        trajs, res = read_group(root, paths, fmt, env, threshold, cfg)
        kept += trajs
        results.append(res)
    return (trajectories_table(kept) if kept else None), results


def _not_selected(t: Trajectory | dict, why: str) -> QuarantineRow:
    row = t if isinstance(t, dict) else trajectory_row(t)
    return bad("not_selected", why, row["source_uri"], row["source_line"], json.dumps(row, ensure_ascii=False),
               item_id=row["trajectory_id"], limit=None)


def _concat(tables: list[pa.Table]) -> pa.Table | list:
    return pa.concat_tables(tables) if tables else []


def _groups(files: list[str]) -> Iterator[list[str]]:
    return (list(g) for _, g in groupby(files, key=os.path.dirname))


def _chunks(groups: Iterator[list[str]], files_per_chunk: int) -> Iterator[list[list[str]]]:
    chunk, n = [], 0
    for g in groups:
        chunk.append(g)
        n += len(g)
        if n >= files_per_chunk:
            yield chunk
            chunk, n = [], 0
    if chunk:
        yield chunk


def _results(root: str, files: list[str], cfg: ParseConfig, env: str | None
             ) -> Iterator[tuple[pa.Table | None, list[GroupResult]]]:
    workers = worker_count(WORKERS) if len(files) >= MIN_FILES_FOR_POOL else 1
    # about 32 tasks per worker (load balance), at most CHUNK_FILES files each (memory)
    per_chunk = max(1, min(CHUNK_FILES, len(files) // (workers * 32)))
    tasks = ((root, c, cfg.format, env, cfg.success_threshold, cfg) for c in _chunks(_groups(files), per_chunk))
    return ordered_map(read_chunk, tasks, workers, chunk=1)


def run(ctx: StageContext) -> StageOutput:
    """Read ``ctx.input_path``; see the module docstring. Counts: in = kept + quarantined."""
    cfg = ctx.config.parse
    files = list_input_files(ctx.input_path)
    root = ctx.input_path if os.path.isdir(ctx.input_path) else os.path.dirname(ctx.input_path)
    out = StageOutput(rows=[], quarantine=[], rows_in=0)
    read_by_format, kept_by_format, kept_by_cat = Counter(), Counter(), Counter()
    seen_instances: set[tuple[str, str]] = set()
    kept_instances: set[tuple[str, str]] = set()
    split = set()
    digest, listing = hashlib.sha256(), []  # as runner._input_fingerprint: see the module docstring

    def stream():
        gcaps = GlobalCaps(cfg)
        tables, n_rows, qrows = [], 0, []
        for chunk_table, results in _results(root, files, cfg, ctx.env):
            keep_chunk: list[int] = []
            start = 0
            for res in results:
                for rel, sha in res.inputs:
                    digest.update(f"{rel}\0{sha}\n".encode())
                    if len(listing) <= MAX_LISTED_INPUTS:
                        listing.append({"uri": rel, "sha256": sha})
                read_by_format.update(res.read_by_format)
                out.rows_in += sum(res.read_by_format.values()) + sum(q.reason != "not_selected" for q in res.quarantine)
                qrows += res.quarantine
                dropped: dict[int, str] = {}
                for key, has_success, items in res.ranked:
                    split.update({key} & seen_instances)
                    seen_instances.add(key)
                    for p, why in zip(items, gcaps.admit(key, has_success, len(items))):
                        if why:
                            dropped[p] = why
                        else:
                            kept_instances.add(key)
                # a global cap hit is rare, so only its rows are converted back to dicts
                qrows += [_not_selected(chunk_table.slice(start + p, 1).to_pylist()[0], why)
                          for p, why in dropped.items()]  # rank order
                for p, (fmt, cat) in enumerate(res.facts):
                    if p not in dropped:
                        keep_chunk.append(start + p)
                        kept_by_format[fmt] += 1
                        kept_by_cat[cat] += 1
                start += len(res.facts)
            if keep_chunk:
                table = chunk_table if len(keep_chunk) == start else chunk_table.take(keep_chunk)
                tables.append(table)
                n_rows += table.num_rows
            if n_rows + len(qrows) >= BATCH_ROWS:
                yield _concat(tables), qrows
                tables, n_rows, qrows = [], 0, []
                pa.default_memory_pool().release_unused()  # the written batch's buffers: bound RSS
        out.counters.update({
            "files": len(files),
            "read_by_source_format": dict(sorted(read_by_format.items())),
            "kept_by_source_format": dict(sorted(kept_by_format.items())),
            "kept_by_env_category_outcome": dict(sorted(kept_by_cat.items())),
            "kept_instances": len(kept_instances),
            "instances_split_across_groups": len(split),
            "input_fingerprint": [{"files": len(files), "sha256": digest.hexdigest(),
                                   "listed": listing if len(files) <= MAX_LISTED_INPUTS else []}],
        })
        yield _concat(tables), qrows

    out.stream = stream()
    return out

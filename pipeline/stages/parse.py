"""Stage ``parse``: read every input file into normalised trajectories, then select.

Reading goes through :func:`pipeline.formats.discover.read_file` (format sniffed per file unless
``parse.format`` names one; ``ctx.env`` is the env hint). Every record read is one unit in:
a trajectory, or a quarantine row for what could not be read (an unreadable file is one unit).

Selection and exact-duplicate removal follow :mod:`pipeline.selection` (the reference's
rules with its tie-breaking and id defects fixed; duplicates are ours). Everything not kept is quarantined (``not_selected`` /
``duplicate_trajectory``) with the full trajectory row as JSON in ``raw``, so nothing disappears
silently. Within a group, duplicates are removed before ranking; across groups the main process
checks each kept row against all earlier ones (a 16-byte digest and the id per kept trajectory:
~15 MB per 100,000). A duplicate never counts toward a cap.

Streaming and order: files are sorted by path and cut into **groups** = consecutive files of one
folder (an ``envNNN`` folder of a SkillRL tree). Selection is exact within a group; groups are
emitted in path order and, inside a group, instances in (env, instance) order, which is the
order global caps count in. An instance whose records lie in several folders is selected per
folder (counted as ``instances_split_across_groups``). Consecutive groups (up to ``CHUNK_FILES``
files, tasks shrinking towards the end: :func:`_chunks`) form one task of a process pool
(:func:`~pipeline.formats.parallel.ordered_map`: ordered, at most a few tasks in flight) when
there are enough files, so memory stays bounded and both cores are used; the output is
identical to a sequential run. A task encodes its selected rows and its quarantine rows to
Parquet itself (:class:`~pipeline.core.artifacts.PartEncoder`, ``BATCH_ROWS`` rows per row group)
and returns the bytes plus per-group ranking facts (:class:`ChunkResult`); the main process
applies the global caps and writes each task's bytes as one part file. Only when a global cap
drops rows of a task is that task's part decoded and re-encoded without them.

Shards: in a run planned into several shards (:mod:`pipeline.engine.shards`: contiguous runs of
groups in path order) each shard is parsed alone with the within-group selection above, and
the cross-group part (duplicates of an earlier group, global caps: :class:`CrossGroup`) is left
to a small reduce, :meth:`Parse.reduce_shards`, run when the shards are collected: each shard
keeps its groups' compact facts (``_selection_facts.json``: trajectory id, content digest and
the instance ranking, ~100 bytes per row) and the reduce replays :class:`CrossGroup` over the
shards in order, the unsharded stream, writing per shard the rows it drops
(``parse/_selection/shard-NNNNN.json``). ``remove_loops`` quarantines those rows for its shard
with the same reasons (``duplicate_trajectory`` / ``not_selected``) and whole rows, so the kept
rows equal a one-shard run's and counts reconcile per shard and in total. A one-shard run does
all of it here, as before.

Input facts (:class:`InputDigest`, the one definition): ``[{"files", "sha256", "listed"}]``, one
digest over ``"<relative path>\\0<sha256>\\n"`` in path order. :meth:`Parse.input_facts` hashes
the files for the runner's skip check; when the stage runs anyway (forced, or no earlier
artifact) the workers SHA-256 every file from the bytes they read anyway and the stage hands the
same facts back in :attr:`ParseOutput.input_facts` (:meth:`Parse.facts_after_run`), so no file
is read twice (~0.3-0.8 s of the 3,000-env benchmark).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa

from pipeline.core.artifacts import ArtifactError, EncodedPart, PartEncoder, decode_part
from pipeline.core.config import ParseConfig
from pipeline.formats.common import bad, rebase, trajectories_table, trajectory_row
from pipeline.formats.discover import file_groups, input_root, list_input_files, read_file
from pipeline.formats.parallel import ordered_map, worker_count
from pipeline.core.lineage import ID_HEX, UNREADABLE, input_sha256
from pipeline.core.records import QUARANTINE_SCHEMA, TRAJECTORY_SCHEMA, QuarantineRow, Trajectory, to_table
from pipeline.stage.stage import Stage, StageContext, StageOutput
from pipeline.selection import GlobalCaps, content_digest, rank_instances

MAX_LISTED_INPUTS = 1000  # input files listed one by one in the parse manifest

#: Worker processes (0 = one per CPU); inputs with fewer than ``MIN_FILES_FOR_POOL`` files are
#: read in-process (starting a pool costs more than it saves).
WORKERS = 0
MIN_FILES_FOR_POOL = 64
BATCH_ROWS = 500  # rows encoded at a time by a worker (one Parquet row group)
CHUNK_FILES = 1000  # at most this many files per worker task (whole groups; a group may exceed it)
MIN_TASK_FILES = 16  # the smallest task of the shrinking schedule (_chunks)


class InputDigest:
    """The input facts of parse, built file by file in path order: one SHA-256 over
    ``"<relative path>\\0<file sha256>\\n"`` (constant memory however many files), and the
    per-file list for small inputs (at most ``MAX_LISTED_INPUTS`` files)."""

    def __init__(self) -> None:
        self.digest, self.listing, self.files = hashlib.sha256(), [], 0

    def add(self, rel: str, sha: str) -> None:
        """Account one file: ``rel`` its path relative to the input root, ``sha`` its hex
        SHA-256 (or ``lineage.UNREADABLE``)."""
        self.digest.update(f"{rel}\0{sha}\n".encode())
        self.files += 1
        if self.files <= MAX_LISTED_INPUTS:
            self.listing.append({"uri": rel, "sha256": sha})

    def facts(self) -> list[dict]:
        """``[{"files": n, "sha256": hex, "listed": [{"uri", "sha256"}] or [] when too many}]``."""
        return [{"files": self.files, "sha256": self.digest.hexdigest(),
                 "listed": self.listing if self.files <= MAX_LISTED_INPUTS else []}]


@dataclass
class GroupResult:
    """What a worker returns for one group (its rows travel in the chunk's encoded parts)."""
    ranked: list[tuple[tuple[str, str], bool, list[int]]]  # (instance, has_success, row positions in rank order)
    facts: list[tuple[str, str, str, bytes]]  # per kept row: (source_format, "env/category/outcome", id, content digest)
    reasons: Counter                       # quarantine rows of the group by reason (incl. SELECTION_REASONS)
    read_by_format: Counter
    inputs: list[tuple[str, str]] = field(default_factory=list)  # (relative path, sha256) per file


def relative_path(path: str, root: str) -> str:
    """``os.path.relpath(path, root)``, without its two ``abspath`` calls in the usual case (a
    normalised ``root``, ``path`` = ``root`` + separator + a normalised relative rest; ~10x faster
    over the 12,000 files of the benchmark tree); any other form takes ``os.path.relpath``."""
    prefix = root if root.endswith(os.sep) else root + os.sep
    if root and path.startswith(prefix) and os.path.normpath(root) == root:
        rel = path[len(prefix):]
        if rel and not os.path.isabs(rel) and os.path.normpath(rel) == rel and rel != os.pardir \
                and not rel.startswith(os.pardir + os.sep):
            return rel
    return os.path.relpath(path, root)


def read_group(root: str, paths: list[str], fmt: str, env: str | None, threshold: float, cfg: ParseConfig
               ) -> tuple[list[Trajectory], list[QuarantineRow], GroupResult]:
    """Read and rank one group of files: ``(selected trajectories in read order, quarantine rows,
    result)`` with positions in ``result.ranked`` indexing the returned trajectories."""
    trajs, quarantine, by_format, inputs = [], [], Counter(), []
    for path in paths:
        rel = relative_path(path, root)  # URIs relative to the input root: ids independent of location
        digest, unreadable = hashlib.sha256(), False
        for item in read_file(path, fmt, env, threshold, source_uri=rel, digest=digest):
            if isinstance(item, QuarantineRow):
                item.source_uri = rel
                quarantine.append(item)
                unreadable = unreadable or item.reason == "unreadable_file"
            else:  # ids hash (source URI, record index, content): unique per record
                trajs.append(item if item.source_uri == rel else rebase(item, rel))
                by_format[item.source_format] += 1
        inputs.append((rel, UNREADABLE if unreadable else digest.hexdigest()))  # as lineage.input_sha256
    first: dict[bytes, Trajectory] = {}
    unique, digests = [], {}
    for t in trajs:
        d = digests[t.trajectory_id] = content_digest(t)
        if d in first:
            quarantine.append(not_kept(t, "duplicate_trajectory", _same_as(first[d].trajectory_id)))
        else:
            first[d] = t
            unique.append(t)
    ranked, dropped = rank_instances(unique, cfg)
    kept = []
    for t in unique:
        if t.trajectory_id in dropped:
            quarantine.append(not_kept(t, "not_selected", dropped[t.trajectory_id]))
        else:
            kept.append(t)
    pos = {t.trajectory_id: i for i, t in enumerate(kept)}
    return kept, quarantine, GroupResult(
        [(key, has_s, [pos[t.trajectory_id] for t in items]) for key, has_s, items in ranked],
        [(t.source_format, f"{t.env}/{t.category}/{t.outcome}", t.trajectory_id, digests[t.trajectory_id])
         for t in kept],
        Counter(q.reason for q in quarantine), by_format, inputs)


@dataclass
class ChunkResult:
    """What a worker returns for one chunk of consecutive groups: the selected rows of all of
    them (group after group) and their quarantine rows, as Parquet parts encoded in the worker,
    and each group's result, with ``ranked`` positions counted over the whole chunk."""
    parts: list[EncodedPart]
    quarantine: list[EncodedPart]
    groups: list[GroupResult]


def read_chunk(args: tuple[str, list[list[str]], str, str | None, float, ParseConfig]) -> ChunkResult:
    """Read consecutive groups (runs in a worker process, or in-process for small inputs).

    Rows are encoded to Parquet here, ``BATCH_ROWS`` at a time (one row group each): only the
    compressed bytes go back to the main process, which writes them as they are. Pickling the
    Arrow tables instead moved ~30x more bytes and left the Parquet encoding to the main process,
    which competed with the workers for the two cores.
    """
    root, groups, fmt, env, threshold, cfg = args
    rows, qrows, results = PartEncoder(TRAJECTORY_SCHEMA), PartEncoder(QUARANTINE_SCHEMA), []
    kept: list[Trajectory] = []
    bad_rows: list[QuarantineRow] = []
    base = 0
    for paths in groups:
        trajs, quarantine, res = read_group(root, paths, fmt, env, threshold, cfg)
        res.ranked = [(key, has_s, [base + p for p in items]) for key, has_s, items in res.ranked]
        base += len(trajs)
        kept += trajs
        bad_rows += quarantine
        results.append(res)
        if len(kept) >= BATCH_ROWS:
            rows.write(trajectories_table(kept))
            kept = []
            pa.default_memory_pool().release_unused()  # the encoded batch's buffers: bound RSS
        if len(bad_rows) >= BATCH_ROWS:
            qrows.write(to_table([q.__dict__ for q in bad_rows], QUARANTINE_SCHEMA))
            bad_rows = []
    if kept:
        rows.write(trajectories_table(kept))
    if bad_rows:
        qrows.write(to_table([q.__dict__ for q in bad_rows], QUARANTINE_SCHEMA))
    return ChunkResult(rows.finish(), qrows.finish(), results)


#: Quarantine reasons of trajectories that were read fine but are not kept (not input units of their own).
SELECTION_REASONS = ("not_selected", "duplicate_trajectory")


def _same_as(trajectory_id: str) -> str:
    return f"same content as {trajectory_id}, which is kept"


def not_kept(t: Trajectory | dict, reason: str, why: str) -> QuarantineRow:
    """A read trajectory not kept (``reason`` in ``SELECTION_REASONS``), whole row as JSON in ``raw``."""
    row = t if isinstance(t, dict) else trajectory_row(t)
    return bad(reason, why, row["source_uri"], row["source_line"], json.dumps(row, ensure_ascii=False),
               item_id=row["trajectory_id"], limit=None)


def _chunks(groups: Iterator[list[str]], total: int, workers: int) -> Iterator[list[list[str]]]:
    """Consecutive whole groups cut into tasks of shrinking size (guided self-scheduling, the
    "factoring" rule of Hummel, Schonberg and Flynn, 1992): each task takes about the files
    still to hand out divided by ``2 * workers``, at most ``CHUNK_FILES`` and at least
    ``MIN_TASK_FILES`` (a group is never split). Early tasks are large (little per-task
    overhead) and the last ones small, so no worker idles long at the end: with equal tasks of
    375 files the last one ran ~0.09 s alone on the 3,000-env tree. ``total``: the files in
    ``groups``; ``workers <= 1`` gives ``CHUNK_FILES``-file tasks."""
    def size(left: int) -> int:
        return CHUNK_FILES if workers <= 1 else min(CHUNK_FILES, max(MIN_TASK_FILES, left // (2 * workers)))

    chunk, n, left = [], 0, total
    for g in groups:
        chunk.append(g)
        n += len(g)
        if n >= size(left):
            yield chunk
            left -= n
            chunk, n = [], 0
    if chunk:
        yield chunk


def _results(root: str, files: list[str], cfg: ParseConfig, env: str | None) -> Iterator[ChunkResult]:
    workers = worker_count(WORKERS) if len(files) >= MIN_FILES_FOR_POOL else 1
    tasks = ((root, c, cfg.format, env, cfg.success_threshold, cfg)
             for c in _chunks(iter(file_groups(files)), len(files), workers))
    return ordered_map(read_chunk, tasks, workers, chunk=1, what="parse worker")


def _drop_rows(parts: list[EncodedPart], dropped: dict[int, tuple[str, str]]
               ) -> tuple[list[EncodedPart], list[QuarantineRow]]:
    """``parts`` without the rows at the chunk positions in ``dropped`` (re-encoded), and those
    rows as quarantine rows ``{position: (reason, why)}``, in ``dropped`` order (a global cap or a
    duplicate across folders: rare)."""
    table = pa.concat_tables([decode_part(p) for p in parts])
    quarantine = [not_kept(table.slice(p, 1).to_pylist()[0], reason, why) for p, (reason, why) in dropped.items()]
    encoder = PartEncoder(TRAJECTORY_SCHEMA)
    keep = [i for i in range(table.num_rows) if i not in dropped]
    if keep:
        encoder.write(table.take(keep))
    return encoder.finish(), quarantine


class CrossGroup:
    """Selection across groups, in stream order: exact duplicates of an earlier kept row and the
    global caps (:class:`~pipeline.selection.GlobalCaps`). One instance runs over the groups of
    an unsharded parse; in a sharded run one runs over every shard's groups in shard order
    (:meth:`Parse.reduce_shards`), which is the same stream."""

    def __init__(self, cfg: ParseConfig):
        self.gcaps = GlobalCaps(cfg)
        # content digest -> trajectory id of every kept row so far, both as ints (8 bytes of the
        # digest; ids are "traj-" + 16 hex): ~100 bytes per row instead of ~170
        self.first: dict[int, int] = {}

    def group(self, rows: list[tuple[str, bytes]], ranked, start: int, dropped: dict[int, tuple[str, str]]
              ) -> set[tuple[str, str]]:
        """Select one group: ``rows`` ``(trajectory id, content digest)`` at positions ``start``..,
        ``ranked`` its ``(instance, has_success, positions)``; adds ``{position: (reason, why)}``
        to ``dropped`` and returns the instances that keep a row."""
        kept = set()
        for p, (tid, digest_) in enumerate(rows, start):
            dkey = int.from_bytes(digest_[:8], "little")  # 64 bits: ~3e-8 odds of a false match in 1e6 rows
            if dkey in self.first:  # a copy of a row of an earlier group
                dropped[p] = ("duplicate_trajectory", _same_as(f"traj-{self.first[dkey]:0{ID_HEX}x}"))
            else:
                self.first[dkey] = int(tid[5:], 16)
        for key, has_success, items in ranked:
            items = [p for p in items if p not in dropped]
            for p, why in zip(items, self.gcaps.admit(key, has_success, len(items)) if items else ()):
                if why:
                    dropped[p] = ("not_selected", why)
                else:
                    kept.add(key)
        return kept


class _Selection:
    """The main process's side of selection: global caps and cross-group duplicates over the
    chunks in order (:class:`CrossGroup`), and the counters of the manifest. ``local``: one
    shard of a sharded run, where the cross-group pass is left to :meth:`Parse.reduce_shards`
    and each group's facts are kept for it instead (:meth:`facts`)."""

    def __init__(self, cfg: ParseConfig, out: StageOutput, inputs: InputDigest, local: bool = False):
        self.cross, self.out, self.inputs, self.local = CrossGroup(cfg), out, inputs, local
        self.read_by_format, self.kept_by_format, self.kept_by_cat = Counter(), Counter(), Counter()
        self.seen_instances: set[tuple[str, str]] = set()
        self.kept_instances: set[tuple[str, str]] = set()
        self.split: set[tuple[str, str]] = set()
        self.groups: list[dict] = []  # local mode: per group {"rows": [[id, digest hex]], "ranked": [...]}
        self.rows = 0  # rows emitted so far (local mode: positions in the shard)

    def chunk(self, chunk: ChunkResult) -> dict[int, tuple[str, str]]:
        """``{chunk row position: (reason, why)}`` of the chunk's rows dropped here."""
        dropped: dict[int, tuple[str, str]] = {}
        start = 0
        for res in chunk.groups:
            self._group(res, start, dropped)
            start += len(res.facts)
        self.rows += start
        return dropped

    def _group(self, res: GroupResult, start: int, dropped: dict[int, tuple[str, str]]) -> None:
        for rel, sha in res.inputs:
            self.inputs.add(rel, sha)
        self.read_by_format.update(res.read_by_format)
        self.out.rows_in += sum(res.read_by_format.values()) + sum(
            n for reason, n in res.reasons.items() if reason not in SELECTION_REASONS)
        for key, _, _ in res.ranked:
            self.split.update({key} & self.seen_instances)
            self.seen_instances.add(key)
        rows = [(tid, digest_) for _, _, tid, digest_ in res.facts]
        if self.local:
            base = self.rows + start
            self.groups.append({"start": base, "rows": [[tid, d.hex()] for tid, d in rows],
                                "ranked": [[*key, has_s, [self.rows + p for p in items]] for key, has_s, items in res.ranked]})
            self.kept_instances.update(key for key, _, items in res.ranked if items)
        else:
            self.kept_instances |= self.cross.group(rows, res.ranked, start, dropped)
        for p, (fmt, cat, _, _) in enumerate(res.facts, start):
            if p not in dropped:
                self.kept_by_format[fmt] += 1
                self.kept_by_cat[cat] += 1

    def counters(self) -> dict:
        return {"files": self.inputs.files,
                "read_by_source_format": dict(sorted(self.read_by_format.items())),
                "kept_by_source_format": dict(sorted(self.kept_by_format.items())),
                "kept_by_env_category_outcome": dict(sorted(self.kept_by_cat.items())),
                "kept_instances": len(self.kept_instances),
                "instances_split_across_groups": len(self.split)}


#: In a shard's artifact: each group's rows and ranking, for the cross-shard pass.
FACTS_FILE = "_selection_facts.json"
#: In the stage folder of a sharded parse: per shard, its rows dropped by the cross-shard pass.
DROPS_DIR = "_selection"


def shard_drops(stage_dir: str, shard: str) -> list[tuple[int, str, str]]:
    """``[(row position in the shard's parse artifact, reason, why)]`` the cross-shard pass
    dropped from ``shard`` (:meth:`Parse.reduce_shards`); remove_loops quarantines them.
    Raises ``ArtifactError`` when the parse shards were not collected, ``ValueError`` for an
    unreadable file."""
    path = os.path.join(stage_dir, DROPS_DIR, f"{shard}.json")
    try:
        with open(path, encoding="utf-8") as f:
            return [tuple(d) for d in json.load(f)["drops"]]
    except FileNotFoundError:
        raise ArtifactError(f"{path} is missing: the parse shards were not collected (the cross-shard pass); "
                            "run parse again (skillpipe run --stages parse, or the DAG's parse_all task)") from None


@dataclass
class ParseOutput(StageOutput):
    """What parse returns: the stream of its rows and quarantine, and ``input_facts``, the facts of
    the files it read (:class:`InputDigest`), set before the stream's last batch."""
    input_facts: list[dict] | None = None


class Parse(Stage):
    """Read the input files into trajectories and select (module docstring)."""
    name = "parse"
    schema = TRAJECTORY_SCHEMA
    config_sections = ("parse",)
    sharded = True

    @staticmethod
    def _files(ctx: StageContext) -> tuple[str, list[str]]:
        """``(input root, input files in path order)`` of the run, or of ``ctx.shard``."""
        if ctx.shard:
            return ctx.plan.input_root, ctx.plan.files(ctx.shard)
        return input_root(ctx.input_path), list_input_files(ctx.input_path)

    def input_facts(self, ctx: StageContext) -> list[dict]:
        """The files under ``ctx.input_path`` (or of the shard), hashed (:class:`InputDigest`)."""
        (root, files), digest = self._files(ctx), InputDigest()
        for p in files:  # serial: threads only fight over the GIL here
            digest.add(os.path.relpath(p, root), input_sha256(p))
        return digest.facts()

    def facts_after_run(self, ctx: StageContext, out: StageOutput) -> list[dict]:
        """The facts the run learned while reading (:attr:`ParseOutput.input_facts`); hashed again
        (:meth:`input_facts`) only when the run did not report them."""
        facts = getattr(out, "input_facts", None)
        return self.input_facts(ctx) if facts is None else facts

    def run(self, ctx: StageContext) -> ParseOutput:
        """Read ``ctx.input_path``; see the module docstring. Counts: in = kept + quarantined."""
        cfg = ctx.config.parse
        root, files = self._files(ctx)
        out = ParseOutput(rows=[], quarantine=[], rows_in=0)
        inputs = InputDigest()
        selection = _Selection(cfg, out, inputs, local=bool(ctx.shard))

        def stream():
            for chunk in _results(root, files, cfg, ctx.env):
                dropped = selection.chunk(chunk)
                parts, capped = _drop_rows(chunk.parts, dropped) if dropped else (chunk.parts, [])
                for part in parts:
                    yield part, []
                for qpart in chunk.quarantine:
                    yield [], qpart
                if capped:
                    yield [], capped
            out.counters.update(selection.counters())
            out.input_facts = inputs.facts()
            if selection.local:
                out.extra_files[FACTS_FILE] = json.dumps({"groups": selection.groups}, separators=(",", ":"))

        out.stream = stream()
        return out

    def reduce_shards(self, ctx: StageContext, shards: list) -> dict[str, bytes | str]:
        """The cross-shard pass: :class:`CrossGroup` over every shard's groups in shard order (the
        unsharded stream order), so exact duplicates across shards and the global caps drop
        exactly the rows an unsharded parse drops. Returns ``_selection/<shard>.json`` per shard:
        ``{"drops": [[row position, reason, why]]}``."""
        cross, files = CrossGroup(ctx.config.parse), {}
        for art in shards:
            with open(os.path.join(art.path, FACTS_FILE), encoding="utf-8") as f:
                groups = json.load(f)["groups"]
            dropped: dict[int, tuple[str, str]] = {}
            for g in groups:
                rows = [(tid, bytes.fromhex(d)) for tid, d in g["rows"]]
                cross.group(rows, [((e, i), has_s, items) for e, i, has_s, items in g["ranked"]], g["start"], dropped)
            files[f"{DROPS_DIR}/{os.path.basename(art.path)}.json"] = json.dumps(
                {"drops": [[p, r, w] for p, (r, w) in sorted(dropped.items())]}, ensure_ascii=False)
        return files


STAGE = Parse()

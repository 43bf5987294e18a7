"""Artifact store: one folder per stage of a run, written atomically, with a manifest.

Layout::

    <root>/runs/<run_id>/<stage>/part-00000.parquet
    <root>/runs/<run_id>/<stage>/_quarantine/part-00000.parquet
    <root>/runs/<run_id>/<stage>/<extra files>           (e.g. export's llamafactory/*.jsonl)
    <root>/runs/<run_id>/<stage>/_manifest.json   (written last, by pipeline.core.recorder)

Quarantine parts and the manifest sit under ``_``-prefixed names, which Parquet dataset readers
(``pyarrow.dataset``, ``pandas.read_parquet``, Spark, DuckDB's hive reader) skip by convention, so
``pd.read_parquet("runs/ID/build_pairs")`` returns the stage's good rows only. Runs written before
this layout keep their quarantine in ``quarantine/``; :func:`quarantine_dir` still finds it.

A map stage of a run planned into several shards (:mod:`pipeline.engine.shards`) writes one full
artifact per shard, ``<stage>/shard-NNNNN/`` (parts, ``_quarantine/``, ``_manifest.json`` with its
own fingerprint and counts), and a stage manifest ``<stage>/_manifest.json`` that lists the shards
(``shards``), sums their counts and lists their files (``shard-NNNNN/part-00000.parquet``...).
:func:`parquet_parts` of such a folder returns every shard's parts in shard order (and of its
``_quarantine`` every shard's quarantine), so readers of the flat layout work unchanged;
``pyarrow.dataset`` on the stage folder reads ``shard-*/part-*.parquet`` and skips the
``_quarantine`` folders by the same ``_`` convention.

A stage whose rows carry a split (export) may instead lay its rows out per split as the Hugging
Face Hub does, ``data/<split>-00000-of-00001.parquet`` (see :meth:`ArtifactStore.write`), so
``datasets.load_dataset(<stage folder>)`` loads one split per file name.

A stage is written into a temporary sibling folder and renamed into place only when complete,
so a crashed or retried task never leaves a half-written artifact and never appends to an old
one. ``<root>`` is a local folder: an object-storage root (``s3://...``) is mirrored to one by
:mod:`pipeline.engine.remote`, which commits each artifact there without a rename (manifest last).
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.core.fsutil import atomic_write
from pipeline.core.layout import ARTIFACT_MANIFEST, is_shard_id, run_dir
from pipeline.core.recorder import QUARANTINE_DIRS, QuarantineTally, content_sha256, record
from pipeline.core.records import QUARANTINE_SCHEMA, QuarantineRow, to_table

MANIFEST = ARTIFACT_MANIFEST  # the name is declared in pipeline.core.layout
# "_quarantine": skipped by Parquet dataset readers (see module docstring); "quarantine": runs written
# before the rename (declared with the recorder, which leaves both out of the content hash)
QUARANTINE_DIR, LEGACY_QUARANTINE_DIR = QUARANTINE_DIRS
SPLIT_DATA_DIR = "data"  # per-split parts: data/<split>-NNNNN-of-MMMMM.parquet (Hugging Face Hub naming)
PART_ROWS = 50_000  # rows per Parquet part
ZSTD_LEVEL = 1  # measured: same file size as the default level on trajectory text, ~15 % less CPU


class ArtifactError(RuntimeError):
    """Raised when an artifact is missing, incomplete or does not match its declared schema."""


@dataclass
class StageArtifact:
    """A complete stage folder on disk."""
    path: str
    manifest: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        """The stage fingerprint the manifest records (32 hex characters, see
        :func:`pipeline.engine.runner.fingerprint`); ``KeyError`` if the manifest has none."""
        return self.manifest["fingerprint"]

    @property
    def content_sha256(self) -> str:
        """Hash of what downstream stages read (:func:`content_sha256`): from the manifest, or
        computed from the files for an artifact written before manifests recorded it."""
        return self.manifest.get("content_sha256") or content_sha256(self.path, self.manifest)

    def read_table(self, quarantine: bool = False) -> pa.Table:
        """The stage's rows (or its quarantine rows) as one table; raises :class:`ArtifactError`.
        The quarantine of a sharded stage whose older shards were written before the ``kind``
        column reads with ``kind`` null in their rows (a unit)."""
        return read_parquet_dir(quarantine_dir(self.path), promote=True) if quarantine else read_parquet_dir(self.path)

    def read_rows(self, quarantine: bool = False) -> list[dict[str, Any]]:
        """:meth:`read_table` as a list of row dicts (column -> value); raises :class:`ArtifactError`."""
        return self.read_table(quarantine).to_pylist()


def quarantine_dir(stage_dir: str) -> str:
    """The quarantine folder of a stage folder: ``_quarantine/``, or ``quarantine/`` in a run
    written before the rename (when only that one exists)."""
    new, old = os.path.join(stage_dir, QUARANTINE_DIR), os.path.join(stage_dir, LEGACY_QUARANTINE_DIR)
    return old if not os.path.isdir(new) and os.path.isdir(old) else new


def shard_dirs(stage_dir: str) -> list[str]:
    """The shard folders of a sharded stage folder, in shard order: those its stage manifest
    lists (``shards``), else every ``shard-NNNNN`` folder holding a manifest. Empty for a flat
    (one-shard) artifact or no folder."""
    try:
        with open(os.path.join(stage_dir, MANIFEST), encoding="utf-8") as f:
            listed = json.load(f).get("shards")
        if isinstance(listed, list):
            return [os.path.join(stage_dir, s["id"]) for s in listed]
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        pass
    if not os.path.isdir(stage_dir):
        return []
    return [os.path.join(stage_dir, d) for d in sorted(os.listdir(stage_dir))
            if is_shard_id(d) and os.path.exists(os.path.join(stage_dir, d, MANIFEST))]


def parquet_parts(folder: str) -> list[str]:
    """Paths of the Parquet parts of an artifact folder, in read order: its ``part-*.parquet``
    files, or, for a stage laid out per split, ``data/*.parquet`` (split files sorted by name).
    For a sharded stage folder, the parts of every shard in shard order; for the ``_quarantine``
    folder of a sharded stage (which does not exist), every shard's quarantine parts.
    Empty when there are none (or no such folder)."""
    if not os.path.isdir(folder):
        parent, base = os.path.split(os.path.normpath(folder))
        if base in (QUARANTINE_DIR, LEGACY_QUARANTINE_DIR):
            return [p for d in shard_dirs(parent) for p in parquet_parts(quarantine_dir(d))]
        return []
    parts = sorted(f for f in os.listdir(folder) if f.startswith("part-") and f.endswith(".parquet"))
    if parts:
        return [os.path.join(folder, p) for p in parts]
    data = os.path.join(folder, SPLIT_DATA_DIR)
    if os.path.isdir(data):
        return [os.path.join(data, p) for p in sorted(os.listdir(data)) if p.endswith(".parquet")]
    return [p for d in shard_dirs(folder) for p in parquet_parts(d)]


def read_parquet_dir(folder: str, promote: bool = False) -> pa.Table:
    """Read all Parquet parts of an artifact folder (:func:`parquet_parts`) into one table;
    ``promote``: parts whose schemas differ by a missing column are read with it null.

    Raises :class:`ArtifactError` when there are none."""
    parts = parquet_parts(folder)
    if not parts:
        raise ArtifactError(f"no Parquet parts in {folder}")
    return pa.concat_tables([pq.read_table(p) for p in parts], promote_options="default" if promote else "none")


def _write_sliced(folder: str, table: pa.Table, name_of) -> list[str]:
    """Write ``table`` in slices of ``PART_ROWS`` rows (at least one file, even when empty) as
    ``folder/name_of(i, n_parts)``; returns those relative names in order."""
    n_parts = max(1, -(-table.num_rows // PART_ROWS))
    names = []
    for i in range(n_parts):
        name = name_of(i, n_parts)
        pq.write_table(table.slice(i * PART_ROWS, PART_ROWS), os.path.join(folder, name), compression="zstd",
                       compression_level=ZSTD_LEVEL)
        names.append(name)
    return names


def _write_parts(folder: str, table: pa.Table) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    return _write_sliced(folder, table, lambda i, n: f"part-{i:05d}.parquet")


def _write_split_parts(folder: str, table: pa.Table, column: str, names: dict[str, str]) -> list[str]:
    """Write ``table`` split by the values of ``column`` as
    ``data/<names[value]>-NNNNN-of-MMMMM.parquet`` (the Hugging Face Hub's sharded split naming,
    which ``datasets.load_dataset`` maps to splits before any other file name pattern), rows in
    their order. A split with no rows gets no file; an empty table one empty ``train`` file (the
    first name), so the schema stays readable. Raises :class:`ArtifactError` for a value that is
    not a key of ``names``."""
    values = table.column(column).to_pylist()
    unknown = sorted({str(v) for v in values} - set(names))
    if unknown:
        raise ArtifactError(f"column {column!r} holds {unknown}, which has no split file name (known: {sorted(names)})")
    os.makedirs(os.path.join(folder, SPLIT_DATA_DIR), exist_ok=True)
    pieces = [(names[v], table.filter(pc.equal(table.column(column), v))) for v in names]
    pieces = [(n, t) for n, t in pieces if t.num_rows] or [(next(iter(names.values())), table)]
    files = []
    for name, piece in pieces:
        files += _write_sliced(folder, piece,
                               lambda i, n, name=name: f"{SPLIT_DATA_DIR}/{name}-{i:05d}-of-{n:05d}.parquet")
    return files


@dataclass
class EncodedPart:
    """A complete Parquet file (one artifact part) encoded in memory, e.g. by a worker process.

    Worker processes encode their own output (Parquet-zstd is ~30x smaller than the Arrow
    buffers on trajectory text), so only these bytes cross the process boundary and the main
    process just writes them as the next part file. Build with :class:`PartEncoder`.

    Attributes:
        data: the Parquet file's bytes.
        rows: its number of rows.
        reasons: for a quarantine part, ``{reason: rows}`` of its ``unit`` rows, and
        kinds: ``{kind: rows}`` of all its rows (the store counts the quarantine from them).
    """
    data: bytes
    rows: int
    reasons: dict[str, int] | None = None
    kinds: dict[str, int] | None = None

    def __len__(self) -> int:
        return self.rows


class PartEncoder:
    """Encodes tables of ``schema`` into in-memory Parquet parts (:class:`EncodedPart`) of at most
    ``PART_ROWS`` rows, each ``write`` one row group; same compression as the files written here.

    Raises :class:`ArtifactError` when a table's schema is not exactly ``schema``.
    """

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.parts: list[EncodedPart] = []
        self._sink = self._writer = None
        self._rows = 0
        self._tally: QuarantineTally | None = QuarantineTally() if schema.equals(QUARANTINE_SCHEMA) else None

    def write(self, table: pa.Table) -> None:
        """Append ``table``'s rows, starting a new part each ``PART_ROWS`` rows; raises
        :class:`ArtifactError` when its schema is not exactly ``schema``."""
        if not table.schema.equals(self.schema):
            raise ArtifactError(f"table schema differs from the declared schema:\n{table.schema}\nvs\n{self.schema}")
        offset = 0
        while offset < table.num_rows:
            if self._writer is None or self._rows >= PART_ROWS:
                self._flush()
                self._sink = pa.BufferOutputStream()
                self._writer = pq.ParquetWriter(self._sink, self.schema, compression="zstd",
                                                compression_level=ZSTD_LEVEL)
            n = min(PART_ROWS - self._rows, table.num_rows - offset)
            piece = table.slice(offset, n)
            self._writer.write_table(piece)
            if self._tally is not None:  # a quarantine part: count its kinds and reasons for the manifest
                kinds = piece.column("kind").to_pylist() if "kind" in piece.column_names else ["unit"] * n
                for kind, reason in zip(kinds, piece.column("reason").to_pylist()):
                    self._tally.add(kind, reason)
            self._rows += n
            offset += n

    def _flush(self) -> None:
        if self._writer is not None:
            self._writer.close()
            tally = self._tally
            self.parts.append(EncodedPart(self._sink.getvalue().to_pybytes(), self._rows,
                                          *((dict(tally.reasons), dict(tally.kinds)) if tally else (None, None))))
        self._sink = self._writer = None
        self._rows = 0
        self._tally = None if self._tally is None else QuarantineTally()

    def finish(self) -> list[EncodedPart]:
        """The encoded parts, in order (none if nothing was written)."""
        self._flush()
        return self.parts


def decode_part(part: EncodedPart) -> pa.Table:
    """The table of an :class:`EncodedPart`."""
    return pq.read_table(pa.BufferReader(part.data))


class _PartWriter:
    """Streams record batches into ``part-NNNNN.parquet`` files of at most ``PART_ROWS`` rows.

    A batch is a list of row dicts, a table of exactly the schema, or an :class:`EncodedPart`,
    which becomes a part file of its own (written as is, after checking its schema and rows).
    """

    def __init__(self, folder: str, schema: pa.Schema):
        self.folder, self.schema = folder, schema
        self.names: list[str] = []
        self.rows = 0
        self._writer = None
        self._in_part = 0
        os.makedirs(folder, exist_ok=True)

    def write(self, rows: list[dict[str, Any]] | pa.Table | EncodedPart) -> None:
        if isinstance(rows, EncodedPart):
            self._write_encoded(rows)
            return
        if isinstance(rows, pa.Table):  # built by a worker process: must already match exactly
            if not rows.schema.equals(self.schema):
                raise ArtifactError(f"batch schema differs from the declared schema:\n{rows.schema}\nvs\n{self.schema}")
            table = rows
        else:
            table = to_table(rows, self.schema)
        offset = 0
        while offset < table.num_rows:
            if self._writer is None or self._in_part >= PART_ROWS:
                self._open()
            n = min(PART_ROWS - self._in_part, table.num_rows - offset)
            self._writer.write_table(table.slice(offset, n))
            self._in_part += n
            offset += n
        self.rows += table.num_rows

    def _write_encoded(self, part: EncodedPart) -> None:
        meta = pq.ParquetFile(pa.BufferReader(part.data)).metadata  # the footer only
        if not meta.schema.to_arrow_schema().equals(self.schema) or meta.num_rows != part.rows \
                or part.rows > PART_ROWS:
            raise ArtifactError(f"encoded part does not match: {meta.num_rows} rows (declared {part.rows}, "
                                f"max {PART_ROWS}), schema:\n{meta.schema.to_arrow_schema()}\nvs\n{self.schema}")
        if self._writer is not None:  # rows so far stay in their own part, before this one
            self._writer.close()
            self._writer = None
        name = f"part-{len(self.names):05d}.parquet"
        with open(os.path.join(self.folder, name), "wb") as f:
            f.write(part.data)
        self.names.append(name)
        self._in_part = PART_ROWS  # the next row batch opens a new part
        self.rows += part.rows

    def _open(self) -> None:
        if self._writer is not None:
            self._writer.close()
        name = f"part-{len(self.names):05d}.parquet"
        self._writer = pq.ParquetWriter(os.path.join(self.folder, name), self.schema, compression="zstd",
                                        compression_level=ZSTD_LEVEL)
        self.names.append(name)
        self._in_part = 0

    def close(self) -> list[str]:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if not self.names:  # an empty artifact still has one (empty) part with the schema
            self._open()
            self._writer.close()
            self._writer = None
        return self.names


class ArtifactStore:
    """Reads and writes the stage artifacts of one run.

    Args:
        root: folder under which ``runs/<run_id>/`` lives.
        run_id: the run's id (letters, digits, ``-``, ``_``, ``.``; raises ``ValueError`` otherwise,
            so a run id from a DAG param can never escape the root).
    """

    def __init__(self, root: str, run_id: str):
        if not run_id or not all(c.isalnum() or c in "-_." for c in run_id) or run_id.startswith("."):
            raise ValueError(f"invalid run id {run_id!r}: use letters, digits, '-', '_' and '.'")
        self.root = os.path.abspath(root)
        self.run_id = run_id
        self.run_dir = run_dir(self.root, run_id)

    def stage_dir(self, stage: str, shard: str | None = None) -> str:
        """``runs/<run_id>/<stage>``, or its shard folder ``.../<stage>/<shard>``."""
        return os.path.join(self.run_dir, stage, shard) if shard else os.path.join(self.run_dir, stage)

    def load(self, stage: str, shard: str | None = None) -> StageArtifact | None:
        """The complete artifact of ``stage`` (or of its shard ``shard``), or ``None`` if it was
        never written, is incomplete, or its manifest cannot be read (a rerun replaces it)."""
        return self._load(stage, shard)[0]

    def _load(self, stage: str, shard: str | None = None) -> tuple[StageArtifact | None, str]:
        """``(artifact or None, why not)``."""
        path = self.stage_dir(stage, shard)
        mpath = os.path.join(path, MANIFEST)
        if not os.path.exists(mpath):
            return None, "has no complete artifact"
        try:
            with open(mpath, encoding="utf-8") as f:
                manifest = json.load(f)
        except (OSError, ValueError) as e:  # ValueError: JSONDecodeError, UnicodeDecodeError
            return None, f"has an unreadable manifest {mpath} ({type(e).__name__}: {e})"
        if not isinstance(manifest, dict) or manifest.get("status") != "complete":
            return None, "has no complete artifact"
        return StageArtifact(path, manifest), ""

    def require(self, stage: str, shard: str | None = None) -> StageArtifact:
        """The complete artifact of ``stage`` (or of its shard ``shard``), with every file its
        manifest lists present.

        Raises :class:`ArtifactError` (with the command that rebuilds it) otherwise."""
        art, why = self._load(stage, shard)
        rerun = (f"run it again (skillpipe run --run-id {self.run_id} --stages {stage}: what is missing or "
                 "unreadable is rebuilt, the rest skipped)")
        if art is None:
            raise ArtifactError(f"stage '{stage}'{f' {shard}' if shard else ''} {why} in {self.run_dir}; "
                                + (rerun if "unreadable" in why else
                                   f"run it first (skillpipe run --run-id {self.run_id} --stages {stage})"))
        missing = [f for f in art.manifest.get("files", []) if not os.path.exists(os.path.join(art.path, f))]
        if missing:
            raise ArtifactError(f"stage '{stage}' artifact {art.path} is missing {len(missing)} of its files "
                                f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); {rerun}")
        return art

    def write(self, stage: str, table: pa.Table, quarantine: list[QuarantineRow],
              manifest: dict[str, Any], extra_files: dict[str, bytes | str] | None = None,
              split_files: tuple[str, dict[str, str]] | None = None, shard: str | None = None) -> StageArtifact:
        """Write a stage (or its shard ``shard``) atomically: temp folder, then rename over any
        previous version. ``manifest``: what the work reports (``fingerprint``, ``counts`` built by
        :func:`pipeline.core.recorder.counts`...); :func:`pipeline.core.recorder.record` writes it last.

        ``split_files``: ``(column, {value: split file name})`` lays the rows out per split
        (``data/<name>-NNNNN-of-MMMMM.parquet``, see the module docstring) instead of ``part-*``.
        """
        def body(tmp: str) -> tuple[list[str], dict[str, Any], dict[str, bytes | str]]:
            files = _write_split_parts(tmp, table, *split_files) if split_files else _write_parts(tmp, table)
            qtable = to_table([q.__dict__ for q in quarantine], QUARANTINE_SCHEMA)
            files += [f"{QUARANTINE_DIR}/{n}" for n in _write_parts(os.path.join(tmp, QUARANTINE_DIR), qtable)]
            return files, manifest, extra_files or {}
        return self._transaction(stage, body, shard)

    def write_stream(self, stage: str, schema: pa.Schema,
                     batches: Iterable[tuple[list[dict[str, Any]] | pa.Table | EncodedPart,
                                             list[QuarantineRow] | EncodedPart]],
                     finish: Callable[[int, QuarantineTally], tuple[dict[str, Any], dict[str, bytes | str]]],
                     shard: str | None = None) -> StageArtifact:
        """Stream ``(rows, quarantine_rows)`` batches to Parquet parts with bounded memory, then
        call ``finish(n_rows, quarantine tally) -> (manifest, extra_files)`` (the tally counts the
        quarantine rows by kind and the units' reasons); atomic like :meth:`write`.
        ``rows`` may be dicts, a table of ``schema`` or an :class:`EncodedPart`; quarantine rows
        may be :class:`QuarantineRow` objects or an encoded part of ``QUARANTINE_SCHEMA``."""
        def body(tmp: str):
            out, qout = _PartWriter(tmp, schema), _PartWriter(os.path.join(tmp, QUARANTINE_DIR), QUARANTINE_SCHEMA)
            tally = QuarantineTally()
            try:
                for rows, qrows in batches:
                    if len(rows):
                        out.write(rows)
                    if isinstance(qrows, EncodedPart):  # encoded by a worker: it counted its rows
                        tally.merge(qrows.kinds if qrows.kinds is not None else {"unit": qrows.rows}, qrows.reasons)
                        qout.write(qrows)
                    elif qrows:
                        tally.add_rows(qrows)
                        qout.write([q.__dict__ for q in qrows])
            finally:
                files = out.close() + [f"{QUARANTINE_DIR}/{n}" for n in qout.close()]
            manifest, extra = finish(out.rows, tally)
            return files, manifest, extra
        return self._transaction(stage, body, shard)

    def _transaction(self, stage: str, body, shard: str | None = None) -> StageArtifact:
        final = self.stage_dir(stage, shard)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        label = f"{stage}.{shard}" if shard else stage  # temp names: .<stage>[.<shard>].tmp-*
        tmp = os.path.join(self.run_dir, f".{label}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            os.makedirs(tmp)
            files, manifest, extra_files = body(tmp)
            for name, data in extra_files.items():
                if os.path.isabs(name) or ".." in name.split("/"):
                    raise ValueError(f"extra file name escapes the stage folder: {name!r}")
                p = os.path.join(tmp, name)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                atomic_write(p, data)
                files.append(name)
            manifest = record(tmp, manifest, files)  # the manifest last: status, files, content hash
            old = None
            if os.path.exists(final):
                old = os.path.join(self.run_dir, f".{label}.old-{uuid.uuid4().hex[:8]}")
                os.rename(final, old)
            os.rename(tmp, final)
            if old:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            if os.path.exists(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
        return StageArtifact(final, manifest)

"""Persistent response cache: one SQLite file, WAL mode, only validated answers.

A crashed or repeated run re-spends nothing: before any HTTP call the
client looks up :func:`cache_key`; after an answer passes JSON extraction, the schema and the
request's check, it is stored. Failures are never stored, so a rerun retries them. Batch mode
also records each job it submits here, under keys ``batch:<input file id>`` that no
:func:`cache_key` can take (:mod:`pipeline.llm.batch`).

The SQLite file is local to one worker (:data:`CACHE_FILE` in the run folder). For a run on
object storage, entries travel between workers as immutable **cache parts**: Parquet files of
:data:`PART_SCHEMA` written by :func:`encode_part` from :meth:`ResponseCache.entries_after` and
loaded by :func:`decode_part` + :meth:`ResponseCache.import_entries`
(:mod:`pipeline.engine.remote` checkpoints and restores them); no SQLite file is ever shared over
network storage. Once a unit is committed its parts are merged into one
(:func:`compact_entries`), so a long shard does not leave hundreds of small files.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

CACHE_FILE = "llm_cache.sqlite"  # in the run folder (a worker's local mirror on object storage)
#: One cache entry per row; ``value`` and ``usage`` are JSON text as in the SQLite table.
PART_SCHEMA = pa.schema([("key", pa.string()), ("model_id", pa.string()), ("value", pa.string()),
                         ("raw", pa.string()), ("usage", pa.string()), ("created", pa.float64())])
_COLUMNS = tuple(PART_SCHEMA.names)


def cache_key(model_id: str, messages: list[dict[str, str]], schema: dict[str, Any],
              params: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of ``(model_id, messages, schema, params)``.

    ``params`` are the sampling parameters that change the answer (temperature, max_tokens, seed);
    transport settings (URL, timeouts, concurrency) are deliberately left out.
    """
    blob = json.dumps({"model": model_id, "messages": messages, "schema": schema, "params": params},
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """``key -> (value, raw, usage)`` in table ``responses`` of the SQLite file at ``path``.

    Safe to share between threads (one connection behind a lock) and between processes
    (SQLite WAL + busy timeout). ``value`` is stored as JSON text.
    """

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=30.0, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model_id TEXT NOT NULL,"
            " value TEXT NOT NULL, raw TEXT NOT NULL, usage TEXT NOT NULL, created REAL NOT NULL)")

    def get(self, key: str) -> dict[str, Any] | None:
        """``{"value", "raw", "usage"}`` for ``key``, or ``None`` when absent."""
        with self._lock:
            row = self._db.execute("SELECT value, raw, usage FROM responses WHERE key = ?",
                                   (key,)).fetchone()
        if row is None:
            return None
        return {"value": json.loads(row[0]), "raw": row[1], "usage": json.loads(row[2])}

    def put(self, key: str, model_id: str, value: Any, raw: str, usage: dict[str, int]) -> None:
        """Store (or replace) one validated answer; committed before returning."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, model_id, value, raw, usage, created)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (key, model_id, json.dumps(value, ensure_ascii=False), raw,
                 json.dumps(usage, sort_keys=True), time.time()))

    def entries_under(self, prefix: str) -> list[tuple[str, Any]]:
        """``(key, value)`` of every entry whose key starts with ``prefix``, oldest put first.
        Batch mode keeps its ledger of submitted jobs here under ``batch:`` keys
        (:mod:`pipeline.llm.batch`), so the ledger travels with the cache parts."""
        with self._lock:
            rows = self._db.execute("SELECT key, value FROM responses WHERE substr(key, 1, ?) = ? ORDER BY rowid",
                                    (len(prefix), prefix)).fetchall()
        return [(k, json.loads(v)) for k, v in rows]

    def delete(self, key: str) -> None:
        """Forget one entry (used when a cached value no longer passes its check)."""
        with self._lock:
            self._db.execute("DELETE FROM responses WHERE key = ?", (key,))

    def max_rowid(self) -> int:
        """The highest SQLite rowid so far (0 when empty): a mark for :meth:`entries_after`.
        ``INSERT OR REPLACE`` gives a replaced entry a new, higher rowid, so every put after the
        mark is found."""
        with self._lock:
            return self._db.execute("SELECT COALESCE(MAX(rowid), 0) FROM responses").fetchone()[0]

    def entries_after(self, rowid: int) -> tuple[list[dict[str, Any]], int]:
        """``(entries put after mark rowid, the new mark)``; each entry a dict of
        :data:`PART_SCHEMA`'s columns (``value``/``usage`` as stored JSON text)."""
        with self._lock:
            rows = self._db.execute(f"SELECT rowid, {', '.join(_COLUMNS)} FROM responses WHERE rowid > ?"
                                    " ORDER BY rowid", (rowid,)).fetchall()
        if not rows:
            return [], rowid
        return [dict(zip(_COLUMNS, r[1:])) for r in rows], rows[-1][0]

    def import_entries(self, entries: list[dict[str, Any]]) -> int:
        """Add entries (from :func:`decode_part`) that are not cached yet; returns how many were
        added. An entry already present is kept as is (both are validated answers)."""
        with self._lock:
            before = self._db.total_changes
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    f"INSERT OR IGNORE INTO responses ({', '.join(_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)",
                    [tuple(e[c] for c in _COLUMNS) for e in entries])
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return self._db.total_changes - before

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        """Close the SQLite connection (every put is already committed); later calls raise
        ``sqlite3.ProgrammingError``."""
        with self._lock:
            self._db.close()


def encode_part(entries: list[dict[str, Any]]) -> bytes:
    """Cache entries (:meth:`ResponseCache.entries_after`) as one zstd Parquet file of :data:`PART_SCHEMA`."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(entries, schema=PART_SCHEMA), sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def compact_entries(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The entries of several cache parts (each a :func:`decode_part` list, oldest part first)
    with one entry per ``key``: the last one put, at the place of the key's first entry. A key is
    put again only after its earlier answer was deleted for failing its check
    (:meth:`ResponseCache.delete`), so the later answer is the one to keep."""
    merged: dict[str, dict[str, Any]] = {}
    for entries in parts:
        for e in entries:
            merged[e["key"]] = e
    return list(merged.values())


def decode_part(data: bytes) -> list[dict[str, Any]]:
    """The entries of a cache part written by :func:`encode_part`.

    Raises ``ValueError`` when the file is not such a part (wrong columns, not Parquet)."""
    try:
        table = pq.read_table(pa.BufferReader(data))
    except pa.ArrowException as e:
        raise ValueError(f"not an LLM cache part: {e}") from e
    if table.schema.names != list(_COLUMNS):
        raise ValueError(f"not an LLM cache part: columns {table.schema.names}")
    return table.to_pylist()

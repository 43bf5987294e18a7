"""Persistent response cache: one SQLite file, WAL mode, only validated answers.

A crashed or repeated run re-spends nothing (D-M2): before any HTTP call the
client looks up :func:`cache_key`; after an answer passes JSON extraction, the schema and the
request's check, it is stored. Failures are never stored, so a rerun retries them.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from typing import Any


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

    def delete(self, key: str) -> None:
        """Forget one entry (used when a cached value no longer passes its check)."""
        with self._lock:
            self._db.execute("DELETE FROM responses WHERE key = ?", (key,))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

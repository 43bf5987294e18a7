"""Versioned skill-bank store: every bank is an immutable, content-hashed version with a parent.

Layout (versioned: content hash, parent version, history)::

    <root>/banks/<version>/bank.json    {"record": {...}, "rows": [SKILL_SCHEMA rows]}   immutable
    <root>/banks/history.jsonl          one event per line, append-only: create | reuse | restore
    <root>/banks/HEAD                   the current version (text, one line)

``<root>`` is the folder that holds ``runs/`` (the artifact store root), or the object-storage
URI a run was given as its root (``s3://bucket/prefix``: the bank files are then objects in the
bucket, :mod:`pipeline.bank.files`), so every run under it shares one bank history. The skills
stage's bank is registered by the runner once the stage's artifact is committed
(:meth:`pipeline.stage.stage.Stage.after_commit`). A version id is :func:`pipeline.bank.rows.bank_version` of its rows
(``bank-<hash>`` of the skills' kind, category and text; source ids and order do not count), so
registering the same bank twice - a rerun, a retried Airflow task, a crash after registration -
returns the first record and writes nothing: artifacts stay identical across reruns.

A record is ``{version, parent, created_at, run_id, stage, fingerprint, counts, envs}``:
``parent`` is the store's HEAD when the version was first registered (``None`` for the first
bank) unless given explicitly (GRPO evolution names the bank it evolved); ``created_at`` is UTC
ISO-8601. :meth:`BankStore.restore` makes an older version HEAD again (an event, no new version).
"""
from __future__ import annotations

import datetime as _dt
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

from pipeline.core import lineage
from pipeline.bank import rows as skillbank
from pipeline.bank.files import bank_files


class BankError(ValueError):
    """An unknown or ambiguous version, or a damaged bank file."""


@dataclass
class BankVersion:
    """One stored bank: its record and its skill rows (``records.SKILL_SCHEMA`` dicts)."""
    record: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def version(self) -> str:
        """The version id, ``bank-<hash>`` of the rows (:func:`pipeline.bank.rows.bank_version`)."""
        return self.record["version"]


def counts_of(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """``{"general", "task_specific", "mistake"}`` -> number of skills of that kind."""
    c = Counter(r["kind"] for r in rows)
    return {k: c.get(k, 0) for k in ("general", "task_specific", "mistake")}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class BankStore:
    """The bank history under ``<root>/banks`` (see the module docstring); ``root`` is a local
    folder or an object-storage URI (``s3://bucket/prefix``: the files live in the bucket,
    :mod:`pipeline.bank.files`).

    Single-writer per version (a version folder appears whole); on a local folder
    ``history.jsonl`` appends are one ``write`` of one line each, so concurrent writers
    interleave whole lines; on object storage every write holds the history's lease.
    """

    def __init__(self, root: str):
        self.files = bank_files(root)
        self.dir = self.files.where()
        self.root = self.dir[:-len("/banks")]  # both kinds of files name the folder <root>/banks

    # ---- reading --------------------------------------------------------------------------
    def versions(self) -> list[str]:
        """Stored version ids in registration order (from the history; restores not repeated)."""
        seen: dict[str, None] = {}
        for e in self.history():
            if e["event"] == "create":
                seen.setdefault(e["version"], None)
        return list(seen)

    def history(self) -> list[dict[str, Any]]:
        """Every event, oldest first: ``{event, version, at, ...}``."""
        text = self.files.read("history.jsonl")
        return [json.loads(line) for line in (text or "").splitlines() if line.strip()]

    def head(self) -> str | None:
        """The current version, or ``None`` for an empty store."""
        return (self.files.read("HEAD") or "").strip() or None

    def resolve(self, ref: str) -> str:
        """A full version id from ``ref``: an id, a unique prefix (with or without ``bank-``) or
        ``HEAD``. Raises :class:`BankError` when none or several match."""
        if ref == "HEAD":
            head = self.head()
            if head is None:
                raise BankError(f"no bank registered under {self.dir}")
            return head
        stored = self.versions()
        hits = [v for v in stored if v == ref or v.startswith(ref) or v.startswith("bank-" + ref)]
        if len(hits) != 1:
            what = "no" if not hits else f"{len(hits)}"
            raise BankError(f"{what} bank version matches {ref!r} under {self.dir}"
                            + (f": {', '.join(hits)}" if hits else ""))
        return hits[0]

    def get(self, ref: str) -> BankVersion:
        """The stored version ``ref`` (see :meth:`resolve`). Raises :class:`BankError`."""
        version = self.resolve(ref)
        rel = f"{version}/bank.json"
        try:
            text = self.files.read(rel)
            if text is None:
                raise FileNotFoundError("no such file")
            data = json.loads(text)
        except (OSError, ValueError) as e:
            raise BankError(f"bank {version}: cannot read {self.files.where(rel)}: {e}") from None
        if skillbank.bank_version(data["rows"]) != version:
            raise BankError(f"bank {version}: content hash does not match its rows (file edited?)")
        return BankVersion(data["record"], data["rows"])

    # ---- writing --------------------------------------------------------------------------
    def has(self, version: str) -> bool:
        """Whether ``version`` (a full version id) is stored."""
        return self.files.exists(f"{version}/bank.json")

    def register(self, rows: list[dict[str, Any]], *, run_id: str, stage: str, fingerprint: str = "",
                 parent: str | None = "HEAD") -> BankVersion:
        """Store ``rows`` as a version (idempotent) and make it HEAD; returns the stored version.

        Args:
            rows: skill rows; the stored copy gets ``bank_version`` = the version id and ``skill_id``
                recomputed from the content (``lineage.skill_id``).
            run_id, stage, fingerprint: who created it (recorded on first registration only).
            parent: ``"HEAD"`` = the current HEAD (``None`` when the store is empty), a version
                ref, or ``None``. A version is never its own parent.
        """
        version = skillbank.bank_version(rows)
        with self.files.writing():
            if self.has(version):
                return self._reuse(version, run_id, stage)
            if parent == "HEAD":
                parent = self.head()
            elif parent is not None:
                parent = self.resolve(parent)
            record = {"version": version, "parent": None if parent == version else parent, "created_at": _now(),
                      "run_id": run_id, "stage": stage, "fingerprint": fingerprint, "counts": counts_of(rows),
                      "envs": sorted({r.get("env") or "" for r in rows})}
            # ids are content hashes: recompute them, so an edited row can never keep a stale id
            stored = [dict(r, bank_version=version, skill_id=lineage.skill_id(r["kind"], r.get("category") or "",
                                                                             skillbank.skill_content(r)))
                      for r in rows]
            text = json.dumps({"record": record, "rows": stored}, ensure_ascii=False, indent=1, sort_keys=True)
            if not self.files.create(f"{version}/bank.json", text):  # another writer was first: theirs is identical
                return self.get(version)
            self._event({"event": "create", **record})
            self._set_head(version)
        return BankVersion(record, stored)

    def _reuse(self, version: str, run_id: str, stage: str) -> BankVersion:
        """The stored ``version``, made HEAD again (a ``reuse`` event) when it is not HEAD."""
        existing = self.get(version)
        if self.head() != version:  # an older bank produced again: it becomes current
            self._event({"event": "reuse", "version": version, "previous": self.head(), "at": _now(),
                         "run_id": run_id, "stage": stage})
            self._set_head(version)
        return existing

    def restore(self, ref: str, *, note: str = "") -> BankVersion:
        """Make version ``ref`` HEAD again (recorded as a ``restore`` event); returns it."""
        bank = self.get(ref)
        with self.files.writing():
            self._event({"event": "restore", "version": bank.version, "previous": self.head(), "at": _now(),
                         "note": note})
            self._set_head(bank.version)
        return bank

    def _event(self, event: dict[str, Any]) -> None:
        event.setdefault("at", event.get("created_at") or _now())
        self.files.append("history.jsonl", json.dumps(event, ensure_ascii=False, sort_keys=True) + "\n")

    def _set_head(self, version: str) -> None:
        self.files.replace("HEAD", version + "\n")


def diff(old: BankVersion, new: BankVersion) -> dict[str, list[dict[str, Any]]]:
    """What changed from ``old`` to ``new``, by ``skill_id`` (content hash of kind, category, text).

    Returns ``{"added": [row], "removed": [row], "sources_changed": [{skill_id, title, added_memory_ids,
    removed_memory_ids}]}``, each list in the bank order of the version it comes from. A skill whose
    text changed is one removal plus one addition (its id is its content).
    """
    before = {r["skill_id"]: r for r in old.rows}
    after = {r["skill_id"]: r for r in new.rows}
    changed = []
    for sid, r in after.items():
        if sid in before:
            a, b = set(r["source_memory_ids"]), set(before[sid]["source_memory_ids"])
            if a != b:
                changed.append({"skill_id": sid, "title": label(r), "added_memory_ids": sorted(a - b),
                                "removed_memory_ids": sorted(b - a)})
    return {"added": [r for s, r in after.items() if s not in before],
            "removed": [r for s, r in before.items() if s not in after],
            "sources_changed": changed}


def label(row: dict[str, Any]) -> str:
    """Short human label of a skill row: its title, or a mistake's description."""
    return row.get("title") or row.get("description") or row["skill_id"]

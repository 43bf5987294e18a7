"""The recorder: the one writer of the manifest of a finished unit of work.

A data stage, one shard of it, the collect step of a sharded stage, ``sft_fit``, ``grpo``, an
``eval_<label>`` and the ``rollout`` all end the same way: what the work produced is on disk and
its manifest says what it is. :func:`record` writes that manifest, once, atomically, last:

* what the work reports (``manifest``): its ``fingerprint`` (left out only by work outside a
  pipeline run, e.g. a standalone ``python -m sft.train``, which nothing reuses), its ``counts``
  (built by :func:`counts`, the one place they are built) and anything else it wants kept;
* what the recorder adds: ``status`` (:data:`COMPLETE`: the mark readers trust), ``files`` (what
  the folder holds, relative, sorted), ``written_at`` and ``content_sha256`` (:func:`content_sha256`:
  what downstream work reads, never its location).

Writers that are not the recorder, and why (a house test keeps this list closed): the metadata of
one training checkpoint (``sft.manifest.write_checkpoint_manifest``, ``sft.rl.checkpoint.save``),
which describes a resumable state, not finished work; and the mirror of object storage
(:mod:`pipeline.engine.remote`), which copies a manifest the recorder wrote.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from pipeline.core.fsutil import atomic_write_json, sha256_file
from pipeline.core.layout import ARTIFACT_MANIFEST

#: The ``status`` of a recorded manifest: the work finished and everything it lists is there.
COMPLETE = "complete"
#: Quarantine folders of an artifact (the current and the pre-rename name): not content.
QUARANTINE_DIRS = ("_quarantine", "quarantine")


class CountMismatch(RuntimeError):
    """A unit of work lost or invented rows: units in != units out + quarantined."""


@dataclass
class QuarantineTally:
    """Quarantine rows counted as they are written: rows per ``kind`` (``unit``, ``item``,
    ``rejected_answer``, ``request``, ``demotion``: :data:`pipeline.core.records.QUARANTINE_KINDS`)
    and the ``reason`` of each ``unit`` row (the rows the count invariant counts)."""
    kinds: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)

    def add(self, kind: str, reason: str, n: int = 1) -> None:
        """Count ``n`` rows of ``kind`` (and, for units, of ``reason``)."""
        self.kinds[kind] += n
        if kind == "unit":
            self.reasons[reason] += n

    def add_rows(self, rows: Iterable[Any]) -> "QuarantineTally":
        """Count ``QuarantineRow`` objects (a row without a ``kind`` is a unit); returns self."""
        for q in rows:
            self.add(getattr(q, "kind", "unit") or "unit", q.reason)
        return self

    def merge(self, kinds: dict[str, int] | None, reasons: dict[str, int] | None) -> None:
        """Add counts made elsewhere (a worker that encoded its own quarantine part)."""
        self.kinds.update(kinds or {})
        self.reasons.update(reasons or {})

    @property
    def units(self) -> int:
        """Rows of kind ``unit``: the quarantined units."""
        return self.kinds.get("unit", 0)


def counts(rows_in: int, rows_out: int, quarantine: QuarantineTally | None = None, *,
           units_in: int | None = None, units_out: int | None = None, where: str = "") -> dict[str, Any]:
    """The ``counts`` of a manifest, the one place they are built.

    ``{"in": rows_in, "units_in", "units_out", "out": rows_out, "quarantined", "quarantine_reasons",
    "quarantine_kinds"}``: ``units_in`` (default ``rows_in``) is what the work consumed after any
    expansion, ``units_out`` (default ``rows_out``) how many of those went into the output,
    ``quarantined`` the ``unit`` rows of the quarantine, ``quarantine_reasons`` their reasons and
    ``quarantine_kinds`` every quarantine row by kind (its values add up to the rows of
    ``_quarantine``). Raises :class:`CountMismatch` (naming ``where``) when units in != units out +
    quarantined.
    """
    tally = quarantine or QuarantineTally()
    u_in = rows_in if units_in is None else units_in
    u_out = rows_out if units_out is None else units_out
    if u_in != u_out + tally.units:
        raise CountMismatch(f"[{where}] units in {u_in} != out {u_out} + quarantined {tally.units}")
    return {"in": rows_in, "units_in": u_in, "units_out": u_out, "out": rows_out, "quarantined": tally.units,
            "quarantine_reasons": dict(sorted(tally.reasons.items())),
            "quarantine_kinds": {k: n for k, n in sorted(tally.kinds.items()) if n}}


def content_digest(entries: Iterable[tuple[str, str]], counters: dict[str, Any] | None = None) -> str:
    """SHA-256 over ``"<name>\\0<sha256>\\n"`` of each ``(name, sha256)`` entry in the order given,
    then the JSON of ``counters`` when given (a stage's figures are part of what it hands on)."""
    h = hashlib.sha256()
    for name, sha in entries:
        h.update(f"{name}\0{sha}\n".encode())
    if counters is not None:
        h.update(json.dumps(counters, sort_keys=True, ensure_ascii=False, default=str).encode())
    return h.hexdigest()


def content_sha256(folder: str, manifest: dict[str, Any]) -> str:
    """SHA-256 of an artifact's content as downstream work sees it: each file the manifest lists
    except the quarantine (relative name and the file's SHA-256), plus the manifest's ``counters``
    (:func:`content_digest`). It names no location, so a moved run folder or another ``--root``
    keeps every fingerprint built on it. Raises ``OSError`` when a listed file cannot be read."""
    entries = [(name, sha256_file(os.path.join(folder, name))) for name in sorted(manifest.get("files", []))
               if not set(QUARANTINE_DIRS) & set(name.split("/")[:-1])]  # also shard-N/_quarantine/
    return content_digest(entries, manifest.get("counters") or {})


def record(folder: str, manifest: dict[str, Any], files: Iterable[str] = (), *, name: str = ARTIFACT_MANIFEST,
           content: Iterable[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Write the manifest of the finished work in ``folder`` as ``folder/name``, atomically; returns it.

    ``manifest``: what the work reports (its ``fingerprint`` and ``counts`` among it); ``files``: the
    files of ``folder`` it produced (relative). The recorder adds ``status`` (:data:`COMPLETE`),
    ``files`` (sorted), ``written_at`` and ``content_sha256``: of the listed files and the counters
    (:func:`content_sha256`), or, given ``content``, of those ``(name, sha256)`` entries alone (a
    sharded stage: its shards' content hashes, which already cover their counters).
    Raises ``OSError`` when a file cannot be read or the manifest cannot be written.
    """
    done = dict(manifest, status=COMPLETE, files=sorted(files),
                written_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    done["content_sha256"] = content_sha256(folder, done) if content is None else content_digest(content)
    os.makedirs(folder, exist_ok=True)
    atomic_write_json(os.path.join(folder, name), done)
    return done

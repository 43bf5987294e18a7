"""Stable, content-derived identifiers.

Every id is a short SHA-256 of the fields that define the item, so the same input always gets
the same id (the reference used random UUIDs for memories) and any derived row can
name its parents. Prefixes make ids self-describing in ``skillpipe inspect`` output.
"""
from __future__ import annotations

import hashlib
import json

from typing import Any

from pipeline.core.fsutil import sha256_file

ID_HEX = 16  # 64 bits: collision odds are negligible at the millions-of-rows scale


#: The canonical JSON of every id: the same text as ``json.dumps(obj, sort_keys=True,
#: ensure_ascii=False, separators=(",", ":"), default=str)``, from one encoder made once (a
#: parse of the benchmark tree hashes 12,000 trajectories).
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def content_hash(*parts: Any, n: int = ID_HEX) -> str:
    """Hex SHA-256 prefix of the canonical JSON encoding of ``parts`` (``n`` hex chars)."""
    blob = _CANONICAL.encode(parts)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:n]


def trajectory_id(source_uri: str, record_index: int, content: Any) -> str:
    """``traj-<hash>`` of (source URI, record index in that file, normalised content)."""
    return "traj-" + content_hash(source_uri, record_index, content)


def step_id(trajectory_id: str, step_index: int) -> str:
    """``<trajectory_id>/s<index>``: a step is addressed by its trajectory and position."""
    return f"{trajectory_id}/s{step_index}"


def memory_id(trajectory_id: str, content: Any) -> str:
    """``mem-<hash>`` of (trajectory id, the memory's content fields)."""
    return "mem-" + content_hash(trajectory_id, content)


def skill_id(kind: str, category: str, content: Any) -> str:
    """``<gen|tsk|err>-<hash>`` of (kind, category, content); an unknown kind's prefix is its
    first 3 characters."""
    prefix = {"general": "gen", "task_specific": "tsk", "mistake": "err"}.get(kind, kind[:3])
    return f"{prefix}-" + content_hash(kind, category, content)


def pair_id(trajectory_id: str, step_index: int, instruction: str, output: str) -> str:
    """``pair-<hash>`` of (trajectory id, step index, rendered instruction, target output)."""
    return "pair-" + content_hash(trajectory_id, step_index, instruction, output)


#: The digest recorded for an input file that cannot be read (both by the runner's input
#: fingerprint and by the parse workers), so an unreadable file fingerprints the same every run.
UNREADABLE = "unreadable"


def input_sha256(path: str) -> str:
    """:func:`~pipeline.core.fsutil.sha256_file` of an input file, or :data:`UNREADABLE` when it cannot be read (the
    parse stage quarantines it as ``unreadable_file``; fingerprinting must not crash on it)."""
    try:
        return sha256_file(path)
    except OSError:
        return UNREADABLE



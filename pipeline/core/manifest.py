"""Fingerprint and manifest of a step that follows the data stages (:mod:`pipeline.stage.step`).

Such a step is no :class:`~pipeline.stage.stage.Stage`: its output is a model folder or an
evaluation, not the rows of a stage, and it may keep its own resume (optimizer state,
checkpoints). It decides "unchanged: skip" the way the runner does for a stage, from the same facts:

* ``inputs``: the content hash of each upstream artifact (never its location, so a moved run
  folder reruns nothing), after :func:`pipeline.core.freshness.check_fresh` has refused a stale one;
* ``config``: the settings that change the result (paths and resume switches left out);
* ``step_version`` (the step's own) and ``code_version`` (the package's);
  ``fingerprint = lineage.content_hash(facts, n=32)``.

:func:`record` writes the finished step's manifest with ``fingerprint`` and ``fingerprint_facts``
atomically (its presence with a fingerprint is the step's "complete" mark), and :func:`reusable`
returns it on the next run while the fingerprint is the same. Callers return the same small
reference as a stage (:func:`xcom`).
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterable

from pipeline import __version__
from pipeline.core.freshness import check_fresh
from pipeline.core.fsutil import atomic_write_json
from pipeline.core.lineage import content_hash

#: The keys of the XCom reference every DAG task returns (= ``StageResult.xcom``).
XCOM_KEYS = ("uri", "rows", "fingerprint")


def upstream_facts(store: Any, stages: Iterable[str]) -> list[dict[str, str]]:
    """``[{"stage", "content_sha256"}]`` of each upstream artifact of ``store`` (an
    ``ArtifactStore``), the input facts of a stage. Raises ``ArtifactError`` when one is missing
    or stale (built from an upstream artifact that has since been rewritten)."""
    facts = []
    for s in stages:
        check_fresh(store, s)
        facts.append({"stage": s, "content_sha256": store.require(s).content_sha256})
    return facts


def step_fingerprint(step: str, inputs: list[dict[str, Any]], config: dict[str, Any],
                     version: str = "1") -> tuple[str, dict[str, Any]]:
    """``(fingerprint, facts)`` of step ``step``: 32 hex characters over ``inputs`` (JSON-ready
    dicts, e.g. :func:`upstream_facts`), ``config``, the step's ``version`` and the package version."""
    facts = {"stage": step, "inputs": inputs, "config": config, "step_version": version,
             "code_version": __version__}
    return content_hash(facts, n=32), facts


def read(path: str) -> dict[str, Any] | None:
    """The JSON manifest at ``path``, or ``None`` when there is none. Raises ``ValueError`` for
    a file that is not JSON."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def reusable(path: str, fingerprint: str) -> dict[str, Any] | None:
    """The manifest at ``path`` when a finished step recorded ``fingerprint`` there, else ``None``."""
    prev = read(path)
    return prev if prev is not None and prev.get("fingerprint") == fingerprint else None


def record(path: str, manifest: dict[str, Any], fingerprint: str, facts: dict[str, Any]) -> dict[str, Any]:
    """Write ``manifest`` plus ``fingerprint`` and ``fingerprint_facts`` to ``path`` atomically
    (the step is then reusable); returns what was written. Raises ``OSError``."""
    done = {**manifest, "fingerprint": fingerprint, "fingerprint_facts": facts}
    atomic_write_json(path, done)
    return done


def xcom(uri: str, rows: int, fingerprint: str) -> dict[str, Any]:
    """The small reference a DAG task returns: where the output is, how many data rows it stands
    for, and the fingerprint that identifies it."""
    return dict(zip(XCOM_KEYS, (uri, rows, fingerprint)))

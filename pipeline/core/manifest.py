"""Fingerprint and manifest of a step that follows the data stages (:mod:`pipeline.stage.step`).

Such a step is no :class:`~pipeline.stage.stage.Stage`: its output is a model folder or an
evaluation, not the rows of a stage, and it may keep its own resume (optimizer state,
checkpoints). It decides "unchanged: skip" the way the runner does for a stage, from the same facts:

* ``inputs``: the content hash of each upstream artifact (never its location, so a moved run
  folder reruns nothing), after :func:`pipeline.core.freshness.check_fresh` has refused a stale one;
* ``config``: the settings that change the result (paths and resume switches left out);
* ``step_version`` (the step's own) and ``code_version`` (the package's);
  ``fingerprint = lineage.content_hash(facts, n=32)``.

The step runner has :func:`pipeline.core.recorder.record` write the finished step's manifest with
``fingerprint`` and ``fingerprint_facts`` (its presence with a fingerprint is the step's "complete"
mark), and :func:`reusable` returns it on the next run while the fingerprint is the same. Callers
return the same small reference as a stage (:func:`xcom`).

**What a manifest says about failed LLM requests** is derived here, once, for every reader (the
run log, the ``skillpipe run`` summary, the report's Attention box): :func:`request_failures`
reads the recorded facts and :func:`failure_sentence` says them.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Iterable

from pipeline import __version__
from pipeline.core.freshness import check_fresh
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


def xcom(uri: str, rows: int, fingerprint: str) -> dict[str, Any]:
    """The small reference a DAG task returns: where the output is, how many data rows it stands
    for, and the fingerprint that identifies it."""
    return dict(zip(XCOM_KEYS, (uri, rows, fingerprint)))


@dataclass(frozen=True)
class RequestFailures:
    """The failed LLM requests a manifest records (``failed_requests``), split by what happens next.

    Attributes:
        total: requests that failed after the client's retries.
        retried: those a plain rerun sends again: the work is recorded incomplete
            (``fingerprint_complete`` is set, so its fingerprint does not match the next run's).
        final: those recorded for good: an answer that would fail the same way again (a greedy
            embedded model), or every failure when ``llm.retry_failed`` is false.
        by_reason: ``{reason: requests}``.
    """
    total: int
    retried: int
    final: int
    by_reason: dict[str, int]


def request_failures(manifest: dict[str, Any]) -> RequestFailures:
    """The :class:`RequestFailures` of a stage (or shard, or collected stage) manifest, from what it
    recorded: ``failed_requests`` (``total``, ``final``, ``by_reason``) and whether
    ``fingerprint_complete`` marks it incomplete. A manifest without failures gives zeros."""
    f = manifest.get("failed_requests") if isinstance(manifest.get("failed_requests"), dict) else {}
    total = int(f.get("total") or 0)
    final = min(int(f.get("final") or 0), total)
    retried = total - final if manifest.get("fingerprint_complete") else 0
    return RequestFailures(total, retried, total - retried, dict(f.get("by_reason") or {}))


def failure_sentence(manifest: dict[str, Any]) -> str:
    """What the manifest's failed LLM requests mean, in one sentence ("" when none failed)::

        incomplete: 2 LLM request(s) failed (timeout 2); a plain rerun retries them
        complete: 2 failed LLM answer(s) are final (length 2); a rerun does not ask again

    (an incomplete stage with final answers too adds "; N failed answer(s) are final"). The one
    wording of every reader: the run log, the ``skillpipe run`` summary, the report."""
    f = request_failures(manifest)
    if not f.total:
        return ""
    why = ", ".join(f"{k} {v}" for k, v in sorted(f.by_reason.items()))
    why = f" ({why})" if why else ""
    if f.retried:
        also = f"; {f.final} failed answer(s) are final" if f.final else ""
        return f"incomplete: {f.retried} LLM request(s) failed{why}; a plain rerun retries them{also}"
    return f"complete: {f.final} failed LLM answer(s) are final{why}; a rerun does not ask again"

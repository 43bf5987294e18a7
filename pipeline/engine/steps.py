"""The one runner of the steps after the data stages (:class:`pipeline.stage.step.TrainingStep`):
freshness, fingerprint, reuse, run, record, after_record, XCom reference (the contract's
docstring says what each means)."""
from __future__ import annotations

import os
from typing import Any, Callable

from pipeline.core import manifest as step_manifest
from pipeline.core import recorder
from pipeline.core.artifacts import ArtifactStore
from pipeline.stage.step import StepOutput, TrainingStep


def run_step(step: TrainingStep, root: str, run_id: str, cfg: Any, force: bool = False,
             log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run ``step`` on run ``run_id`` under ``root`` with ``cfg`` (the contract: freshness,
    fingerprint, reuse unless ``force``, run, record, after_record).

    Returns the recorded manifest plus ``skipped`` and the XCom fields ``uri`` (the step folder),
    ``rows`` and ``fingerprint``. Raises ``ArtifactError`` when a required upstream artifact is
    missing or stale; whatever :meth:`TrainingStep.configure` or :meth:`TrainingStep.run` raise.
    """
    store = ArtifactStore(root, run_id)
    cfg = step.configure(store, cfg)
    present = [s for s in step.optional_inputs if store.load(s) is not None]
    inputs = step_manifest.upstream_facts(store, [*step.inputs, *present]) + step.input_facts(store, cfg)
    fp, facts = step_manifest.step_fingerprint(step.name, inputs, step.config_facts(cfg), step.version)
    out = step.output_dir(store)
    prev = None if force else step_manifest.reusable(os.path.join(out, step.manifest_name), fp)
    if prev is not None and step.still_valid(store, cfg, prev):
        step.after_record(root, store, cfg, prev, reused=True)
        log(f"[{step.name}] unchanged (fingerprint {fp[:12]}): skipped")
        return _result(step, prev, out, skipped=True)
    m = record_step(step, store, step.run(store, cfg), fp, facts)
    step.after_record(root, store, cfg, m, reused=False)
    for line in step.describe(m):
        log(f"[{step.name}] {line}")
    return _result(step, m, out, skipped=False)


def record_step(step: TrainingStep, store: ArtifactStore, produced: StepOutput, fp: str,
                facts: dict[str, Any]) -> dict[str, Any]:
    """Record what ``step`` produced, once: its manifest plus ``fingerprint``, ``fingerprint_facts``
    and ``counts``, written by :func:`pipeline.core.recorder.record` into the step folder; for a
    step whose output is an artifact (``produced.rows``), with its rows and extra files in one
    atomic write of ``store``. Returns the manifest written. Raises ``OSError``."""
    manifest = {**produced.manifest, "fingerprint": fp, "fingerprint_facts": facts, "counts": produced.counts}
    if produced.rows is not None:
        return store.write(step.name, produced.rows, [], manifest, produced.extra_files).manifest
    return recorder.record(step.output_dir(store), manifest, produced.files, name=step.manifest_name)


def _result(step: TrainingStep, m: dict[str, Any], out: str, skipped: bool) -> dict[str, Any]:
    return {**m, **step_manifest.xcom(out, step.rows(m), m["fingerprint"]), "skipped": skipped}

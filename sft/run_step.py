"""The ``sft_fit`` step of a pipeline run: train on the run's export artifact.

Shared by the Airflow task ``sft_fit``, ``skillpipe sft fit`` and ``make run``. Output goes to
``<root>/runs/<run_id>/sft_fit/``. Like the data stages it is skipped when nothing changed: its
fingerprint (:mod:`pipeline.core.manifest`: the export's content, the config, the code version)
is the one recorded in the final ``skillpipe_sft_manifest.json``.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from pipeline.core import manifest as step_manifest
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.layout import SFT_STEP

from sft import manifest as mf
from sft.config import SFTFitConfig, to_dict

STEP = SFT_STEP
#: Fields that name places or how to resume, not what is trained: outside the fingerprint.
NOT_FINGERPRINTED = ("pairs", "output_dir", "resume", "resume_mode", "model_cache_dir")


def fingerprint(store: ArtifactStore, cfg: SFTFitConfig) -> tuple[str, dict[str, Any]]:
    """``(fingerprint, facts)`` of the step for run ``store`` with ``cfg``. Raises
    ``ArtifactError`` when the run's export artifact is missing or stale."""
    config = {k: v for k, v in to_dict(cfg).items() if k not in NOT_FINGERPRINTED}
    return step_manifest.step_fingerprint(STEP, step_manifest.upstream_facts(store, ["export"]), config)


def fit_for_run(root: str, run_id: str, cfg: SFTFitConfig | None = None, force: bool = False,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train on ``runs/<run_id>/export`` (unless unchanged) and return the checkpoint manifest
    plus ``skipped`` and the XCom fields ``uri`` (the output folder), ``rows`` (SFT pairs
    trained on) and ``fingerprint``. Raises ``ArtifactError`` when the run has no (or a stale)
    export artifact."""
    from sft.train import fit

    store = ArtifactStore(root, run_id)
    export = store.require("export")
    out = os.path.join(store.run_dir, STEP)
    cfg = dataclasses.replace(cfg or SFTFitConfig(), pairs=export.path, output_dir=out)
    fp, facts = fingerprint(store, cfg)
    path = os.path.join(out, mf.MANIFEST_NAME)
    prev = None if force else step_manifest.reusable(path, fp)
    if prev is not None:
        log(f"[{STEP}] unchanged (fingerprint {fp[:12]}, step {prev['global_step']}): skipped")
        return _result(prev, out, skipped=True)
    m = step_manifest.record(path, fit(export.path, out, cfg), fp, facts)
    losses = ", ".join(f"{x:.3f}" for x in m.get("losses", []))
    log(f"[{STEP}] {m['global_step']} steps, losses [{losses}], checkpoint {out}")
    return _result(m, out, skipped=False)


def _result(m: dict[str, Any], out: str, skipped: bool) -> dict[str, Any]:
    rows = ((m.get("export") or {}).get("rows") or {}).get("used", 0)
    return {**m, **step_manifest.xcom(out, rows, m["fingerprint"]), "skipped": skipped}

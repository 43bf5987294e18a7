"""The ``sft_fit`` step of a pipeline run: train on the run's export artifact.

Shared by the Airflow task ``sft_fit``, ``skillpipe sft fit`` and ``make run``. Output goes to
``<root>/runs/<run_id>/sft_fit/``. Like the data stages it is skipped when nothing changed: the
final checkpoint manifest already names the current export fingerprint and the same config.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from pipeline.core.artifacts import ArtifactStore

from sft import manifest as mf
from sft.config import SFTFitConfig, to_dict

STEP = "sft_fit"


def _comparable(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k not in ("pairs", "output_dir", "resume", "resume_mode")}


def fit_for_run(root: str, run_id: str, cfg: SFTFitConfig | None = None, force: bool = False,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train on ``runs/<run_id>/export`` (unless unchanged) and return the checkpoint manifest
    plus ``skipped`` and ``uri``. Raises ``ArtifactError`` when the run has no export artifact."""
    from sft.train import fit

    store = ArtifactStore(root, run_id)
    export = store.require("export")
    out = os.path.join(store.run_dir, STEP)
    cfg = dataclasses.replace(cfg or SFTFitConfig(), pairs=export.path, output_dir=out)
    prev = mf.read_manifest(out)
    if (prev and not force and prev.get("export", {}).get("fingerprint") == export.fingerprint
            and _comparable(prev.get("config", {})) == _comparable(to_dict(cfg))):
        log(f"[{STEP}] unchanged (export {export.fingerprint[:12]}, step {prev['global_step']}): skipped")
        return dict(prev, skipped=True, uri=out)
    m = fit(export.path, out, cfg)
    losses = ", ".join(f"{x:.3f}" for x in m.get("losses", []))
    log(f"[{STEP}] {m['global_step']} steps, losses [{losses}], checkpoint {out}")
    return dict(m, skipped=False, uri=out)

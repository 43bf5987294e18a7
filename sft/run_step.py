"""The ``sft_fit`` step of a pipeline run: train on the run's export artifact.

Shared by the Airflow task ``sft_fit``, ``skillpipe sft fit`` and ``make run``. Output goes to
``<root>/runs/<run_id>/sft_fit/``. A step of :mod:`pipeline.stage.step`: skipped when nothing
changed (the export's content, the ``sft:`` settings, the step and package versions).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.layout import SFT_MANIFEST, SFT_STEP
from pipeline.engine.steps import run_step
from pipeline.stage.step import StepOutput, TrainingStep

from sft import manifest as sft_manifest
from sft.config import SFTFitConfig


class SFTFitStep(TrainingStep):
    """Supervised fine-tuning of the student on the run's exported SFT pairs."""
    name = SFT_STEP
    inputs = ("export",)
    config_section = "sft"
    # places and how to resume, not what is trained
    not_fingerprinted = ("pairs", "output_dir", "resume", "resume_mode", "model_cache_dir")
    manifest_name = SFT_MANIFEST

    def configure(self, store: ArtifactStore, cfg: SFTFitConfig | None) -> SFTFitConfig:
        """``cfg`` (default :class:`SFTFitConfig`) reading the run's export, writing the step folder."""
        return dataclasses.replace(cfg or SFTFitConfig(), pairs=store.require("export").path,
                                   output_dir=self.output_dir(store))

    def run(self, store: ArtifactStore, cfg: SFTFitConfig) -> StepOutput:
        """Train (:func:`sft.train.fit`); returns its manifest, the pairs it trained on and refused
        (:func:`sft.manifest.fit_counts`) and the files of the final model."""
        from sft.train import fit
        m = fit(cfg.pairs, cfg.output_dir, cfg)
        return StepOutput(m, sft_manifest.fit_counts(m), files=sft_manifest.model_files(cfg.output_dir))

    def rows(self, manifest: dict[str, Any]) -> int:
        """SFT pairs trained on."""
        return ((manifest.get("export") or {}).get("rows") or {}).get("used", 0)

    def describe(self, manifest: dict[str, Any]) -> list[str]:
        """Steps, losses and the checkpoint folder."""
        losses = ", ".join(f"{x:.3f}" for x in manifest.get("losses", []))
        return [f"{manifest['global_step']} steps, losses [{losses}], checkpoint "
                f"{(manifest.get('config') or {}).get('output_dir', '')}"]


SFT_FIT = SFTFitStep()


def fit_for_run(root: str, run_id: str, cfg: SFTFitConfig | None = None, force: bool = False,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train on ``runs/<run_id>/export`` (unless unchanged): :func:`pipeline.engine.steps.run_step`
    of :data:`SFT_FIT`. Returns the checkpoint manifest plus ``skipped``, ``uri`` (the output
    folder), ``rows`` (SFT pairs trained on) and ``fingerprint``. Raises ``ArtifactError`` when
    the run has no (or a stale) export artifact."""
    return run_step(SFT_FIT, root, run_id, cfg, force=force, log=log)

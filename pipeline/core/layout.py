"""The run layout: every folder and manifest name of a run, declared once.

A run of the pipeline lives in one folder under the root (a local path, or the local mirror of
an object-storage root, :mod:`pipeline.engine.remote`)::

    <root>/
      runs/                                   RUNS_DIR
        <run_id>/                             run_dir(root, run_id)
          <stage>/                            a data stage (STAGES), e.g. export
            part-00000.parquet                (pipeline.core.artifacts: parts, _quarantine/, ...)
            _manifest.json                    ARTIFACT_MANIFEST: fingerprint, counts, files
            shard-00000/_manifest.json        one per shard of a sharded stage, same name
          rollout/_manifest.json              ROLLOUT_STAGE: episodes of `skillpipe rl rollout`
          sft_fit/                            SFT_STEP: the fine-tuned model
            skillpipe_sft_manifest.json       SFT_MANIFEST (also in every checkpoint-N/)
          grpo/                               GRPO_STEP
            grpo_manifest.json                GRPO_MANIFEST: final checkpoint, bank version
            grpo_log.jsonl                    GRPO_LOG: one line per step / validation
            checkpoints/step-NNNNNN/
              checkpoint.json                 CHECKPOINT_MANIFEST (sft.rl.checkpoint)
          eval_<label>/                       eval_stage(label): an artifact, so _manifest.json
            summary.json                      EVAL_SUMMARY
                                              (label = sft_fit | grpo | base | a policy name)

The data stages and ``rollout`` and ``eval_<label>`` are artifacts written through
:class:`pipeline.core.artifacts.ArtifactStore`; the two training steps write their own folders
and record what made them in their step manifest. This module imports nothing from the rest of
the project, so any module (and the bench scripts) can use it.
"""
from __future__ import annotations

import os

RUNS_DIR = "runs"
#: The data stages, in run order: their folders under ``runs/<run_id>/`` (the registry
#: :mod:`pipeline.stages` maps each name to its module).
STAGES = ("parse", "remove_loops", "verify", "split", "memory", "skills", "distill", "build_pairs", "usefulness",
          "export")
#: The manifest of every artifact folder (a stage, one shard of it, an eval, the rollout).
ARTIFACT_MANIFEST = "_manifest.json"
#: The manifest of the SFT output folder and of each of its checkpoints.
SFT_MANIFEST = "skillpipe_sft_manifest.json"
#: The manifest of the GRPO output folder.
GRPO_MANIFEST = "grpo_manifest.json"
#: The manifest of one GRPO checkpoint folder.
CHECKPOINT_MANIFEST = "checkpoint.json"
GRPO_LOG = "grpo_log.jsonl"
EVAL_SUMMARY = "summary.json"

ROLLOUT_STAGE = "rollout"
SFT_STEP = "sft_fit"
GRPO_STEP = "grpo"
EVAL_PREFIX = "eval_"
#: The folder of one shard of a sharded stage: ``shard-NNNNN`` (:func:`shard_id`).
SHARD_PREFIX = "shard-"
#: The training steps after export, in run order, and the manifest each one writes.
STEP_MANIFESTS = {SFT_STEP: SFT_MANIFEST, GRPO_STEP: GRPO_MANIFEST}
#: Every manifest file name of a run (what a house test keeps out of literals elsewhere).
MANIFEST_NAMES = (ARTIFACT_MANIFEST, SFT_MANIFEST, GRPO_MANIFEST, CHECKPOINT_MANIFEST)


def run_dir(root: str, run_id: str) -> str:
    """``<root>/runs/<run_id>``: the folder of run ``run_id``."""
    return os.path.join(root, RUNS_DIR, run_id)


def is_run_dir(path: str) -> bool:
    """Whether ``path`` is a run folder, ``.../runs/<run_id>`` (by name only; nothing is read)."""
    return os.path.basename(os.path.dirname(os.path.abspath(path))) == RUNS_DIR


def shard_id(i: int) -> str:
    """``shard-NNNNN`` (five digits, zero-padded) for shard number ``i`` (from 0)."""
    return f"{SHARD_PREFIX}{i:05d}"


def is_shard_id(name: str) -> bool:
    """True for a name of the form ``shard-<digits>``."""
    return name.startswith(SHARD_PREFIX) and name[len(SHARD_PREFIX):].isdigit()


def eval_stage(label: str) -> str:
    """``eval_<label>``: the artifact (stage) name of an evaluation labelled ``label``."""
    return EVAL_PREFIX + label


def stage_manifest_path(root: str, run_id: str, stage: str, shard: str | None = None) -> str:
    """``<root>/runs/<run_id>/<stage>[/<shard>]/_manifest.json``: the artifact manifest of a stage
    (or of one shard of it, ``shard`` = ``"shard-NNNNN"``)."""
    return os.path.join(run_dir(root, run_id), stage, *([shard] if shard else []), ARTIFACT_MANIFEST)

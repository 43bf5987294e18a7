"""Checkpoint manifest and the resume compatibility check.

Every checkpoint folder (``<output_dir>/checkpoint-<step>/``) and the final model folder get a
``skillpipe_sft_manifest.json`` saying exactly what made them: the export artifact fingerprint,
the skill-bank version(s) of the pairs, the base model and tokenizer content hashes, the full
config, world size, ZeRO stage, steps and final loss. A checkpoint's is its own metadata, written
here (:func:`write_checkpoint_manifest`: a resumable state, not finished work); the final model
folder's is the fit's manifest, written once by the recorder (:func:`pipeline.core.recorder.record`:
by the ``sft_fit`` step of a run, or by ``python -m sft.train`` on its own) with the counts
(:func:`fit_counts`) and a content hash of the model files (:func:`model_files`).

Resuming an optimizer state sharded for another world size or ZeRO stage either crashes deep
inside DeepSpeed or silently mis-loads; :func:`check_resume` refuses it *before launch* with a
message that says what differs and how to proceed (``resume_mode=weights_only`` restarts from the
checkpoint's weights with a fresh optimizer and says so).
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from typing import Any

import yaml

from pipeline.core.fsutil import atomic_write_json
from pipeline.core.layout import SFT_MANIFEST
from pipeline.core.recorder import QuarantineTally, counts

MANIFEST_NAME = SFT_MANIFEST  # the name is declared in pipeline.core.layout
QUARANTINE_FILE = "quarantine.parquet"  # the rows a fit refused, in its output folder
SCHEMA_VERSION = 1


class ResumeError(RuntimeError):
    """The checkpoint cannot be resumed with the requested topology or inputs."""


def build_manifest(*, export: dict[str, Any], base_model: dict[str, str], config: dict[str, Any],
                   world_size: int, zero_stage: int, global_step: int, final_loss: float | None,
                   extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest dict. ``export`` = ``{"uri", "fingerprint", "bank_versions", "rows"}``;
    ``base_model`` = ``{"path", "weights_sha256", "tokenizer_sha256"}``; ``zero_stage`` 0 = no
    DeepSpeed; ``final_loss`` is the last logged training loss (``None`` before the first log)."""
    import accelerate, peft, torch, transformers, trl  # noqa: E401 - versions for the record
    versions = {m.__name__: m.__version__ for m in (torch, transformers, trl, peft, accelerate)}
    return {"schema_version": SCHEMA_VERSION, "export": export, "base_model": base_model,
            "config": config, "world_size": world_size, "zero_stage": zero_stage,
            "global_step": global_step, "final_loss": final_loss, "versions": versions,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}


def write_checkpoint_manifest(folder: str, manifest: dict[str, Any]) -> str:
    """Write ``manifest`` into the checkpoint folder ``folder`` (``checkpoint-<step>``) atomically
    (temp file + rename); returns its path. The final model folder's manifest is the recorder's."""
    os.makedirs(folder, exist_ok=True)
    return atomic_write_json(os.path.join(folder, MANIFEST_NAME), manifest)


def fit_counts(manifest: dict[str, Any]) -> dict[str, Any]:
    """The ``counts`` of a fit from its manifest's ``export.rows`` (:func:`sft.train.load_pairs`):
    in = the pairs of the split it used or quarantined, out = used, quarantined by reason
    (``quarantine_reasons``)."""
    rows = (manifest.get("export") or {}).get("rows") or {}
    used, refused = int(rows.get("used") or 0), int(rows.get("quarantined") or 0)
    tally = QuarantineTally(Counter({"unit": refused}), Counter(manifest.get("quarantine_reasons") or {}))
    return counts(used + refused, used, tally, where="sft_fit")


def model_files(folder: str) -> list[str]:
    """The files of the final model in an SFT output folder (weights, config, tokenizer...): its
    top-level files but the manifest and :data:`QUARANTINE_FILE`, sorted."""
    if not os.path.isdir(folder):
        return []
    return sorted(f for f in os.listdir(folder) if os.path.isfile(os.path.join(folder, f))
                  and f not in (MANIFEST_NAME, QUARANTINE_FILE) and ".tmp-" not in f)


def read_manifest(folder: str) -> dict[str, Any] | None:
    """The manifest of a checkpoint folder, or ``None`` when it has none."""
    path = os.path.join(folder, MANIFEST_NAME)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def find_checkpoint(output_dir: str, resume: str) -> str | None:
    """Checkpoint to resume: ``""`` -> ``None``; ``"auto"`` -> the latest ``checkpoint-<step>`` in
    ``output_dir`` (``None`` if there is none); anything else must be an existing folder
    (``FileNotFoundError`` otherwise)."""
    if not resume:
        return None
    if resume == "auto":
        if not os.path.isdir(output_dir):
            return None
        from transformers.trainer_utils import get_last_checkpoint
        return get_last_checkpoint(output_dir)
    if not os.path.isdir(resume):
        raise FileNotFoundError(f"checkpoint to resume not found: {resume}")
    return resume


def check_resume(saved: dict[str, Any] | None, *, world_size: int, zero_stage: int,
                 export_fingerprint: str, mode: str = "strict") -> str:
    """Decide how to resume from a checkpoint whose manifest is ``saved``.

    Returns ``"continue"`` (optimizer, scheduler and data position restored) or
    ``"weights_only"`` (``mode == "weights_only"`` and the topology changed: load the weights,
    fresh optimizer). Raises :class:`ResumeError` when the checkpoint has no manifest, when the
    export fingerprint differs (the saved data position would point into other data), or, in
    ``strict`` mode, when the world size or ZeRO stage differs.
    """
    if saved is None:
        raise ResumeError(f"the checkpoint has no {MANIFEST_NAME}: it was not written by this job, "
                          "so its data and topology are unknown; start a fresh run")
    if saved["export"]["fingerprint"] != export_fingerprint:
        raise ResumeError(f"the checkpoint was trained on export {saved['export']['fingerprint']}, "
                          f"not {export_fingerprint}: start a fresh run (or a new output_dir)")
    diffs = [f"{name} {old} -> {new}" for name, old, new in
             (("world size", saved["world_size"], world_size), ("ZeRO stage", saved["zero_stage"], zero_stage))
             if old != new]
    if not diffs:
        return "continue"
    if mode == "weights_only":
        return "weights_only"
    raise ResumeError(
        f"cannot resume step {saved['global_step']}: {', '.join(diffs)}. The optimizer state is "
        f"sharded for the old topology. Launch with world size {saved['world_size']} and ZeRO "
        f"stage {saved['zero_stage']}, or pass --resume_mode weights_only to restart from the "
        "checkpoint's weights with a fresh optimizer and learning-rate schedule")


def runtime_topology(env: dict[str, str] | None = None) -> tuple[int, int]:
    """(world size, ZeRO stage) of the current process, from the variables ``accelerate launch``
    sets (``WORLD_SIZE``, ``ACCELERATE_USE_DEEPSPEED``, ``ACCELERATE_DEEPSPEED_ZERO_STAGE``);
    ``(1, 0)`` for a plain ``python -m sft.train``."""
    env = os.environ if env is None else env
    world = int(env.get("WORLD_SIZE", "1"))
    deepspeed = env.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
    return world, int(env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "0")) if deepspeed else 0


def config_topology(accelerate_config: str, num_processes: int | None = None) -> tuple[int, int]:
    """(world size, ZeRO stage) an accelerate config file will launch (``num_processes`` is the
    total over all machines, as in accelerate; an explicit override wins)."""
    with open(accelerate_config, encoding="utf-8") as f:
        cfg = yaml.safe_load(f) or {}
    world = int(num_processes or cfg.get("num_processes") or 1)
    if cfg.get("distributed_type") != "DEEPSPEED":
        return world, 0
    ds = cfg.get("deepspeed_config") or {}
    if ds.get("deepspeed_config_file"):
        with open(ds["deepspeed_config_file"], encoding="utf-8") as f:
            return world, int(json.load(f).get("zero_optimization", {}).get("stage", 0))
    return world, int(ds.get("zero_stage", 0))

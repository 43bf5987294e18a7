"""Coupled GRPO checkpoint: policy weights, optimizer state, step, RNG state and skill bank.

The reference saved the evolved bank to a file nothing reloaded, so a resumed run trained with
a different bank than the one that conditioned its last step (D-R3). Here one
folder holds everything and is written atomically (temp folder, then rename)::

    <output_dir>/checkpoints/step-000004/
        policy/            model + tokenizer (safetensors, save_pretrained)
        optimizer.pt       torch optimizer state_dict   (loaded with weights_only=True: no pickle code)
        rng.pt             python random + torch CPU RNG states (weights_only=True)
        skill_bank.json    SkillRL bank JSON with metadata.dynamic_skills / history
        checkpoint.json    manifest: step, bank_version, files, model content hashes, config
"""
from __future__ import annotations

import json
import os
import random
import shutil
import time
from typing import Any

from pipeline.core.fsutil import atomic_write_json, temp_name
from pipeline.core.layout import CHECKPOINT_MANIFEST

MANIFEST = CHECKPOINT_MANIFEST  # the name is declared in pipeline.core.layout


def checkpoint_dir(output_dir: str, step: int) -> str:
    """``<output_dir>/checkpoints/step-NNNNNN``: the folder of the checkpoint of ``step``."""
    return os.path.join(output_dir, "checkpoints", f"step-{step:06d}")


def save(output_dir: str, step: int, model, tokenizer, optimizer, bank, config: dict[str, Any],
         extra: dict[str, Any] | None = None) -> str:
    """Write the checkpoint of ``step`` (replacing an older one of the same step); returns its folder.

    ``bank`` is a :class:`sft.rl.evolution.SkillBank`: the bank that conditions the NEXT step.
    """
    import torch
    from sft.base_model import content_hashes

    final = checkpoint_dir(output_dir, step)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = temp_name(final)
    try:
        model.save_pretrained(os.path.join(tmp, "policy"))
        tokenizer.save_pretrained(os.path.join(tmp, "policy"))
        torch.save(optimizer.state_dict(), os.path.join(tmp, "optimizer.pt"))
        torch.save({"python": random.getstate(), "torch": torch.get_rng_state()}, os.path.join(tmp, "rng.pt"))
        bank.save(os.path.join(tmp, "skill_bank.json"))
        manifest = {"step": step, "bank_version": bank.version, "bank_file": "skill_bank.json",
                    "policy_dir": "policy", "optimizer": "optimizer.pt", "rng": "rng.pt",
                    **content_hashes(os.path.join(tmp, "policy")), "config": config,
                    "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}
        atomic_write_json(os.path.join(tmp, MANIFEST), manifest)
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def latest(output_dir: str) -> str | None:
    """The highest-step complete checkpoint folder under ``output_dir``, or ``None``."""
    root = os.path.join(output_dir, "checkpoints")
    if not os.path.isdir(root):
        return None
    done = sorted(d for d in os.listdir(root)
                  if d.startswith("step-") and ".tmp-" not in d and os.path.isfile(os.path.join(root, d, MANIFEST)))
    return os.path.join(root, done[-1]) if done else None


def resolve(resume: str, output_dir: str) -> str | None:
    """``''`` -> None; ``'auto'`` -> :func:`latest` (None when there is none); else the folder,
    which must hold ``checkpoint.json`` (``FileNotFoundError`` otherwise)."""
    if not resume:
        return None
    if resume == "auto":
        return latest(output_dir)
    if not os.path.isfile(os.path.join(resume, MANIFEST)):
        raise FileNotFoundError(f"{resume} is not a GRPO checkpoint (no {MANIFEST})")
    return resume


def read_manifest(path: str) -> dict[str, Any]:
    """The ``checkpoint.json`` of checkpoint folder ``path``; raises ``OSError`` without one."""
    with open(os.path.join(path, MANIFEST), encoding="utf-8") as f:
        return json.load(f)


def restore_state(path: str, optimizer) -> dict[str, Any]:
    """Load optimizer and RNG states of checkpoint ``path`` in place; returns its manifest.

    Raises ``ValueError`` when the manifest's bank version does not match its bank file
    (a checkpoint whose parts were mixed up is refused, never half-used).
    """
    import torch
    from pipeline.bank.evolving import SkillBank

    manifest = read_manifest(path)
    optimizer.load_state_dict(torch.load(os.path.join(path, manifest["optimizer"]), weights_only=True))
    rng = torch.load(os.path.join(path, manifest["rng"]), weights_only=True)
    random.setstate(_as_tuple(rng["python"]))
    torch.set_rng_state(rng["torch"])
    bank = SkillBank.load(os.path.join(path, manifest["bank_file"]), env=manifest["config"].get("env", "textworld"))
    if bank.version != manifest["bank_version"]:
        raise ValueError(f"checkpoint {path}: bank file has version {bank.version}, manifest says "
                         f"{manifest['bank_version']}")
    manifest["bank"] = bank
    return manifest


def _as_tuple(state):
    """``random.setstate`` needs tuples; the loader may give lists."""
    return tuple(_as_tuple(x) if isinstance(x, (list, tuple)) else x for x in state)

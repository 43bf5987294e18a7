"""Opening the configured scorer (``usefulness.scorer``) and naming it.

``""`` is the student's base model: the embedded SmolLM2-135M-Instruct GGUF converted once to a
Hugging Face folder (:func:`pipeline.llm.hfmodel.ensure_base_model`), named by its GGUF hash as the
embedded endpoint names it. A folder path is any local causal LM (an SFT checkpoint), named by the
folder's base name and a hash of its weight files.
"""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin")


@lru_cache(maxsize=8)
def scorer_id(scorer: str) -> str:
    """``"<name>@<12 hex>"`` of the configured scorer (module docstring). Raises
    ``FileNotFoundError`` for a folder without weight files."""
    if not scorer:
        from pipeline.llm.server import EMBEDDED_MODEL_ALIAS, embedded_model_id
        return embedded_model_id(EMBEDDED_MODEL_ALIAS)
    root = Path(scorer).expanduser()
    weights = sorted(p for p in root.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file()) if root.is_dir() else []
    if not weights:
        raise FileNotFoundError(f"usefulness.scorer {scorer!r}: no weight files ({', '.join(WEIGHT_SUFFIXES)}) "
                                "in that folder; name a local Hugging Face causal-LM folder or leave it empty")
    h = hashlib.sha256()
    for p in weights:
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return f"{root.name}@{h.hexdigest()[:12]}"


def scorer_folder(scorer: str) -> str:
    """The Hugging Face folder of the configured scorer (the embedded one converted on first use)."""
    if scorer:
        return str(Path(scorer).expanduser())
    from pipeline.llm.hfmodel import ensure_base_model
    return str(ensure_base_model())


def open_scorer(cfg):
    """An :class:`~pipeline.usefulness.scorer.ActionScorer` for the ``usefulness`` config section ``cfg``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from pipeline.usefulness.scorer import ActionScorer
    return ActionScorer(scorer_folder(cfg.scorer), threads=cfg.threads, max_prompt_tokens=cfg.max_prompt_tokens)

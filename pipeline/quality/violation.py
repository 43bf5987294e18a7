"""The record every content rule returns: :class:`Violation`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """One broken rule: ``reason`` (the name of a registered rule, :mod:`pipeline.quality.catalog`),
    a human-readable ``detail``, and ``item``: the index of the item it is about in its answer
    (a skill or mistake of a skills answer), or ``None`` when it is about the answer as a whole or
    the answer has no items."""
    reason: str
    detail: str
    item: int | None = None

    def message(self) -> str:
        """The check message fed back to the model: ``"<reason>: <detail>"`` (parsed by
        :func:`pipeline.quality.reason_of`)."""
        return f"{self.reason}: {self.detail}"

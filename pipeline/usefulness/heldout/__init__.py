"""Shipped held-out expert trajectories per environment (see SOURCE.md in this folder)."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=8)
def probe_trajectories(env: str) -> tuple:
    """The shipped verified successes of ``env`` as :class:`~pipeline.core.records.Trajectory`
    objects, in file order; ``()`` for an env without a file."""
    from pipeline.core.records import Trajectory
    path = resources.files(__name__) / f"{env}.jsonl"
    if not path.is_file():
        return ()
    return tuple(Trajectory.from_row(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()
                 if line.strip())

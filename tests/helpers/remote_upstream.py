"""Upstream artifacts of an LLM stage committed to an object-storage run, for the remote tests."""
from __future__ import annotations

from pipeline.core.artifacts import ArtifactStore
from pipeline.engine.remote import open_root
from tests.helpers.llm_stage_data import cool_apple, write_trajectories


def commit_cool_apple_upstream(root: str, run_id: str = "r1") -> None:
    """Commit ``verify`` and ``split`` of run ``run_id`` under ``root`` (an fsspec URI): two
    cool-apple trajectories, ``traj-A`` a success and ``traj-B`` a failure (both feed memory)."""
    with open_root(root, run_id) as (local, hooks):
        for stage in ("verify", "split"):
            hooks.before(stage)
        write_trajectories(ArtifactStore(local, run_id), [cool_apple("success", "traj-A"),
                                                          cool_apple("failure", "traj-B")])
        for stage in ("verify", "split"):
            hooks.after(stage)

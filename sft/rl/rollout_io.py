"""Write rollout episodes as Parquet trajectories and as SkillRL rollout txt trees.

Parquet: one ``records.TRAJECTORY_SCHEMA`` row per episode, written as the ``rollout`` stage of
a run through :class:`~pipeline.core.artifacts.ArtifactStore` (atomic, with a manifest).

Text (SkillRL's rollout log layout, the one ``skillpipe run`` parses with ``pipeline.formats.skillrl_txt``)::

    <out>/env000/test1.txt ...      one folder per env instance (in first-seen order),
                                    one file per episode of it (K = 1..)
    === Trajectory for Test K, Env N ===
    Step -1 | Action: None | Reward: 0.000 | Done: False
    Obs: <the full prompt of the next turn>
    <blank line>
    Step 00 | Action: <projected action> | Reward: 10.000 | Done: True
    Obs: ...

As in SkillRL's writer the ``Obs:`` payload is the whole prompt of the next turn (here: our
renderer's system + blank line + user text, the SFT pair's alpaca ``instruction``), so the
parser recovers observation and admissible list from it, and step counts round-trip exactly.
"""
from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PromptConfig
from pipeline.core.fsutil import atomic_write
from pipeline.core.layout import ROLLOUT_STAGE
from pipeline.prompts import render_step_messages
from pipeline.core.records import TRAJECTORY_SCHEMA, to_table
from sft.rl.rollout import Episode

STAGE = ROLLOUT_STAGE


def prompt_text(messages: list[dict[str, str]]) -> str:
    """System + blank line + user: the prompt as one text (validate's alpaca ``instruction``)."""
    return messages[0]["content"] + "\n\n" + messages[1]["content"]


def render_txt(ep: Episode, test_no: int, env_no: int, prompt_cfg: PromptConfig) -> str:
    """One episode in the SkillRL rollout txt layout (module docstring)."""
    traj = ep.trajectory
    blocks = [f"=== Trajectory for Test {test_no}, Env {env_no} ==="]
    for j, step in enumerate(traj.steps):
        obs = prompt_text(render_step_messages(traj, j + 1, ep.skills_block, prompt_cfg))
        label = "-1" if j == 0 else f"{j - 1:02d}"
        action = "None" if step.action is None else step.action
        blocks.append(f"Step {label} | Action: {action} | Reward: {step.reward:.3f} | Done: {step.done}\nObs: {obs}")
    return "\n\n".join(blocks) + "\n"


def write_txt_tree(out_dir: str, episodes: list[Episode], prompt_cfg: PromptConfig) -> list[str]:
    """Write ``envNNN/testK.txt`` files under ``out_dir``; returns the paths, in write order.

    Env folders are numbered by first appearance of each ``env_instance``; K counts that
    instance's episodes from 1. Each file is written to a temp name and renamed.
    """
    env_no: dict[str, int] = {}
    tests: dict[str, int] = defaultdict(int)
    paths = []
    for ep in episodes:
        inst = ep.trajectory.env_instance
        n = env_no.setdefault(inst, len(env_no))
        tests[inst] += 1
        folder = os.path.join(out_dir, f"env{n:03d}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"test{tests[inst]}.txt")
        atomic_write(path, render_txt(ep, tests[inst], n, prompt_cfg))
        paths.append(path)
    return paths


def write_parquet(root: str, run_id: str, episodes: list[Episode], manifest: dict[str, Any]) -> str:
    """Write the episodes as the ``rollout`` artifact of run ``run_id`` under ``root``; returns its folder."""
    rows = [ep.trajectory.to_row() for ep in episodes]
    table = to_table(rows, TRAJECTORY_SCHEMA)
    counts = {"in": len(rows), "units_in": len(rows), "units_out": len(rows), "out": len(rows),
              "quarantined": 0, "quarantine_reasons": {}}
    art = ArtifactStore(root, run_id).write(STAGE, table, [], {"stage": STAGE, "run_id": run_id,
                                                               "counts": counts, **manifest})
    return art.path

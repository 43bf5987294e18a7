"""Shared pieces of the content-rule tests of the LLM stages: a real sample parsed into a store,
a stub answer, and the empty memory/skills upstreams distill reads."""
from __future__ import annotations

import json
import os
import shutil

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.records import MEMORY_SCHEMA, SKILL_SCHEMA, Trajectory
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext
from tests.helpers.llm_stage_data import write_upstream
from tests.helpers.paths import REPO


def parsed_sample(tmp_path, sample: str, dest: str) -> tuple[ArtifactStore, list[Trajectory]]:
    """parse + remove_loops + verify of ``data/samples/<sample>`` (copied to ``<tmp_path>/in/<dest>``: trajectory
    ids hash the path) into a store under ``tmp_path``; returns the store and the trajectories."""
    inp = tmp_path / "in"
    shutil.copytree(os.path.join(REPO, "data", "samples", sample), inp / dest)
    store = ArtifactStore(str(tmp_path / "root"), "r1")
    cfg = PipelineConfig()
    # these tests are about the LLM content rules: verify only records its findings here (the
    # synthetic SkillRL sample takes objects its admissible lists do not offer)
    cfg.verify.on_flagged, cfg.verify.rejected_steps = "flag", "demote"
    ctx = StageContext(store, cfg, input_path=str(inp))
    for stage in ("parse", "remove_loops", "verify"):
        run_stage(stage, ctx, log=lambda s: None)
    return store, [Trajectory.from_row(r) for r in store.require("verify").read_rows()]


def answer(value):
    return {"content": json.dumps(value)}


def distill_store(store):
    write_upstream(store, "memory", [], MEMORY_SCHEMA)
    write_upstream(store, "skills", [], SKILL_SCHEMA)
    return store

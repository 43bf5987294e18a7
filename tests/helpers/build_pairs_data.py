"""Shared pieces of the build_pairs and export tests: a skill bank row, a distill row, a run of
stage build_pairs on crafted artifacts, and an SFT pair row as build_pairs writes it."""
import dataclasses

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.records import DISTILLED_SCHEMA, SKILL_SCHEMA, TRAJECTORY_SCHEMA, to_table
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext


SKILL = {"skill_id": "gen-1", "env": "", "kind": "general", "category": "", "title": "Check Twice",
         "principle": "Verify before answering; the answer is March 16, 2018.", "when_to_apply": "",
         "description": "", "why_it_happens": "", "how_to_avoid": "", "source_memory_ids": ["mem-1"],
         "source_trajectory_ids": ["traj-x"], "bank_version": "bank-1", "model": "m", "prompt_sha": "p"}


def distilled(traj, thinks, synthetic=False, skills=()):
    return {"trajectory_id": traj.trajectory_id, "env": traj.env, "category": traj.category,
            "thinks": [{"step_index": i, "think": t} for i, t in thinks.items()], "synthetic_done": synthetic,
            "skill_ids_used": list(skills), "memory_ids": ["mem-1"], "bank_version": "bank-1",
            "model": "stub-model", "prompt_sha": "sha-1"}


def run_validate(tmp_path, trajs, drows, flag_rules=(), **validate_cfg):
    """Write verify/skills/distill artifacts, run build_pairs with ``validate_cfg`` as its
    config (and ``flag_rules`` as ``quality.flag_rules``), return (rows, quarantine, manifest)."""
    store = ArtifactStore(str(tmp_path), "r1")
    for stage, rows, schema in (("verify", [t.to_row() for t in trajs], TRAJECTORY_SCHEMA),
                                ("skills", [SKILL], SKILL_SCHEMA), ("distill", drows, DISTILLED_SCHEMA)):
        store.write(stage, to_table(rows, schema), [], {"fingerprint": f"{stage}-fp"})
    cfg = PipelineConfig()
    cfg.quality.flag_rules = list(flag_rules)
    # fixtures use placeholder thinks ("T1", "a"): rule short_think is off unless a test turns it on
    validate_cfg.setdefault("min_think_words", 0)
    cfg.build_pairs = dataclasses.replace(cfg.build_pairs, **validate_cfg)
    res = run_stage("build_pairs", StageContext(store, cfg), log=lambda s: None)
    art = store.require("build_pairs")
    return art.read_rows(), art.read_rows(quarantine=True), res.manifest


def reasons(q):
    return [r["reason"] for r in q]


def pair(i, instance, env="alfworld", category="clean"):
    msgs = [{"role": "system", "content": f"S{i}"}, {"role": "user", "content": f"U{i}"},
            {"role": "assistant", "content": f"<think>t</think>\n<action>a{i}</action>"}]
    return {"pair_id": f"pair-{i}", "trajectory_id": f"traj-{instance}", "step_id": f"traj-{instance}/s1",
            "step_index": 1, "env": env, "env_instance": instance, "category": category, "messages": msgs,
            "instruction": f"S{i}\n\nU{i}", "output": msgs[2]["content"], "action": f"a{i}", "think": "t",
            "synthetic": False, "memory_ids": ["mem-1"], "skill_ids_used": ["gen-1"], "bank_version": "bank-1",
            "source_uri": "rollouts/test0.txt", "source_line": 4, "model": "stub-model", "prompt_sha": "sha-1",
            "flags": [], "split": ""}

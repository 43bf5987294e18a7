"""Shared pieces of the skills tests and of the tests that need a skills upstream: memory rows
(``MEMORIES``), the verify/split artifacts skills reads instances from, and a skills run
with a validation instance."""
from __future__ import annotations

import dataclasses
import json

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.records import MEMORY_SCHEMA
from pipeline.engine.runner import run_stage
from tests.helpers.llm_stage_data import cool_apple, write_trajectories, write_upstream


COOL = "Search [Location] for [Object] -> Take [Object] -> Cool [Object] with fridge -> Place [Object] at [Target]"
HEAT = "Search [Location] for [Object] -> Take [Object] -> Heat [Object] with microwave -> Place [Object] at [Target]"


def mem(mid: str, category: str, outcome: str, pattern: str = "", mistakes=()) -> dict:
    return {"memory_id": mid, "trajectory_id": "traj-" + mid[4:], "env": "alfworld", "category": category,
            "outcome": outcome, "task": f"{category} some object", "contextual_description": "d",
            "refined_trajectory": [], "planning_pattern": pattern,
            "mistakes_to_avoid": [{"trigger_condition": t, "bad_action": b} for t, b in mistakes],
            "model": "m", "prompt_sha": "p"}


MEMORIES = [mem("mem-1", "cool", "success", COOL), mem("mem-2", "heat", "success", HEAT),
            mem("mem-3", "cool", "success", "  search [location] for [object] -> take [object] -> cool [object] "
                                            "with fridge -> place [object] at [target]"),
            mem("mem-4", "cool", "failure", mistakes=[("holding an object to cool", "went to the microwave")])]


def write_dedupe(store: ArtifactStore, instances: dict[str, str], val_fraction: float = 0.0) -> None:
    """The verify artifact skills reads env_instance from: one trajectory per id, placed in
    the given instance (the steps do not matter to skills), and its split artifact."""
    write_trajectories(store, [dataclasses.replace(cool_apple(tid=tid), env_instance=inst)
                               for tid, inst in instances.items()], val_fraction)


def aggregate_with_val_instance(tmp_path):
    """Run aggregate (stub LLM, val_fraction 0.3) on MEMORIES placed so that mem-2 is in a val
    instance; returns ``(store, StageResult, stub)``. Shared with test_export."""
    from bench.chat_stub import ChatStub
    from tests.helpers.llm_faults import stage_ctx, stub_llm_config

    store = ArtifactStore(str(tmp_path), "r1")
    # hash scores at seed 0: kitchen-1 .562, -2 .960, -3 .339, -4 .265 -> only kitchen-4 < 0.3.
    # traj-5 yielded no memory: its instance is still in the recorded assignment (export needs it).
    write_dedupe(store, {"traj-1": "kitchen-1", "traj-2": "kitchen-4", "traj-3": "kitchen-1",
                         "traj-4": "kitchen-2", "traj-5": "kitchen-3"}, val_fraction=0.3)
    write_upstream(store, "memory", MEMORIES, MEMORY_SCHEMA)
    skill = {"title": "Search Then Act", "principle": "Find the object first.", "when_to_apply": "Object unseen."}
    script = [{"content": json.dumps({"skills": [skill]})},                                # general
              {"content": json.dumps({"skills": [dict(skill, title="Cool In Fridge")]})},  # task_specific cool
              {"content": json.dumps({"mistakes": [{"description": "Wrong appliance", "why_it_happens": "Verb "
                                                    "misread", "how_to_avoid": "Reread the goal"}]})}]
    with ChatStub(script) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub))
        cfg.export.val_fraction = 0.3
        res = run_stage("skills", stage_ctx(store, cfg), model_id="stub-model", log=lambda s: None)
    return store, res, stub

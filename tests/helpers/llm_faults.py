"""Shared pieces of the stage-level fault tests: canned memory answers for the two trajectories of
``llm_stage_data.cool_apple`` (A a success, B a failure), an LLM config and a stage context on the
scripted stub (``bench/chat_stub.py``), and the manifest's LLM counters."""
from __future__ import annotations

import json
import os

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import LLMConfig, PipelineConfig
from pipeline.stage.stage import StageContext
from pipeline.llm.client import LLMClient
from bench.chat_stub import ChatStub

SUCCESS = {"contextual_description": "Cool an apple, then put it on the countertop.",
           "refined_trajectory": [{"step_index": 4, "action": "cool apple 1 with fridge 1",
                                   "critical_observation": "the fridge cools", "reasoning": "the goal asks cool"}],
           "planning_pattern": "Find [Object] -> Take [Object] -> Cool [Object] -> Place at [Target]"}
FAILURE = {"contextual_description": "Cooling failed: went to the microwave.",
           "mistakes_to_avoid": [{"trigger_condition": "an object must be cooled", "bad_action": "used the microwave"}]}
GOOD_B = {"content": json.dumps(FAILURE)}
TRUNCATED = json.dumps(SUCCESS)[:40]


def stub_llm_config(stub: ChatStub, **over) -> LLMConfig:
    """Client settings for the stub: json_object dialect, 2 retries, 1 repair, 0.5 s timeout, one request at a time."""
    cfg = dict(base_url=stub.base_url, model="stub-model", structured_output="json_object", max_retries=2,
               max_repairs=1, timeout_s=0.5, concurrency=1)
    return LLMConfig(**{**cfg, **over})


def stage_ctx(store: ArtifactStore, cfg: PipelineConfig) -> StageContext:
    """A context whose LLM is an LLMClient on the stub, caching in the run dir (as provider.py does)."""
    def factory():
        return LLMClient(cfg.llm, cache_path=os.path.join(store.run_dir, "llm_cache.sqlite"),
                         backoff_initial_s=0.01, backoff_max_s=0.05)
    return StageContext(store, cfg, env="alfworld", llm_factory=factory)


def llm_counts(manifest: dict) -> dict:
    """The LLM counters a fault test compares, from a stage manifest."""
    return {k: manifest["llm"][k] for k in ("calls", "retries", "repairs", "failures", "cache_hits", "prompt_tokens")}

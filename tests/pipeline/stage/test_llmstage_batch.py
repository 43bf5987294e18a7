"""An LLM stage run in batch mode gives what the same stage gives online: the same rows, the same
quarantine, the same counts and calls (same stub answers: bench/stub_endpoint.py answers a batch
line as it answers the same online call)."""
from __future__ import annotations

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import LLMConfig, PipelineConfig
from pipeline.engine.remote import read_table
from pipeline.engine.runner import run_stage
from bench.stub_endpoint import StubEndpoint
from tests.helpers.llm_faults import stage_ctx
from tests.helpers.llm_stage_data import cool_apple, heat_mug, write_trajectories

TRAJS = [cool_apple("success"), cool_apple("failure", "traj-cool-2"), heat_mug()]


def run_memory(tmp_path, mode: str) -> tuple[dict, list, list, StubEndpoint]:
    with StubEndpoint() as stub:
        store = ArtifactStore(str(tmp_path / mode), "r")
        write_trajectories(store, TRAJS)
        cfg = PipelineConfig()
        cfg.llm = LLMConfig(base_url=stub.base_url, model="stub-model", structured_output="json_schema", mode=mode,
                            batch_poll_s=0.02, max_repairs=1)
        cfg.quality.off_topic_threshold = -1  # no encoder to load; the grounding rules still quarantine some answers
        res = run_stage("memory", stage_ctx(store, cfg), model_id="stub-model", log=lambda m: None)
    rows = sorted(read_table(res.uri).to_pylist(), key=lambda r: r["memory_id"])
    quarantine = sorted((q["reason"], q["item_id"], q["raw"], q["detail"])
                        for q in read_table(res.uri, quarantine=True).to_pylist())
    return res.manifest, rows, quarantine, stub


def test_memory_in_batch_mode_equals_online(tmp_path):
    online, online_rows, online_q, _ = run_memory(tmp_path, "online")
    batch, batch_rows, batch_q, stub = run_memory(tmp_path, "batch")
    assert online_rows and online_q  # kept rows and quarantined ones: both paths are compared
    assert batch_rows == online_rows
    assert batch_q == online_q
    assert batch["counts"] == online["counts"]
    assert batch["counts"]["in"] == batch["counts"]["out"] + batch["counts"]["quarantined"]
    same = ("calls", "repairs", "failures", "prompt_tokens", "completion_tokens", "cache_hits")
    assert {k: batch["llm"][k] for k in same} == {k: online["llm"][k] for k in same}
    assert batch["failed_requests"] == online["failed_requests"]
    assert (batch["llm"]["mode"], online["llm"]["mode"]) == ("batch", "online")
    assert stub.online_calls() == 0 and batch["llm"]["batches"] >= 1
    # the same tokens at half the price, and the cost of each kept memory in the manifest
    # both costs are recorded rounded to 8 decimals, so half of one may differ in the last digit
    assert batch["llm"]["cost_usd"] == pytest.approx(online["llm"]["cost_usd"] * 0.5, abs=1.1e-8)
    assert batch["llm"]["rows_kept"] == len(batch_rows)
    assert batch["llm"]["cost_per_row_usd"] == round(batch["llm"]["cost_usd"] / len(batch_rows), 8)

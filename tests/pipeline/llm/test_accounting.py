"""Cost and per-row figures of an LLM stage (pipeline/llm/accounting.py), their sum over shards,
the report's LLM table and the --llm-mode option."""
from __future__ import annotations

import pytest

from pipeline.core.config import LLMConfig
from pipeline.runconfig import OptionError, run_config
from pipeline.engine.shards import _llm_sum
from pipeline.llm.accounting import cost_usd, stage_figures
from pipeline.report import runinfo

STATS = {"calls": 10, "cache_hits": 2, "prompt_tokens": 3_000_000, "cached_prompt_tokens": 1_000_000,
         "completion_tokens": 500_000, "retries": 1, "repairs": 2, "failures": 1, "rate_limited": 3,
         "limit_wait_s": 4.5, "batches": 0}


def test_cached_tokens_are_priced_apart():
    # 2M uncached at 0.15 + 1M cached at 0.075 + 0.5M completion at 0.60, per 1M
    assert cost_usd(STATS, 0.15, 0.075, 0.60) == pytest.approx(0.30 + 0.075 + 0.30)
    assert cost_usd(STATS, 0.15, 0.075, 0.60, batch_factor=0.5) == pytest.approx(0.3375)


def test_stage_figures_per_kept_row():
    online = stage_figures(STATS, 5, LLMConfig())
    assert online["uncached_prompt_tokens"] == 2_000_000 and online["mode"] == "online"
    assert online["cost_usd"] == pytest.approx(0.675)
    assert online["tokens_per_row"] == 700_000.0 and online["cost_per_row_usd"] == pytest.approx(0.135)
    batch = stage_figures(STATS, 5, LLMConfig(mode="batch", base_url="http://x/v1", model="m"))
    assert batch["cost_usd"] == pytest.approx(0.3375) and batch["prices"].endswith("batch x0.5")
    assert stage_figures(STATS, 0, LLMConfig())["cost_per_row_usd"] is None  # every unit quarantined


def test_shard_sums_recompute_the_ratios():
    a = stage_figures(STATS, 5, LLMConfig())
    b = stage_figures(STATS, 0, LLMConfig())
    total = _llm_sum([a, b])
    assert total["cost_usd"] == pytest.approx(1.35) and total["rows_kept"] == 5
    assert total["cost_per_row_usd"] == pytest.approx(0.27) and total["tokens_per_row"] == 1_400_000.0
    assert total["prices"] == a["prices"] and total["mode"] == "online"
    assert _llm_sum([{}, {}]) == {}


def test_report_prices_cached_tokens_batch_mode_and_kept_rows():
    batch = stage_figures(STATS, 4, LLMConfig(mode="batch", base_url="http://x/v1", model="m"))
    stages = [{"stage": "memory", "manifest": {"wall_s": 10.0, "counts": {"out": 4}, "llm": batch}}]
    u = runinfo.llm_usage(stages, price_prompt=1.0, price_completion=2.0, price_cached=0.5)
    r = u["rows"][0]
    assert r["cost_usd"] == pytest.approx((2.0 + 0.5 + 1.0) * 0.5)  # 2M x 1 + 1M x 0.5 + 0.5M x 2, batch half
    assert r["cost_per_row"] == pytest.approx(1.75 / 4) and r["uncached_prompt_tokens"] == 2_000_000
    assert (r["rate_limited"], r["limit_wait_s"], r["mode"]) == (3, 4.5, "batch")
    assert u["total"]["cached_prompt_tokens"] == 1_000_000


def test_llm_mode_option():
    assert run_config(None, llm_mode="batch", llm_base_url="https://api.example/v1", llm_model="m").llm.mode == "batch"
    with pytest.raises(OptionError, match="batch mode needs an endpoint") as e:
        run_config(None, llm_mode="batch")
    assert e.value.option == "--llm-mode"
    with pytest.raises(OptionError, match="unknown LLM mode"):
        run_config(None, llm_mode="later", llm_base_url="https://api.example/v1")

"""What an LLM stage cost: its client counters priced, and per kept output row.

A stage manifest's ``llm`` section holds the client's counters (:data:`client.COUNTERS`: calls,
cache hits, prompt tokens and the cached part of them, completion tokens, retries, repairs,
failures, 429s, seconds waiting on the rate limits, batch jobs) plus what
:func:`stage_figures` adds:

* ``mode``: ``online`` or ``batch``;
* ``uncached_prompt_tokens`` = prompt tokens - cached prompt tokens;
* ``cost_usd`` = (uncached x ``price_prompt`` + cached x ``price_cached`` + completion x
  ``price_completion``) / 1e6, x ``batch_price_factor`` in batch mode (cache hits cost nothing:
  their tokens were paid by the run that received them) and ``prices``, the prices used, as text;
* ``rows_kept``: the stage's output rows (memories, skills, distilled trajectories);
  ``tokens_per_row`` and ``cost_per_row_usd``: all tokens and the cost over those rows, so
  what a quarantine costs shows (``None`` when no row was kept).

All counters and ``cost_usd`` add up over shards; :func:`per_row` recomputes the two ratios of
a sum (the collect step of a sharded stage calls it).
"""
from __future__ import annotations

from typing import Any


def cost_usd(stats: dict[str, Any], price_prompt: float, price_cached: float, price_completion: float,
             batch_factor: float = 1.0) -> float:
    """USD for the tokens of ``stats`` (prices per 1M tokens; ``batch_factor`` multiplies all)."""
    prompt = int(stats.get("prompt_tokens") or 0)
    cached = min(int(stats.get("cached_prompt_tokens") or 0), prompt)
    usd = ((prompt - cached) * price_prompt + cached * price_cached
           + int(stats.get("completion_tokens") or 0) * price_completion) / 1e6
    return usd * batch_factor


def per_row(llm: dict[str, Any]) -> dict[str, Any]:
    """``llm`` with ``uncached_prompt_tokens``, ``tokens_per_row`` and ``cost_per_row_usd``
    (re)computed from its summable counters."""
    out = dict(llm)
    prompt = int(out.get("prompt_tokens") or 0)
    out["uncached_prompt_tokens"] = prompt - min(int(out.get("cached_prompt_tokens") or 0), prompt)
    rows = int(out.get("rows_kept") or 0)
    tokens = prompt + int(out.get("completion_tokens") or 0)
    out["tokens_per_row"] = round(tokens / rows, 1) if rows else None
    out["cost_per_row_usd"] = round(float(out.get("cost_usd") or 0.0) / rows, 8) if rows else None
    return out


def stage_figures(stats: dict[str, Any], rows_kept: int, cfg: Any) -> dict[str, Any]:
    """A stage manifest's ``llm`` section: the client counters ``stats`` plus the figures of the
    module docstring, priced with the ``price_*`` of ``cfg`` (an ``LLMConfig``)."""
    factor = cfg.batch_price_factor if cfg.mode == "batch" else 1.0
    out = dict(stats, mode=cfg.mode, rows_kept=rows_kept,
               cost_usd=round(cost_usd(stats, cfg.price_prompt, cfg.price_cached, cfg.price_completion, factor), 8),
               prices=f"USD per 1M tokens: prompt {cfg.price_prompt}, cached {cfg.price_cached}, completion "
                      f"{cfg.price_completion}" + (f"; batch x{cfg.batch_price_factor}" if cfg.mode == "batch" else ""))
    return per_row(out)

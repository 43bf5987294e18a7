"""Funnel and LLM facts of one run, read from its stage manifests and quarantine Parquet.

Everything here reads files only (``<run_dir>/<stage>/_manifest.json`` and the quarantine
parts) and returns plain dicts/lists for the template and the charts; a missing or unreadable
file gives an empty result plus a note, never an exception, so every report section renders.
"""
from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core.artifacts import MANIFEST, parquet_parts, quarantine_dir
from pipeline.core.config import LLMConfig
from pipeline.core.manifest import failure_sentence, request_failures
from pipeline.llm.accounting import cost_usd
from pipeline.stages import STAGES

#: Default price in US dollars per 1M tokens (prompt, cached prompt, completion) and the batch
#: share: the defaults of ``LLMConfig`` (gpt-4o-mini's list price, openai.com/api/pricing: 0.15,
#: 0.075 cached, 0.60; Batch API half of that). The embedded model itself costs nothing; the
#: estimate says what the same tokens would cost at a paid endpoint.
DEFAULT_PRICE_PROMPT = LLMConfig.price_prompt
DEFAULT_PRICE_CACHED = LLMConfig.price_cached
DEFAULT_PRICE_COMPLETION = LLMConfig.price_completion
BATCH_PRICE_FACTOR = LLMConfig.batch_price_factor

LLM_COUNTERS = ("calls", "cache_hits", "retries", "repairs", "failures", "prompt_tokens", "cached_prompt_tokens",
                "completion_tokens", "rate_limited", "batches")


def read_json(path: str) -> tuple[Any, str]:
    """``(parsed JSON, "")``, or ``(None, why)`` when the file is missing or unreadable."""
    if not os.path.isfile(path):
        return None, f"{path} does not exist"
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), ""
    except (OSError, ValueError) as e:
        return None, f"{path} is unreadable ({type(e).__name__}: {e})"


def stage_manifests(run_dir: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The data stages' manifests in pipeline order: ``([{"stage", "path", "manifest"}], notes)``.

    Only folders named after a stage in :data:`pipeline.stages.STAGES` count; a stage folder
    whose manifest cannot be read gives a note instead of an entry.
    """
    out, notes = [], []
    for stage in STAGES:
        folder = os.path.join(run_dir, stage)
        if not os.path.isdir(folder):
            continue
        m, why = read_json(os.path.join(folder, MANIFEST))
        if not isinstance(m, dict):
            notes.append(f"{stage}: {why or 'manifest is not a JSON object'}")
            continue
        out.append({"stage": stage, "path": folder, "manifest": m})
    return out, notes


def _shard_rows(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-shard counts when the manifest lists shards (``"shards": [{id|shard|name, counts|in/out/...}]``)."""
    rows = []
    for i, s in enumerate(manifest.get("shards") or []):
        if not isinstance(s, dict):
            continue
        c = s.get("counts") if isinstance(s.get("counts"), dict) else s
        rows.append({"shard": str(s.get("shard", s.get("id", s.get("name", i)))),
                     "in": c.get("units_in", c.get("in")), "out": c.get("out"),
                     "quarantined": c.get("quarantined"), "reasons": c.get("quarantine_reasons") or {}})
    return rows


def _failed(manifest: dict[str, Any]) -> dict[str, Any]:
    """``{"total", "retried", "final", "by_reason", "sentence"}`` of the manifest's failed LLM
    requests (:func:`pipeline.core.manifest.request_failures`), with what they mean in the words
    every reader uses (:func:`pipeline.core.manifest.failure_sentence`)."""
    f = request_failures(manifest)
    return {"total": f.total, "retried": f.retried, "final": f.final, "by_reason": f.by_reason,
            "sentence": failure_sentence(manifest)}


def funnel(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per stage: ``{stage, in, units_in, out, units_out, quarantined, reasons, shards, wall_s,
    failed_requests}`` from each manifest's ``counts`` (``units_in``: what the stage expands its
    input into)."""
    rows = []
    for s in stages:
        m = s["manifest"]
        c = m.get("counts") or {}
        rows.append({"stage": s["stage"], "in": c.get("in"), "units_in": c.get("units_in", c.get("in")),
                     "out": c.get("out"), "units_out": c.get("units_out", c.get("out")),
                     "quarantined": c.get("quarantined", 0) or 0,
                     "reasons": dict(c.get("quarantine_reasons") or {}), "shards": _shard_rows(m),
                     "wall_s": m.get("wall_s"), "failed_requests": _failed(m)})
    return rows


def verify_facts(manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The verify stage's counts for the report (:mod:`pipeline.verify.summary`): ``counters``
    (``None`` when the run has no verify manifest), ``sources`` and ``rules`` rows, ``headline``."""
    from pipeline.verify import summary
    counters = (manifest or {}).get("counters") if manifest else None
    if not isinstance(counters, dict) or "by_source" not in counters:
        return {"counters": None, "sources": [], "rules": [], "headline": "", "columns": summary.COLUMNS}
    return {"counters": counters, "sources": summary.source_rows(counters), "rules": summary.rule_rows(counters),
            "headline": summary.headline(counters), "columns": summary.COLUMNS}


def quarantine_samples(stage_dir: str, per_reason: int = 3, max_chars: int = 300) -> dict[str, list[dict]]:
    """Up to ``per_reason`` quarantined rows per reason (``detail``/``raw`` cut to ``max_chars``).

    Reads only the quarantine columns it shows; returns ``{}`` when there is no quarantine.
    """
    cols = ["reason", "detail", "item_id", "source_uri", "line", "raw"]
    out: dict[str, list[dict]] = {}
    for path in parquet_parts(quarantine_dir(stage_dir)):
        try:  # the reason column first: only the chosen rows' text is converted
            reasons = pq.read_table(path, columns=["reason"]).column("reason").to_pylist()
            have = {r: len(rows) for r, rows in out.items()}
            take = []
            for i, r in enumerate(reasons):
                if have.get(r or "?", 0) < per_reason:
                    have[r or "?"] = have.get(r or "?", 0) + 1
                    take.append(i)
            if not take:
                continue
            t = pq.read_table(path)
        except (pa.ArrowInvalid, OSError, KeyError):
            continue
        t = t.select([c for c in cols if c in t.column_names]).take(take)
        for row in t.to_pylist():
            out.setdefault(row.get("reason") or "?", []).append({k: _cut(v, max_chars) for k, v in row.items()})
    return out


def _cut(v: Any, n: int) -> Any:
    if isinstance(v, str) and len(v) > n:
        return v[:n] + f"… (+{len(v) - n} chars)"
    return v


def llm_usage(stages: list[dict[str, Any]], price_prompt: float = DEFAULT_PRICE_PROMPT,
              price_completion: float = DEFAULT_PRICE_COMPLETION,
              price_cached: float = DEFAULT_PRICE_CACHED) -> dict[str, Any]:
    """LLM counters per stage (``manifest["llm"]``, see ``pipeline.llm.client.COUNTERS``) with
    throughput, cost and cost per kept row, plus totals.

    ``cost_usd`` = (uncached prompt tokens * price_prompt + cached prompt tokens * price_cached +
    completion_tokens * price_completion) / 1e6 for the tokens the endpoint processed (cache hits
    cost nothing and add no tokens), times :data:`BATCH_PRICE_FACTOR` for a stage run in batch
    mode (``llm.mode``). ``rows_kept``: the stage's output rows; ``cost_per_row`` /
    ``tokens_per_row``: cost and tokens over them (``None`` without rows). ``tok_per_s`` =
    (prompt + completion tokens) / stage wall time in seconds; ``limit_wait_s``: seconds calls
    waited on the rate limits. Returns ``{"rows", "total", prices}``; stages whose manifest has no
    ``llm`` section are left out.
    """
    rows = []
    for s in stages:
        llm = s["manifest"].get("llm") or {}
        if not llm:
            continue
        r: dict[str, Any] = {k: int(llm.get(k, 0) or 0) for k in LLM_COUNTERS}
        wall = float(s["manifest"].get("wall_s") or 0.0)
        tokens = r["prompt_tokens"] + r["completion_tokens"]
        mode = llm.get("mode") or "online"
        kept = llm.get("rows_kept", (s["manifest"].get("counts") or {}).get("out"))
        cost = cost_usd(r, price_prompt, price_cached, price_completion, BATCH_PRICE_FACTOR if mode == "batch" else 1.0)
        r.update(stage=s["stage"], wall_s=wall, tok_per_s=tokens / wall if wall > 0 else None, cost_usd=cost,
                 model=(s["manifest"].get("model") or ""), mode=mode, limit_wait_s=float(llm.get("limit_wait_s") or 0),
                 uncached_prompt_tokens=r["prompt_tokens"] - r["cached_prompt_tokens"], rows_kept=kept,
                 cost_per_row=cost / kept if kept else None, tokens_per_row=tokens / kept if kept else None)
        rows.append(r)
    total = {k: sum(r[k] for r in rows)
             for k in LLM_COUNTERS + ("wall_s", "cost_usd", "limit_wait_s", "uncached_prompt_tokens")}
    return {"rows": rows, "total": total, "price_prompt": price_prompt, "price_cached": price_cached,
            "price_completion": price_completion, "batch_factor": BATCH_PRICE_FACTOR}

"""Skill evolution in the LLM fault storm: :func:`sft.rl.evolution.evolve` (what GRPO calls after
each validation) asked through the storm's fault proxy, on the trajectories and skill bank of a
storm run.

Each env of the run gets ``rounds`` evolution rounds. Round ``r`` shows the updater the run's
trajectories ``r, r + rounds, ...`` of that env as the validation episodes (``won`` = the
trajectory's success), with ``update_threshold = 1`` so that every category with a failure in
the round asks for skills; the bank carries over from round to round, as in training. Every
request must end as an applied answer or a quarantine row (``record["quarantine"]``, built by
:func:`pipeline.stage.llmstage.failure_row` with the model's raw output): rows lost = requests -
answered - quarantined, and a quarantine row of an answer-level failure (not a transport error)
must keep a non-empty raw output.
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.core.artifacts import ArtifactStore  # noqa: E402
from pipeline.core.records import Trajectory  # noqa: E402
from pipeline.stage.llmstage import TRANSPORT_REASONS  # noqa: E402

ROUNDS = 6  # evolution rounds per env: up to 6 x (categories with a failure) requests


def evolution_storm(root: str, run_id: str, llm_cfg: Any, base_url: str, rounds: int = ROUNDS) -> dict[str, Any]:
    """Run ``rounds`` evolution rounds per env of run ``run_id`` (its ``remove_loops`` and
    ``skills`` artifacts) with an :class:`LLMClient` built from ``llm_cfg`` (the run's
    ``LLMConfig``) on ``base_url`` (the proxy), without a cache. Returns ``{requests, answered,
    quarantined: {reason: n}, raw_missing, rows_lost, calls, retries, repairs}`` (``calls``: the
    client's count of HTTP calls, to reconcile with the proxy's log)."""
    from pipeline.bank.evolving import SkillBank
    from pipeline.llm.client import LLMClient
    from sft.rl.config import GRPOConfig
    from sft.rl.evolution import evolve
    from sft.rl.rollout import Episode

    store = ArtifactStore(root, run_id)
    trajs = [Trajectory.from_row(r) for r in store.require("remove_loops").read_rows()]
    bank_rows = store.require("skills").read_rows()
    client = LLMClient(llm_cfg, base_url=base_url, backoff_initial_s=0.05, backoff_max_s=0.5)
    cfg = GRPOConfig(update_threshold=1.0, updates_from_validation=True, max_failures=3, max_new_skills=2)
    out: dict[str, Any] = {"requests": 0, "answered": 0, "quarantined": Counter(), "raw_missing": 0}
    for env in sorted({t.env for t in trajs}):
        episodes = [Episode(t, [], t.trajectory_id, t.success, t.reward, "", []) for t in trajs if t.env == env]
        bank = SkillBank([r for r in bank_rows if r["env"] == env], env)
        for r in range(rounds):
            res = evolve(bank, episodes[r::rounds], [], client, cfg, step=r)
            calls, quarantine = res.record["calls"], res.record["quarantine"]
            out["requests"] += len(calls)
            out["answered"] += sum(c["ok"] for c in calls)
            out["quarantined"].update(q["reason"] for q in quarantine)
            out["raw_missing"] += sum(not q["raw"] for q in quarantine if q["reason"] not in TRANSPORT_REASONS)
            bank = res.bank
    out["rows_lost"] = out["requests"] - out["answered"] - sum(out["quarantined"].values())
    out["quarantined"] = dict(sorted(out["quarantined"].items()))
    stats = client.stats_snapshot()
    out.update(calls=stats["calls"], retries=stats["retries"], repairs=stats["repairs"])
    return out

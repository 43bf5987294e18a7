"""Which parsed trajectories the ``parse`` stage keeps: per-instance selection, caps and exact
duplicates (pure functions over :class:`~pipeline.core.records.Trajectory`; the stage streams them).

Selection (with D-P5 and D-P6 fixed), per (env, env_instance) and outcome:

* successes: the ``max_per_instance`` shortest (fewest actions), ties by source file name, then
  source URI, then record index (the reference broke ties by filesystem order);
* failures: the first ``max_per_instance`` by source file name, then URI, then record index;
* mixed-outcome instances keep both outcomes (the reference dropped them: D-P5);
* optional caps on instances with a success / failure-only instances, counted **per env** (the
  reference ran one env at a time: 70 success / 30 failure envs each), and a global cap on
  trajectories, all counted in the stage's deterministic stream order (:mod:`pipeline.stages.parse`);
* per-env overrides of ``max_per_instance`` / ``max_success_instances`` /
  ``max_failure_instances``: ``parse.per_env`` (e.g. ``{"search": {"max_per_instance": 1}}``).

Everything not selected is quarantined with reason ``not_selected`` and the full trajectory row
as JSON in ``raw``, so nothing disappears silently.

Exact duplicates (not in the reference): a trajectory whose content (:func:`content_digest`:
env, task, outcome, reward and every step's action, observation and reward; not its source) equals
an earlier one's, e.g. the same log copied into two files or folders, is quarantined as
``duplicate_trajectory`` naming the kept trajectory; the first in path order is kept. The parse
stage applies this within each folder and across folders.

Sharded runs: the per-instance ranking (:func:`rank_instances`) works on one folder, so each shard
applies it alone; duplicates across folders and :class:`GlobalCaps` count in stream order, so
parse replays them over all shards in shard order, which is path order (``parse.CrossGroup``
in :mod:`pipeline.stages.parse`), and the rows kept equal a one-shard run's.
"""
from __future__ import annotations

import hashlib
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from pipeline.core.config import ParseConfig
from pipeline.core.records import Trajectory


def _file_key(t: Trajectory) -> tuple:
    return (os.path.basename(t.source_uri), t.source_uri, t.record_index)


def caps(cfg: ParseConfig, env: str) -> dict[str, int]:
    """The caps for ``env``: the config values, overridden by ``per_env[env]``."""
    per_env = cfg.per_env or {}
    base = {k: getattr(cfg, k) for k in ("max_per_instance", "max_success_instances", "max_failure_instances")}
    return {**base, **(per_env.get(env) or {})}


def rank_instances(trajs: list[Trajectory], cfg: ParseConfig
                   ) -> tuple[list[tuple[tuple[str, str], bool, list[Trajectory]]], dict[str, str]]:
    """Per-instance selection of one group.

    Returns ``([(instance key, has_success, ranked trajectories)], {trajectory_id: why dropped})``
    with instances in (env, instance) order and each instance's trajectories as successes
    (shortest first) then failures (by file), both already cut to ``max_per_instance``.
    """
    groups: dict[tuple[str, str], dict[str, list[Trajectory]]] = defaultdict(lambda: {"success": [], "failure": []})
    for t in trajs:
        groups[(t.env, t.env_instance)]["success" if t.success else "failure"].append(t)
    dropped: dict[str, str] = {}
    out = []
    for key in sorted(groups):
        limit = caps(cfg, key[0])["max_per_instance"]
        succ = sorted(groups[key]["success"], key=lambda t: (len(t.steps) - 1, *_file_key(t)))
        fail = sorted(groups[key]["failure"], key=_file_key)
        ranked = []
        for outcome, items in (("success", succ), ("failure", fail)):
            for rank, t in enumerate(items):
                if limit and rank >= limit:
                    dropped[t.trajectory_id] = f"{outcome} #{rank + 1} of instance {key[1]!r}: max_per_instance={limit}"
                else:
                    ranked.append(t)
        out.append((key, bool(succ), ranked))
    return out, dropped


@dataclass
class GlobalCaps:
    """Instance caps (per env) and the global trajectory cap, applied in stream order."""
    cfg: ParseConfig
    success_instances: Counter = field(default_factory=Counter)
    failure_instances: Counter = field(default_factory=Counter)
    kept: int = 0

    def admit(self, key: tuple[str, str], has_success: bool, n: int) -> list[str | None]:
        """For an instance with ``n`` ranked trajectories: ``None`` (kept) or the drop reason each."""
        c = caps(self.cfg, key[0])
        rule = "max_success_instances" if has_success else "max_failure_instances"
        counter = self.success_instances if has_success else self.failure_instances
        counter[key[0]] += 1
        if c[rule] and counter[key[0]] > c[rule]:
            return [f"{rule}={c[rule]} instances of env {key[0]!r} reached"] * n
        out: list[str | None] = []
        for _ in range(n):
            if self.cfg.max_trajectories and self.kept >= self.cfg.max_trajectories:
                out.append(f"max_trajectories={self.cfg.max_trajectories} reached")
            else:
                self.kept += 1
                out.append(None)
        return out


def select(trajs: list[Trajectory], cfg: ParseConfig) -> tuple[list[Trajectory], dict[str, str]]:
    """Select among ``trajs`` as one group: ``(kept in input order, {trajectory_id: why not})``."""
    ranked, dropped = rank_instances(trajs, cfg)
    gcaps = GlobalCaps(cfg)
    for key, has_success, items in ranked:
        for t, why in zip(items, gcaps.admit(key, has_success, len(items))):
            if why:
                dropped[t.trajectory_id] = why
    return [t for t in trajs if t.trajectory_id not in dropped], dropped


def content_digest(t: Trajectory) -> bytes:
    """16-byte BLAKE2b of what ``t`` records: env, task, outcome, reward and each step's action,
    observation and reward (not its source file, record index or line), so byte-identical copies
    of one record in two files get the same digest."""
    # one update of the joined reprs: the same digest as one update per step, fewer calls
    parts = [repr((t.env, t.task, t.outcome, t.reward))]
    parts += [repr((st.action, st.observation, st.reward)) for st in t.steps]
    return hashlib.blake2b("".join(parts).encode(), digest_size=16).digest()

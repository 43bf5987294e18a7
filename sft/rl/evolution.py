"""Skill-bank evolution from validation failures: the RL side of :mod:`pipeline.bank.evolving`.

After each validation, every *category* whose success rate is below ``update_threshold`` gets
new task-specific skills written by the LLM skill updater from that category's failed episodes
(at most ``max_failures``, each with its last ``failure_steps`` steps). This module decides which
categories are low and which failures are shown; the bank module builds the request, checks
the answer and applies it. Differences from the reference implementation:

* only per-category rates trigger an update, never the overall rate, and failures are filtered
  to the low category (the reference used any rate and all failures, labelled by a classifier);
* the answer goes through ``pipeline.llm``'s client contract: JSON Schema
  (``schemas/skills.schema.json``, ``maxItems`` narrowed to ``max_new_skills``) plus a check that
  rejects an answer with no new, sound skill, with bounded repair (a skill that repeats a bank
  title or breaks a content rule is dropped alone, with its reason); a failed call changes nothing and is
  recorded: ``record["quarantine"]`` holds one ``records.QuarantineRow`` (as a dict, with the raw
  answer) per failed call, written to ``grpo_log.jsonl`` with the validation entry (no
  bracket-span parsing, no silent drop); the next validation asks again while the category stays low;
* every update is a NEW bank version whose history entry names its parent, the step, the skills
  added/evicted and the trajectory ids of the failures it came from; evolved skills are capped
  per category (``max_dynamic_skills``) and never push static skills out;
* ``updates_from_validation=False`` (default) measures rates on validation tasks but takes the
  failures shown to the updater from training episodes, so validation tasks stay out of the bank.

The bank is saved in every checkpoint and reloaded on resume (the reference lost evolved
skills on resume).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from pipeline.bank.evolving import PROMPT_SHA, SkillBank, apply_updates, update_request
from pipeline.stage.llmstage import Job, send
from pipeline.llm.types import JSONRequest
from sft.rl.rollout import Episode

__all__ = ["EvolutionResult", "category_rates", "failure_digest", "build_request", "evolve",
           "PROMPT_SHA"]


@dataclass
class EvolutionResult:
    """What one evolution round did; ``bank`` is a new object (the old one is not modified)."""
    bank: SkillBank
    rates: dict[str, dict[str, float]]
    low_categories: list[str]
    changed: bool
    record: dict[str, Any]


def category_rates(episodes: list[Episode]) -> dict[str, dict[str, float]]:
    """``{category: {"episodes", "wins", "success_rate"}}`` (categories sorted)."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in episodes:
        acc[e.trajectory.category][0] += 1
        acc[e.trajectory.category][1] += int(e.won)
    return {c: {"episodes": n, "wins": w, "success_rate": w / n} for c, (n, w) in sorted(acc.items())}


def failure_digest(ep: Episode, n_steps: int, obs_chars: int) -> str:
    """The task and the last ``n_steps`` (action -> observation cut to ``obs_chars``) of one episode."""
    t = ep.trajectory
    lines = [f"- Task: {t.task}"]
    for s in t.steps[1:][-n_steps:]:
        lines.append(f"  {s.index}. {s.action} -> {' '.join(s.observation.split())[:obs_chars]}")
    return "\n".join(lines)


def build_request(bank: SkillBank, category: str, rate: float, failures: list[Episode], cfg) -> JSONRequest:
    """The updater request for one low category (:func:`pipeline.bank.evolving.update_request`)
    showing ``failures`` as :func:`failure_digest` texts; ``cfg`` is a ``GRPOConfig``."""
    digest = "\n".join(failure_digest(e, cfg.failure_steps, cfg.failure_obs_chars) for e in failures)
    return update_request(bank, category, rate, cfg.update_threshold, digest, cfg.max_new_skills)


def bank_diff(old: SkillBank, new: SkillBank) -> list[str]:
    """The change from ``old`` to ``new`` as lines a reader can check: ``+ [category] Title:
    principle`` for each skill added, ``- ...`` for each one evicted."""
    before = {r["skill_id"]: r for r in old.rows}
    after = {r["skill_id"]: r for r in new.rows}

    def line(sign: str, r: dict) -> str:
        return f"{sign} [{r.get('category') or r.get('kind')}] {r.get('title') or r.get('description')}: " \
               f"{r.get('principle') or r.get('how_to_avoid') or ''}"
    return [line("+", r) for k, r in after.items() if k not in before] + \
        [line("-", r) for k, r in before.items() if k not in after]


def evolve(bank: SkillBank, val_episodes: list[Episode], train_episodes: list[Episode], client, cfg,
           step: int, gate=None) -> EvolutionResult:
    """One evolution round (module docstring). ``client`` follows ``pipeline.llm.types``'s contract
    (``complete_json_many``, ``model_id``); it is not called when no category is low or a low
    category has no failed episode. ``cfg`` is a :class:`sft.rl.config.GRPOConfig`; ``gate`` the
    usefulness gate of new skills (:func:`pipeline.usefulness.gate.evolution_gate`, ``None`` = none)."""
    rates = category_rates(val_episodes)
    low = [c for c, r in rates.items() if r["success_rate"] < cfg.update_threshold]
    pool = val_episodes if cfg.updates_from_validation else train_episodes
    jobs, sources = [], {}
    for c in low:
        failed = [e for e in pool if e.trajectory.category == c and not e.won][:cfg.max_failures]
        if failed:
            jobs.append(Job(c, c, [build_request(bank, c, rates[c]["success_rate"], failed, cfg)]))
            sources[c] = [e.trajectory.trajectory_id for e in failed]
    send(client, jobs, "skill_update")  # one batch, as an LLM stage sends its requests
    model = client.model_id if jobs else ""
    up = apply_updates(bank, [r for j in jobs for r in j.results], sources, model, cfg.max_new_skills,
                       cfg.max_dynamic_skills, step, gate=gate)
    record = {"step": step, "version": up.bank.version, "parent_version": bank.version, "rates": rates,
              "low_categories": low, "added": up.added, "evicted": up.evicted, "diff": bank_diff(bank, up.bank),
              "failure_trajectory_ids": sources,
              "calls": up.calls, "quarantine": up.quarantine, "model": model, "prompt_sha": PROMPT_SHA}
    if up.changed:
        up.bank.history.append({k: record[k] for k in ("step", "version", "parent_version", "added", "evicted",
                                                        "failure_trajectory_ids", "model", "prompt_sha")})
    return EvolutionResult(up.bank, rates, low, up.changed, record)

"""Skill-bank evolution from validation failures: a versioned bank with lineage (spec §12.3).

After each validation, every *category* whose success rate is below ``update_threshold`` gets
new task-specific skills written by the LLM skill updater from that category's failed episodes
(at most ``max_failures``, each with its last ``failure_steps`` steps). Fixes of the reference
(spec D-R2, D-R3, D-R4):

* only per-category rates trigger an update, never the overall rate, and failures are filtered
  to the low category (the reference used any rate and all failures, labelled by classifier T);
* the answer goes through ``pipeline.llm``'s client contract: JSON Schema
  (``schemas/skills.schema.json``, ``maxItems`` narrowed to ``max_new_skills``) plus a check that
  rejects titles already in the bank, with bounded repair; a failed call changes nothing and is
  recorded: ``record["quarantine"]`` holds one ``records.QuarantineRow`` (as a dict, with the raw
  answer) per failed call, written to ``grpo_log.jsonl`` with the validation entry (no
  bracket-span parsing, no silent drop); the next validation asks again while the category stays low;
* every update is a NEW bank version (content hash) whose history entry names its parent, the
  step, the skills added/evicted and the trajectory ids of the failures it came from; each new
  skill row carries those ids in ``source_trajectory_ids``;
* evolved skills are capped per category (``max_dynamic_skills``, oldest evicted first) and
  ranked in one list with the static ones: static skills keep their bank order and come first,
  evolved skills follow in the order they were added - they never push static skills out;
* ``updates_from_validation=False`` (default) measures rates on validation tasks but takes the
  failures shown to the updater from training episodes, so validation tasks stay out of the bank.

The bank is persisted as SkillRL JSON (``pipeline.bank.rows``) with ``metadata.dynamic_skills``
and ``metadata.history``, saved in every checkpoint and reloaded on resume (the reference lost
evolved skills on resume).
"""
from __future__ import annotations

import copy
import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from pipeline.core import lineage
from pipeline.core.fsutil import atomic_write_json

from pipeline.bank import rows as skillbank
from pipeline.llm.types import JSONRequest
from pipeline.core.records import QuarantineRow
from sft.rl.rollout import Episode

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "schemas", "skills.schema.json")

SYSTEM = ("You improve the skill library of an agent that plays text-based games. You read episodes the agent "
          "failed and write short, general, reusable skills that would have prevented those failures. "
          "Answer with a JSON array only.")
USER = """Environment: {env}. Task category: {category}.
The agent's success rate in this category is {rate:.0%} (below the target {threshold:.0%}).

Failed episodes (task, then the last steps as action -> observation):
{failures}

Skill titles already in the library (do not repeat them):
{titles}

Write 1 to {max_new} NEW skills for the category "{category}". Each skill is an object with
"title" (3-5 words, Title Case), "principle" (1-2 sentences: what to do and why) and
"when_to_apply" (1 sentence). Reply with a JSON array of these objects only."""
PROMPT_SHA = lineage.content_hash(SYSTEM, USER, n=64)


@dataclass
class SkillBank:
    """Skill rows (``records.SKILL_SCHEMA``, bank order) + evolved skill ids (oldest first) + history."""
    rows: list[dict[str, Any]]
    env: str = "textworld"
    dynamic: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def version(self) -> str:
        return skillbank.bank_version(self.rows)

    def to_json(self) -> dict[str, Any]:
        """SkillRL bank JSON with our metadata (loads unchanged in SkillRL; extra keys ignored)."""
        return skillbank.to_skillrl_json(self.rows, metadata={"env": self.env, "dynamic_skills": list(self.dynamic),
                                                              "history": self.history})

    def save(self, path: str) -> str:
        """Write :meth:`to_json` to ``path`` atomically; returns ``path``."""
        return atomic_write_json(path, self.to_json())

    @classmethod
    def from_json(cls, data: dict[str, Any], env: str, source_env: str = "") -> "SkillBank":
        """Bank of ``env`` from SkillRL JSON; ``source_env`` accepts a bank whose metadata names
        another env (``ValueError`` from ``skillbank.from_skillrl_json`` otherwise)."""
        rows = skillbank.from_skillrl_json(data, source_env or env)
        for r in rows:  # an explicitly reused bank of another env becomes this env's bank (else
            r["env"] = env  # prompts.select_skills would hide its rows from this env's prompts)
        meta = data.get("metadata") or {}
        return cls(rows, env, list(meta.get("dynamic_skills") or []), list(meta.get("history") or []))

    @classmethod
    def load(cls, path: str, env: str, source_env: str = "") -> "SkillBank":
        """Read a SkillRL bank file; ``""`` gives an empty bank. Raises ``ValueError`` for a non-bank."""
        if not path:
            return cls([], env)
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        bank = cls.from_json(data, env, source_env)
        if not bank.history:  # first use of an offline bank: record where it came from (lineage)
            meta = data.get("metadata") or {}
            bank.history.append({"event": "import", "file": os.path.abspath(path), "source_env": meta.get("env", ""),
                                 "source_bank_version": meta.get("bank_version", ""),
                                 "run_bank_version": meta.get("run_bank_version", ""), "version": bank.version})
        return bank


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


def _schema(max_new: int) -> dict[str, Any]:
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        schema = json.load(f)
    schema["maxItems"] = max(1, min(max_new, schema.get("maxItems", max_new)))
    return schema


def build_request(bank: SkillBank, category: str, rate: float, failures: list[Episode], cfg) -> JSONRequest:
    """The updater request for one low category (wording ours; SYSTEM/USER above)."""
    titles = sorted({(r.get("title") or r.get("description") or "").strip() for r in bank.rows} - {""})
    existing = {t.lower() for t in titles}

    def check(value: list[dict]) -> str | None:
        seen = set()
        for s in value:
            key = s["title"].strip().lower()
            if key in existing or key in seen:
                return f"the title {s['title']!r} already exists: write a different skill"
            seen.add(key)
        return None

    user = USER.format(env=bank.env, category=category, rate=rate, threshold=cfg.update_threshold,
                       failures="\n".join(failure_digest(e, cfg.failure_steps, cfg.failure_obs_chars) for e in failures),
                       titles="\n".join(f"- {t}" for t in titles) or "(none)", max_new=cfg.max_new_skills)
    return JSONRequest(key=category, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
                       schema=_schema(cfg.max_new_skills), schema_name="skills", check=check)


def _insert(bank: SkillBank, category: str, new_rows: list[dict], cap: int) -> tuple[list[dict], list[str], list[str]]:
    """Rows with ``new_rows`` added to ``category``: static skills first (bank order), then the
    evolved ones in the order they were added, at most ``cap`` of them (oldest evicted first).
    Returns ``(rows, dynamic ids oldest first, evicted ids)``."""
    by_id = {r["skill_id"]: r for r in bank.rows + new_rows}
    dyn = list(bank.dynamic) + [r["skill_id"] for r in new_rows]
    in_cat = [d for d in dyn if by_id[d].get("kind") == "task_specific" and by_id[d].get("category") == category]
    evicted = in_cat[:max(0, len(in_cat) - cap)]
    kept = [d for d in in_cat if d not in evicted]
    rows = [r for r in bank.rows if r["skill_id"] not in in_cat]
    # evolved skills go right after the category's last static skill (or before the mistakes)
    last = max((i for i, r in enumerate(rows) if r.get("kind") == "task_specific" and r.get("category") == category),
               default=None)
    if last is None:
        last = max((i for i, r in enumerate(rows) if r.get("kind") != "mistake"), default=-1)
    rows[last + 1:last + 1] = [by_id[d] for d in kept]
    return rows, [d for d in dyn if d not in evicted], evicted


def evolve(bank: SkillBank, val_episodes: list[Episode], train_episodes: list[Episode], client, cfg,
           step: int) -> EvolutionResult:
    """One evolution round (module docstring). ``client`` follows ``pipeline.llm.types``'s contract
    (``complete_json_many``, ``model_id``); it is not called when no category is low or a low
    category has no failed episode. ``cfg`` is a :class:`sft.rl.config.GRPOConfig`."""
    rates = category_rates(val_episodes)
    low = [c for c, r in rates.items() if r["success_rate"] < cfg.update_threshold]
    pool = val_episodes if cfg.updates_from_validation else train_episodes
    requests, sources = [], {}
    for c in low:
        failed = [e for e in pool if e.trajectory.category == c and not e.won][:cfg.max_failures]
        if failed:
            requests.append(build_request(bank, c, rates[c]["success_rate"], failed, cfg))
            sources[c] = [e.trajectory.trajectory_id for e in failed]
    results = client.complete_json_many(requests, desc="skill_update") if requests else []
    new = SkillBank(copy.deepcopy(bank.rows), bank.env, list(bank.dynamic), list(bank.history))
    added, evicted, calls, quarantine = [], [], [], []
    for res in results:
        c = res.key
        calls.append({"category": c, "ok": res.ok, "error": res.error, "detail": res.detail[:300]})
        if not res.ok:  # the bank is unchanged for c; the raw answer is kept (issue 14, hole 3)
            quarantine.append(QuarantineRow("skill_evolution", res.error or "llm_failed",
                                            f"skill update for category {c} at step {step} failed: {res.detail}",
                                            c, raw=res.raw).__dict__)
            continue
        rows = [skillbank.make_row("task_specific", c, s, (), sources[c], model=client.model_id, prompt_sha=PROMPT_SHA,
                                   env=bank.env)
                for s in res.value[:cfg.max_new_skills]]
        rows = [r for r in rows if r["skill_id"] not in {x["skill_id"] for x in new.rows}]
        new.rows, new.dynamic, out = _insert(new, c, rows, cfg.max_dynamic_skills)
        added += [r["skill_id"] for r in rows if r["skill_id"] not in out]
        evicted += out
    version = new.version
    for r in new.rows:
        r["bank_version"] = version
    changed = version != bank.version
    record = {"step": step, "version": version, "parent_version": bank.version, "rates": rates, "low_categories": low,
              "added": added, "evicted": evicted, "failure_trajectory_ids": sources, "calls": calls,
              "quarantine": quarantine,
              "model": client.model_id if requests else "", "prompt_sha": PROMPT_SHA}
    if changed:
        new.history.append({k: record[k] for k in ("step", "version", "parent_version", "added", "evicted",
                                                   "failure_trajectory_ids", "model", "prompt_sha")})
    return EvolutionResult(new if changed else bank, rates, low, changed, record)

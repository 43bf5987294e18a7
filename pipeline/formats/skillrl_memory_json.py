"""Readers for SkillRL's JSON artifacts: generated memories and skill banks.

**Memories** (``generated_memories*.json``: a list of ``{memory_id, contextual_description, tags,
content: {task_meta, refined_trajectory, strategic_guidelines}, origin_env_id}``) are LLM
summaries, not raw rollouts. Our decision: a memory with refined steps (every success) becomes
one :class:`Trajectory` so its knowledge is not lost, marked ``"abstracted": true`` in metadata:

* steps: a reset step (its observation is the ``critical_observation`` of a ``step_index -1``
  / ``start_episode`` entry when present, else empty), then one step per refined entry with
  ``action``, ``observation = critical_observation`` and ``thought = reasoning``; the last step
  is ``done`` with the env's win reward (the memory tag says Success);
* both nestings are accepted: ``refined_trajectory`` as a flat list (Search) or as
  ``{"refined_trajectory": [...]}`` (ALFWorld, WebShop), and ``strategic_guidelines`` flat
  (ALFWorld) or as ``{"strategic_guidelines": {...}}`` (Search, WebShop) (D-M4);
* metadata carries the memory: ``memory_id``, ``origin_env_id``, ``contextual_description``,
  ``planning_pattern``, ``mistakes_to_avoid``, ``data_source``, original ``step_indices``.

A memory without refined steps (every failure: ``refined_trajectory`` is null) has no actions, so
it is quarantined ``memory_without_steps`` with the whole record as ``raw`` (its
``mistakes_to_avoid`` stay visible there) instead of becoming an empty trajectory.
Actions are abstracted templates (``click[[Size_Constraint]]``, ``go to desk``); validation
flags or rejects them like any other action without an admissible list.

**Skill banks** (``claude_style_skills*.json``: an object with ``general_skills`` ...) are not
trajectories: each file becomes one ``skill_bank_not_trajectories`` quarantine row telling the
user to pass it as a bank.
"""
from __future__ import annotations

import functools
import json
from typing import Any, Iterator

from pipeline.core.records import QuarantineRow, Step, Trajectory
from pipeline.formats.common import Source, bad, read_json_members, reader_trajectory

FORMAT = "skillrl_memory_json"
BANK_FORMAT = "skillrl_bank_json"
ENV_NAMES = {"alfworld": "alfworld", "webshop": "webshop", "searchagent": "search", "search": "search"}
WIN_REWARD = {"alfworld": 10.0, "webshop": 10.0, "search": 1.0}
BANK_KEYS = ("general_skills", "task_specific_skills", "query_type_skills", "common_mistakes")


class RecordError(ValueError):
    """A malformed memory record; the reader turns it into that record's ``bad_record``
    quarantine row and reads on (:class:`NoSteps`: ``memory_without_steps``)."""


class NoSteps(RecordError):
    """A well-formed memory without refined steps (SkillRL failures)."""


def _unwrap(value: Any, key: str) -> Any:
    """``{key: X}`` -> ``X`` (the official prompts' wrapped shape, D-M4); anything else unchanged."""
    if isinstance(value, dict) and set(value) == {key}:
        return value[key]
    return value


def memory_fields(rec: Any) -> dict[str, Any]:
    """The normalised fields of one memory record; raises :class:`RecordError` if it is not one."""
    if not isinstance(rec, dict) or not isinstance(rec.get("content"), dict):
        raise RecordError("record is not a SkillRL memory (no 'content' object)")
    tags = rec.get("tags") if isinstance(rec.get("tags"), dict) else {}
    content = rec["content"]
    meta = content.get("task_meta") if isinstance(content.get("task_meta"), dict) else {}
    env = ENV_NAMES.get(str(tags.get("environment", "")).strip().lower())
    if env is None:
        raise RecordError(f"unknown tags.environment {tags.get('environment')!r}")
    outcome = str(tags.get("outcome", "")).strip().lower()
    if outcome not in ("success", "failure"):
        raise RecordError(f"tags.outcome is {tags.get('outcome')!r}, expected Success or Failure")
    refined = _unwrap(content.get("refined_trajectory"), "refined_trajectory")
    guide = _unwrap(content.get("strategic_guidelines"), "strategic_guidelines")
    guide = guide if isinstance(guide, dict) else {}
    return {"env": env, "outcome": outcome, "goal": str(meta.get("original_goal") or "").strip(),
            "data_source": tags.get("data_source") or meta.get("data_source"),
            "refined": refined if isinstance(refined, list) else [],
            "planning_pattern": guide.get("planning_pattern"),
            "mistakes_to_avoid": guide.get("mistakes_to_avoid") or [],
            "memory_id": rec.get("memory_id"), "origin_env_id": rec.get("origin_env_id"),
            "contextual_description": rec.get("contextual_description")}


def memory_trajectory(rec: Any, source_uri: str, index: int, line: int) -> Trajectory | QuarantineRow:
    """One memory with refined steps -> Trajectory (module docstring; a quarantine row only as
    ``common.reader_trajectory`` makes one); raises :class:`RecordError`."""
    f = memory_fields(rec)
    if not f["goal"]:
        raise RecordError("memory has no content.task_meta.original_goal")
    entries = [e for e in f["refined"] if isinstance(e, dict)]
    if not entries:
        why = "null: SkillRL keeps refined steps for successes only" if f["outcome"] == "failure" else "empty"
        raise NoSteps(f"{f['outcome']} memory has no refined steps (refined_trajectory is {why})")
    reset = Step(index=0, action=None, observation="", line=line)
    steps = [reset]
    for e in entries:
        action, obs = str(e.get("action") or "").strip(), str(e.get("critical_observation") or "").strip()
        thought = str(e.get("reasoning") or "").strip() or None
        if len(steps) == 1 and (e.get("step_index") == -1 or action == "start_episode"):
            reset.observation, reset.thought = obs, thought
            continue
        steps.append(Step(index=0, action=action, observation=obs, thought=thought, line=line))
    if len(steps) < 2:
        raise NoSteps("memory has no refined action after the start entry")
    won = f["outcome"] == "success"
    reward = WIN_REWARD[f["env"]] if won else 0.0
    steps[-1].done, steps[-1].reward = won, reward
    meta = {k: f[k] for k in ("memory_id", "origin_env_id", "contextual_description", "planning_pattern",
                              "mistakes_to_avoid", "data_source")}
    meta.update(abstracted=True, outcome_source="memory_tag",
                step_indices=[e.get("step_index") for e in entries])
    return reader_trajectory(
        env=f["env"], env_instance=str(f["origin_env_id"] or f["memory_id"] or index), task=f["goal"],
        outcome=f["outcome"], reward=reward, steps=steps, source_uri=source_uri, source_format=FORMAT,
        record_index=index, source_line=line, category_hint=f["data_source"], metadata=meta)


def read(src: Source) -> Iterator[Trajectory | QuarantineRow]:
    """Yield one trajectory per memory with refined steps; quarantine reasons:
    ``memory_without_steps`` (failures), ``bad_record``, ``invalid_json``."""
    yield from read_json_members(src, src.read_text(), functools.partial(_memory, src))


def _memory(src: Source, key: Any, rec: Any, index: int, start: int, line: int
            ) -> Iterator[Trajectory | QuarantineRow]:
    """The trajectory of memory number ``index`` (at ``line``), or why it has none."""
    raw = json.dumps(rec, ensure_ascii=False)
    try:
        yield memory_trajectory(rec, src.source_uri, index, line)
    except NoSteps as e:
        yield bad("memory_without_steps", f"{e}; the whole memory (planning_pattern, mistakes_to_avoid) "
                  "is kept in raw", src.path, line, raw,
                  item_id=str(rec.get("memory_id") or ""), limit=None)
    except RecordError as e:
        yield bad("bad_record", str(e), src.path, line, raw)


def read_bank(src: Source) -> Iterator[Trajectory | QuarantineRow]:
    """A skill bank is recognised and quarantined as a whole: one ``skill_bank_not_trajectories``
    row whose detail names its sections (``invalid_json`` if it does not decode)."""
    path, text = src.path, src.read_text()
    try:
        bank = json.loads(text)
    except json.JSONDecodeError as e:
        yield bad("invalid_json", f"skill bank does not decode: {e.msg}", path, e.lineno, text[:2000])
        return
    parts = []
    for key in BANK_KEYS:
        value = bank.get(key) if isinstance(bank, dict) else None
        if isinstance(value, list):
            parts.append(f"{key}: {len(value)}")
        elif isinstance(value, dict):
            parts.append(f"{key}: {len(value)} categories")
    yield bad("skill_bank_not_trajectories",
              f"SkillRL skill bank ({', '.join(parts)}), not trajectories: pass it as a skill bank "
              "(SkillRL JSON, see pipeline.bank.rows), not as parse input", path, 1, text[:2000])

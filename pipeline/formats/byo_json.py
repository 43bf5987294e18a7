"""Reader for the reference's "bring your own JSON": the output of its parse stage
or of its dedupe stage, which users may already hold.

ALFWorld/WebShop entries: ``{env_id, task, type: all_success|all_fail, trajectories: [[step, ...], ...]}``
with steps ``{step_id: "Step -1"|"Step 00"..., action, reward, done, observation, admissible_actions}``.
Search entries: ``{env_id, task, data_source, type, outcome, reward, trajectories: [[step, ...]]}``
with steps ``{step_id: int, action, memory_context, reward, done}``.

Each inner trajectory becomes one :class:`Trajectory` (record_index = entry index * 1000 +
trajectory index, so ids stay unique and stable). Fixes applied on the way in:

* D-P4: an init step (``Step -1``, action ``"None"``) becomes the reset step with action ``None``;
  Search steps have no init step, so an empty reset step is added.
* D-P3/D-P5: the outcome is decided **per trajectory** from its last step (``done`` and reward >=
  the env's win reward: 10 for ALFWorld/WebShop rollouts, ``success_threshold`` for Search);
  the entry's ``type`` is kept in metadata only (the reference labelled an env "all_fail" even
  when it contained a success).
* Search observations are recovered from the last step's ``memory_context`` lines
  ``Step i:<act> <information>...</information>`` (the reference kept evidence only there).
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterator

from pipeline import envs
from pipeline.core.records import QuarantineRow, Step, Trajectory
from pipeline.formats.common import Source, bad, read_json_members, reader_trajectory

FORMAT = "byo_json"
WIN_REWARD = 10.0  # ALFWorld/WebShop rollout reward of a won episode
_MEMORY_LINE = re.compile(r"Step (\d+):\s*(<(?:search|answer)>.*?</(?:search|answer)>)"
                          r"(?:\s*<information>(.*?)</information>)?", re.S)


class RecordError(ValueError):
    """A malformed trajectory of an entry (not a step list, a bad step or reward); the reader
    turns it into that trajectory's ``bad_record`` quarantine row and reads on."""


def _float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise RecordError(f"reward {v!r} is not a number") from None


def _steps_txt(raw: list, line: int) -> list[Step]:
    steps = []
    for k, s in enumerate(raw):
        if not isinstance(s, dict):
            raise RecordError(f"step {k} is a {type(s).__name__}, expected an object")
        action = s.get("action")
        is_init = k == 0 and (str(s.get("step_id", "")).strip() == "Step -1" or action in (None, "None"))
        adm = s.get("admissible_actions") or []
        steps.append(Step(index=0, action=None if is_init else str(action or ""),
                          observation=str(s.get("observation") or ""),
                          admissible_actions=[str(a) for a in adm] if isinstance(adm, list) else [],
                          reward=_float(s.get("reward", 0.0)), done=bool(s.get("done", False)), line=line))
    if not steps or steps[0].action is not None:
        steps.insert(0, Step(index=0, action=None, observation="", line=line))
    return steps


def _steps_search(raw: list, line: int) -> list[Step]:
    info = {}
    last_ctx = next((s.get("memory_context") for s in reversed(raw) if isinstance(s, dict)), "") or ""
    for m in _MEMORY_LINE.finditer(last_ctx):
        info[int(m[1])] = (m[3] or "").strip()
    steps = [Step(index=0, action=None, observation="", line=line)]
    for k, s in enumerate(raw):
        if not isinstance(s, dict):
            raise RecordError(f"step {k} is a {type(s).__name__}, expected an object")
        sid = s.get("step_id", k)
        steps.append(Step(index=0, action=str(s.get("action") or ""),
                          observation=info.get(sid, "") if isinstance(sid, int) else "",
                          reward=_float(s.get("reward", 0.0)), done=bool(s.get("done", False)), line=line))
    return steps


def entry_trajectories(entry: Any, src: Source, index: int, line: int) -> Iterator[Trajectory | QuarantineRow]:
    """All trajectories of entry number ``index`` (at ``line``) of ``src``; a bad inner trajectory
    is one ``bad_record`` row."""
    path = src.path
    if not isinstance(entry, dict) or not isinstance(entry.get("trajectories"), list):
        yield bad("bad_record", "entry has no 'trajectories' list", path, line, json.dumps(entry, ensure_ascii=False))
        return
    is_search = "data_source" in entry or "outcome" in entry
    task = str(entry.get("task") or "")
    trajs = entry["trajectories"]
    if is_search and trajs and all(isinstance(s, dict) for s in trajs):
        trajs = [trajs]  # parse_search.py writes `trajectories: [steps]` (one trajectory)
    for j, raw in enumerate(trajs):
        try:
            if not isinstance(raw, list) or not raw:
                raise RecordError(f"trajectory {j} is not a non-empty list of steps")
            steps = _steps_search(raw, line) if is_search else _steps_txt(raw, line)
        except RecordError as e:
            yield bad("bad_record", f"trajectory {j}: {e}", path, line, json.dumps(raw, ensure_ascii=False))
            continue
        text = "\n".join(f"{s.action or ''}\n{s.observation}" for s in steps[:4])
        env = "search" if is_search else envs.detect_env(task + "\n" + text)
        env = "alfworld" if env == "other" else env
        last = steps[-1]
        win = src.success_threshold if is_search else WIN_REWARD
        outcome = "success" if last.done and last.reward >= win else "failure"
        source = entry.get("data_source") if is_search else None
        meta = {"env_id": entry.get("env_id"), "type": entry.get("type"), "trajectory_in_entry": j,
                "outcome_source": "last_step"}
        if is_search:
            meta.update(data_source=source, entry_outcome=entry.get("outcome"))
        yield reader_trajectory(
            env=env, env_instance=str(entry.get("env_id") or f"entry{index}"), task=task, outcome=outcome,
            reward=last.reward, steps=steps, source_uri=src.source_uri, source_format=FORMAT,
            record_index=index * 1000 + j, source_line=line, category_hint=source, metadata=meta)


def read(src: Source) -> Iterator[Trajectory | QuarantineRow]:
    """Yield every trajectory of every entry; ``bad_record`` / ``invalid_json`` rows for the rest."""
    yield from read_json_members(src, src.read_text(), lambda key, entry, index, start, line:
                                 entry_trajectories(entry, src, index, line), "entries")

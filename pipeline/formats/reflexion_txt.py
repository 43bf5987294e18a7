"""Reader for Reflexion few-shot logs: failed episodes, each closed by ``STATUS: <label>`` and a
``New plan:`` / ``Next plan:`` reflection paragraph (noahshinn/reflexion; see the data's SOURCE.md).

Two transcript styles occur, detected per episode: ALFWorld (``> action`` lines, parsed by
:mod:`.alfworld_transcript`) and WebShop (``Action:``/``Observation:``, :mod:`.webshop_transcript`).
The label gives the outcome (``FAIL`` -> failure); the reflection is kept in metadata ``plan``.
Empty actions (``> ``) are real steps with action ``""``; loops are kept (remove_loops removes them).
"""
from __future__ import annotations

import os
import re
from typing import Iterator

from pipeline import envs
from pipeline.core.records import QuarantineRow, Trajectory
from pipeline.formats.alfworld_transcript import parse_transcript
from pipeline.formats.common import Source, bad, reader_trajectory
from pipeline.formats.webshop_transcript import parse_episode

FORMAT = "reflexion_txt"
_STATUS = re.compile(r"^STATUS:\s*(\w+)\s*$")
_PLAN = re.compile(r"^(New plan|Next plan):\s*", re.I)
_OUTCOME = {"FAIL": "failure", "FAILED": "failure", "FAILURE": "failure",
            "SUCCESS": "success", "PASS": "success", "SUCCEEDED": "success"}


def _episodes(lines: list[str]):
    """Yield ``(body, status, status_line, plan)``; a tail without STATUS gives status ``None``."""
    body: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        no, text = i + 1, lines[i]
        m = _STATUS.match(text)
        if not m:
            if body or text.strip():
                body.append((no, text))
            i += 1
            continue
        i += 1
        while i < len(lines) and not lines[i].strip():
            i += 1
        plan: list[str] = []
        if i < len(lines) and _PLAN.match(lines[i]):
            while i < len(lines) and lines[i].strip():
                plan.append(lines[i])
                i += 1
        yield body, m[1], no, _PLAN.sub("", "\n".join(plan)).strip()
        body = []
    if any(t.strip() for _, t in body):
        yield body, None, None, ""


def read(src: Source) -> Iterator[Trajectory | QuarantineRow]:
    """Yield one trajectory per labelled episode.

    Quarantine reasons: ``no_status`` (text after the last ``STATUS:`` line), ``unknown_status``,
    ``bad_record`` (an episode with no action).
    """
    path, lines = src.path, src.read_text().split("\n")
    stem = os.path.splitext(os.path.basename(path))[0]
    for k, (body, status, status_line, plan) in enumerate(_episodes(lines)):
        start = body[0][0] if body else status_line
        raw = "\n".join(t for _, t in body)
        if status is None:
            yield bad("no_status", "episode text without a closing 'STATUS: <label>' line", path, start, raw)
            continue
        outcome = _OUTCOME.get(status.upper())
        if outcome is None:
            yield bad("unknown_status", f"unknown episode label STATUS: {status}", path, status_line, raw)
            continue
        env = envs.detect_env(raw, src.env_hint)
        meta = {"episode": k, "status": status, "plan": plan, "outcome_source": "status_label"}
        if env == "webshop":
            ep = parse_episode(body)
            task, steps, trailing = ep.task, ep.steps, ep.trailing_thought
            reward = ep.score if ep.score is not None else 0.0
        else:
            t = parse_transcript(body)
            task, steps, trailing = t.task, t.steps, t.trailing_thought
            reward = 10.0 if outcome == "success" else 0.0
            if outcome == "success":
                steps[-1].done, steps[-1].reward = True, reward
        if len(steps) < 2:
            yield bad("bad_record", "episode has no actions", path, start, raw)
            continue
        if trailing:
            meta["trailing_thought"] = trailing
        yield reader_trajectory(
            env=env, env_instance=f"{stem}/{k}", task=task, outcome=outcome, reward=reward, steps=steps,
            source_uri=src.source_uri, source_format=FORMAT, record_index=k, source_line=start, metadata=meta)

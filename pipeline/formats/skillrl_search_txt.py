"""Reader for SkillRL Search rollout dumps: one trajectory per ``.txt``.

A file holds the last prompt of an episode and its result::

    Your question: <q>
    History:
    Step 0:<search>q1</search> <information>docs</information>
    ...
    Now it's your turn ...
    Action N: <search>..</search> | <answer>..</answer>
    Reward: <r>

Normalised as: reset step (action ``None``, empty observation: the question is the task), one
step per history action with its ``<information>`` text as the observation, then the final
action (``done``, the episode reward). Where we deliberately differ from ``parse_search.py``:

* D-S1: the final action is **always** its own step, even when it repeats the previous action
  (the reference dropped it, losing the terminal step, its reward and done flag).
* D-S2: the reward is the **last** line that is exactly ``Reward: <signed float>`` (the reference
  took the first ``Reward:`` anywhere, including inside retrieved documents); success is
  ``reward >= parse.success_threshold`` (reference: ``== 1.0``).
* D-S3: ``data_source`` comes from a ``Data Source:`` line in the file, else a source name in
  the path, and only then from the reference's stem ranges
  (:data:`pipeline.envs.search.DATA_SOURCE_RANGES`); env_instance is ``<parent>_<stem>``
  without ``.txt``.
* A file with no question or no action is quarantined (``no_question`` / ``no_steps``) instead
  of being skipped silently or titled ``Unknown Task``.
"""
from __future__ import annotations

import os
import re
from typing import Iterator

from pipeline.envs import search as search_env
from pipeline.core.records import QuarantineRow, Step, Trajectory
from pipeline.formats.common import Source, bad, line_at, reader_trajectory

FORMAT = "skillrl_search_txt"
_QUESTION = re.compile(r"Your question:[ \t]*(.*)")
_REWARD = re.compile(r"^Rewards?:[ \t]*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)[ \t]*$", re.M)
_HISTORY = re.compile(r"History:[ \t]*\n(.*?)\nNow it's your turn", re.S)
_TURN = "Now it's your turn"
_ACT = r"<(?:search|answer)>.*?</(?:search|answer)>"
_HISTORY_STEP = re.compile(r"Step (\d+):\s*(" + _ACT + r")(?:\s*<information>(.*?)</information>)?", re.S)
_FINAL = re.compile(r"Action (\d+):\s*(" + _ACT + r")", re.S)
_SOURCE = re.compile(r"^\s*data[ _]?source:\s*([\w-]+)\s*$", re.M | re.I)


def data_source(text: str, path: str) -> tuple[str | None, str]:
    """``(data_source, how)``: from a ``Data Source:`` line, the path, or the stem ranges (D-S3)."""
    m = _SOURCE.search(text)
    if m:
        return m[1].lower(), "file"
    from_path = search_env.data_source_from_text(path)
    if from_path:
        return from_path, "path"
    from_stem = search_env.data_source_from_stem(os.path.splitext(os.path.basename(path))[0])
    return from_stem, ("stem_ranges" if from_stem else "none")


def read(src: Source) -> Iterator[Trajectory | QuarantineRow]:
    """Yield the one trajectory of a Search rollout file, or one quarantine row
    (``no_question``, ``no_steps``)."""
    path, text = src.path, src.read_text()
    q = _QUESTION.search(text)
    if not q or not q[1].strip():
        yield bad("no_question", "no 'Your question:' line", path, 1, text)
        return
    steps = [Step(index=0, action=None, observation="", line=line_at(text, q.start()))]
    hist = None
    for hist in _HISTORY.finditer(text):
        pass  # the reference uses the LAST History: block
    if hist:
        for m in _HISTORY_STEP.finditer(text, hist.start(1), hist.end(1)):
            steps.append(Step(index=0, action=m[2].strip(), observation=(m[3] or "").strip(),
                              line=line_at(text, m.start())))
    turn = text.rfind(_TURN)
    final = _FINAL.search(text, turn) if turn >= 0 else None
    fallback = False
    if final is None and len(steps) == 1:
        final, fallback = _FINAL.search(text), True  # reference fallback: first Action N: anywhere
    if final is None and len(steps) == 1:
        yield bad("no_steps", "no 'Step i:<search>' history and no 'Action N: <search|answer>' block", path, 1, text)
        return
    rewards = _REWARD.findall(text)
    reward = float(rewards[-1]) if rewards else 0.0  # D-S2: last anchored line
    if final is not None:  # D-S1: appended even when equal to the previous action
        steps.append(Step(index=0, action=final[2].strip(), observation="", line=line_at(text, final.start())))
    steps[-1].done, steps[-1].reward = True, reward
    source, how = data_source(text, path)
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    stem = os.path.splitext(os.path.basename(path))[0]
    meta = {"file": os.path.basename(path), "data_source": source, "data_source_from": how,
            "reward_line_found": bool(rewards), "final_action_fallback": fallback}
    yield reader_trajectory(
        env="search", env_instance=f"{parent}_{stem}", task=q[1].strip(),
        outcome="success" if reward >= src.success_threshold else "failure", reward=reward, steps=steps,
        source_uri=src.source_uri, source_format=FORMAT, record_index=0, source_line=1, category_hint=source,
        metadata=meta)

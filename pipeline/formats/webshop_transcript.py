"""Parser for WebShop ReAct transcripts: ``Action: <a>`` / ``Observation: <text>`` blocks.

Used by the ReAct WebShop log and the Reflexion WebShop examples. ``think[...]`` actions are
answered ``OK.`` by the environment and change nothing: they are stored as the ``thought`` of
the next real step, never as steps. ``Action: reset`` (ReAct log) is the reset step; without it
the lines before the first action are the reset observation. A ``click[Buy Now]`` ends the
episode (``done``); the score line ``Your score (min 0.0, max 1.0): r`` sets that step's reward.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.core.records import Step
from pipeline.formats.common import ThoughtBuffer

_ACTION = re.compile(r"^Action:\s?(.*)$")
_OBS = re.compile(r"^Observation:\s?(.*)$")
_THINK = re.compile(r"^think\[(.*?)\]?\s*$", re.S | re.I)
_SCORE = re.compile(r"Your score \(min 0\.0, max 1\.0\):\s*([-+]?\d+(?:\.\d+)?)")
_BUY = re.compile(r"^click\[\s*buy now\s*\]$", re.I)


@dataclass
class WebShopEpisode:
    """One parsed episode (:func:`parse_episode`): the goal (``""`` if none), the steps (step 0 the
    reset observation), and the ``think[...]`` text after the last real action, if any."""
    task: str
    steps: list[Step]
    score: float | None            # the purchase score, None when nothing was bought
    trailing_thought: str | None


def task_from_observation(observation: str) -> str:
    """The goal after a WebShop ``Instruction:`` line (same line or the next non-empty one), else ``""``."""
    lines = [ln.strip() for ln in observation.split("\n")]
    for i, ln in enumerate(lines):
        if ln.lower().startswith("instruction:"):
            rest = ln.split(":", 1)[1].strip()
            if rest:
                return rest
            return next((x for x in lines[i + 1:] if x), "")
    return ""


def _clean(lines: list[str]) -> str:
    # The notebook printed trailing spaces on every line; they carry no content.
    return "\n".join(ln.rstrip() for ln in lines).strip()


def parse_episode(lines: list[tuple[int, str]]) -> WebShopEpisode:
    """Parse ``(line_number, text)`` pairs of one episode (separators already removed). Never raises."""
    blocks: list[dict] = []  # {"action", "line", "obs": [...]} in order
    intro: list[str] = []
    intro_line = lines[0][0] if lines else None
    for no, text in lines:
        a = _ACTION.match(text)
        o = _OBS.match(text)
        if a:
            blocks.append({"action": a[1].strip(), "line": no, "obs": []})
        elif o and blocks and not blocks[-1]["obs"]:
            blocks[-1]["obs"].append(o[1])
        elif blocks:
            blocks[-1]["obs"].append(text)
        else:
            intro.append(text)
    if blocks and blocks[0]["action"].lower() == "reset":
        first = blocks.pop(0)
        intro, intro_line = first["obs"], first["line"]
    reset_obs = _clean(intro)
    steps = [Step(index=0, action=None, observation=reset_obs, line=intro_line)]
    thoughts = ThoughtBuffer()
    score = None
    for b in blocks:
        obs = _clean(b["obs"])
        think = _THINK.match(b["action"])
        if think:
            thoughts.add(think[1])
            continue
        step = Step(index=len(steps), action=b["action"], observation=obs, thought=thoughts.take(), line=b["line"])
        s = _SCORE.search(obs)
        if s:
            score = float(s[1])
            step.reward, step.done = score, True
        elif _BUY.match(b["action"]):
            step.done = True
        steps.append(step)
    return WebShopEpisode(task=task_from_observation(reset_obs), steps=steps, score=score, trailing_thought=thoughts.take())

"""Parser for ALFWorld text transcripts in the ReAct style (ReAct prompts, Reflexion logs).

Shape: the room description, ``Your task is to: <goal>``, then ``> <action>`` lines each followed
by the environment's answer. ``> think: ...`` lines (answered ``OK.``) are reasoning, not actions:
they change nothing in the environment, so they become the ``thought`` of the next real step and
never a step of their own. An empty ``> `` is a real (invalid) action ``""``; later validation
decides what to do with it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline.core.records import Step
from pipeline.formats.common import ThoughtBuffer

_TASK = re.compile(r"^\s*Your task is to:\s*(.*)$", re.I)
_THINK = re.compile(r"^think:\s*(.*)$", re.S | re.I)


@dataclass
class Transcript:
    """Result of :func:`parse_transcript`; ``steps[0]`` is the reset step (action ``None``)."""
    task: str
    steps: list[Step]
    trailing_thought: str | None = None
    extra_lines: list[str] = field(default_factory=list)


def parse_transcript(lines: list[tuple[int | None, str]]) -> Transcript:
    """Parse ``(line_number, text)`` pairs of one episode (terminators already removed).

    The initial observation is every line before the first ``>`` line except the task line.
    Observations are the lines up to the next ``>`` line, joined and trimmed. Never raises; an
    episode without actions yields just the reset step.
    """
    task, intro, first_line = "", [], None
    i = 0
    while i < len(lines) and not lines[i][1].startswith(">"):
        no, text = lines[i]
        first_line = first_line or no
        m = _TASK.match(text)
        if m and not task:
            task = m[1].strip()
        elif text.strip():
            intro.append(text.strip())
        i += 1
    steps = [Step(index=0, action=None, observation="\n".join(intro), line=first_line)]
    thoughts = ThoughtBuffer()
    while i < len(lines):
        no, text = lines[i]
        act = text[1:].strip()
        i += 1
        obs = []
        while i < len(lines) and not lines[i][1].startswith(">"):
            obs.append(lines[i][1])
            i += 1
        think = _THINK.match(act)
        if think:
            thoughts.add(think[1])
            continue
        steps.append(Step(index=len(steps), action=act, observation="\n".join(obs).strip(),
                          thought=thoughts.take(), line=no))
    return Transcript(task=task, steps=steps, trailing_thought=thoughts.take())

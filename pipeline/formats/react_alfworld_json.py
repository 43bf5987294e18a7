"""Reader for the ReAct ALFWorld prompt file (``alfworld_3prompts*.json``): an object mapping
``react_<type>_<k>`` / ``act_<type>_<k>`` to an expert transcript string.

Every entry is a hand-curated successful demonstration (ReAct repo; see the data's SOURCE.md):
outcome ``success``, the last step ``done`` with the ALFWorld win reward 10, metadata
``"outcome_source": "curated"``. The ``react_`` and ``act_`` variants of one key replay the same
game, so both get env_instance ``<type>_<k>`` and land on the same side of the train/val split.
Observations carry no admissible actions in this source (left empty).
"""
from __future__ import annotations

import functools
import re
from typing import Iterator

from pipeline.core.records import QuarantineRow, Trajectory
from pipeline.formats.alfworld_transcript import parse_transcript
from pipeline.formats.common import Source, bad, read_json_members, reader_trajectory

FORMAT = "react_alfworld_json"
WIN_REWARD = 10.0


def read(src: Source) -> Iterator[Trajectory | QuarantineRow]:
    """Yield one trajectory per transcript entry.

    Quarantine reasons: ``bad_record`` (value not a string, or no action), ``invalid_json`` (the
    file is cut or corrupt: entries before the damage are still read).
    """
    yield from read_json_members(src, src.read_text(), functools.partial(_entry, src), "entries")


def _entry(src: Source, key: str, value: object, index: int, start: int, line: int
           ) -> Iterator[Trajectory | QuarantineRow]:
    """The trajectory of entry ``key`` (number ``index``, at ``line``), or why it has none."""
    if not isinstance(value, str):
        yield bad("bad_record", f"entry {key!r} is a {type(value).__name__}, expected a transcript string",
                  src.path, line, str(value))
        return
    t = parse_transcript([(line, ln) for ln in value.split("\n")])
    if len(t.steps) < 2:
        yield bad("bad_record", f"entry {key!r} has no '> action' lines", src.path, line, value)
        return
    last = t.steps[-1]
    last.done, last.reward = True, WIN_REWARD
    m = re.match(r"(react|act)_(.+)$", str(key))
    meta = {"key": key, "variant": m[1] if m else "", "outcome_source": "curated"}
    if t.trailing_thought:
        meta["trailing_thought"] = t.trailing_thought
    yield reader_trajectory(
        env=src.env_hint or "alfworld", env_instance=m[2] if m else str(key), task=t.task,
        outcome="success", reward=WIN_REWARD, steps=t.steps, source_uri=src.source_uri,
        source_format=FORMAT, record_index=index, source_line=line, metadata=meta)

"""Reader for the ReAct WebShop episode log (``WebShop.ipynb`` output, see the data's SOURCE.md).

Each episode sits between a ``-----------------`` line followed by its index and a closing
``-------------`` line, and ends with a running-summary line ``<n> <avg> <success> <fail>``.
The reward is the graded purchase score (``Your score (min 0.0, max 1.0): r``), 0 when nothing
was bought; the outcome is ``success`` iff reward >= ``success_threshold`` (config
``parse.success_threshold``, default 1.0: only a perfect match counts). env_instance is the
WebShop session ``fixed_<index>``.
"""
from __future__ import annotations

import re
from typing import Iterator

from pipeline.core.records import QuarantineRow, Trajectory
from pipeline.formats.common import Source, bad, reader_trajectory
from pipeline.formats.webshop_transcript import parse_episode

FORMAT = "react_webshop_log"
_RULE = re.compile(r"^-{5,}\s*$")
_INDEX = re.compile(r"^(\d+)\s*$")
_SUMMARY = re.compile(r"^\d+ [-+\d.eE]+ [-+\d.eE]+ [-+\d.eE]+\s*$")


def _episodes(src: Source):
    """Stream the file as ``("episode", index, first_line, body, summary, closed)`` per episode and
    ``("stray", None, first_line, lines, None, False)`` per run of non-blank text outside any
    episode (an index line that does not parse, text between a closing rule and the next
    opening one), so nothing is dropped unseen. ``body``/``lines`` = [(line_no, text)]."""
    current, stray = None, []
    pending_rule = False
    with src.open() as f:
        for no, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if current is None:
                m = _INDEX.match(line)
                is_rule = bool(_RULE.match(line))
                if (pending_rule and m) or is_rule:
                    if stray:  # a rule or an episode start ends the stray text
                        yield "stray", None, stray[0][0], stray, None, False
                        stray = []
                    if m:
                        current = {"index": int(m[1]), "line": no, "body": [], "summary": None}
                elif stray or line.strip():
                    stray.append((no, line))
                pending_rule = is_rule
                continue
            if _RULE.match(line):
                yield "episode", current["index"], current["line"], current["body"], current["summary"], True
                current, pending_rule = None, True  # a closing rule may be followed by an opening one
                continue
            if _SUMMARY.match(line):
                current["summary"] = line.strip()
            else:
                current["body"].append((no, line))
    if current is not None:
        yield "episode", current["index"], current["line"], current["body"], current["summary"], False
    if stray:
        yield "stray", None, stray[0][0], stray, None, False


def read(src: Source) -> Iterator[Trajectory | QuarantineRow]:
    """Yield one trajectory per episode.

    Quarantine reasons: ``truncated_episode`` (file ends inside an episode with no summary
    line), ``bad_record`` (an episode with no action after reset; or non-blank text outside any
    episode, e.g. an episode whose index line is damaged: one row per run of such text, with its
    first line and the text, so a lost episode is counted instead of vanishing).
    """
    path = src.path
    record_index = 0  # counts episodes; stray text is not a record
    for kind, index, first, body, summary, closed in _episodes(src):
        raw = "\n".join(t for _, t in body)
        if kind == "stray":
            yield bad("bad_record", "text outside any episode (an episode starts with a '-----' rule "
                      "line followed by its index alone on a line)", path, first, raw.rstrip("\n"))
            continue
        record_index += 1
        if not closed and summary is None:
            yield bad("truncated_episode", f"episode {index} is cut off (no summary line, no closing rule)",
                      path, first, raw)
            continue
        ep = parse_episode(body)
        if len(ep.steps) < 2:
            yield bad("bad_record", f"episode {index} has no action after reset", path, first, raw)
            continue
        reward = ep.score if ep.score is not None else 0.0
        meta = {"episode": index, "session": f"fixed_{index}", "summary": summary,
                "purchased": ep.score is not None, "outcome_source": "score"}
        if ep.trailing_thought:
            meta["trailing_thought"] = ep.trailing_thought
        yield reader_trajectory(
            env=src.env_hint or "webshop", env_instance=f"fixed_{index}", task=ep.task,
            outcome="success" if reward >= src.success_threshold else "failure", reward=reward,
            steps=ep.steps, source_uri=src.source_uri, source_format=FORMAT, record_index=record_index - 1,
            source_line=first, metadata=meta)

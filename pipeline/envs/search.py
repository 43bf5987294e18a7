"""Search (multi-hop QA with a retrieval tool): question categories and prompt constants.

Category rule: the ``data_source`` of the question decides first, as in the
reference's aggregation classifier A (the distillation classifier D ignores it and never returns
``entity_attribute_lookup``); only when the source is unknown do we fall back to D's question-text
rules. Keywords are matched on word boundaries (the reference used substrings).
"""
from __future__ import annotations

import re

ENV = "search"

CATEGORIES = ("comparison", "multi_hop_reasoning", "entity_attribute_lookup", "direct_retrieval")

#: Multi-hop sources (classifier A): comparison or multi_hop_reasoning by the question text.
MULTI_HOP_SOURCES = frozenset({"hotpotqa", "2wikimultihopqa", "musique", "bamboogle"})
#: Single-hop sources: popqa is attribute lookup, the rest direct retrieval (classifier A).
KNOWN_SOURCES = MULTI_HOP_SOURCES | {"popqa", "nq", "triviaqa"}

HEADER = "You are an expert research agent answering questions with a search engine."
TURN_INSTRUCTION = (
    "Now it's your turn to take one action.\nFirst reason step-by-step inside <think> </think> tags.\n"
    "Then either search with <search> query </search> or answer with <answer> answer </answer>.")

_COMPARISON_A = re.compile(r"\b(?:both|are the|which of|same|common|more|less|older|younger|taller|shorter)\b")
_COMPARISON_D = re.compile(r"\b(?:both|are the|which of|same|common|more than|less than|older|younger|taller|shorter)\b")
_MULTI_HOP_D = re.compile(r" who is the | where was | when was the spouse| father of| mother of|directed by|starring ")


def data_source_from_text(text: str | None) -> str | None:
    """A known data source named in ``text`` (e.g. a file path ``.../hotpotqa.jsonl``), else ``None``."""
    low = (text or "").lower()
    # longest names first so "2wikimultihopqa" is not read as something shorter; a name must
    # stand alone (not inside a longer word: a user name "anqi" in a file path is not "nq")
    for name in sorted(KNOWN_SOURCES, key=len, reverse=True):
        if re.search(r"(?<![a-z0-9])" + name + r"(?![a-z0-9])", low):
            return name
    return None


def classify(task: str, hint: str | None = None) -> str:
    """Category of a question; ``hint`` is its ``data_source`` (nq, popqa, hotpotqa, ...).

    Returns one of :data:`CATEGORIES`. Never raises.
    """
    q = (task or "").lower()
    source = (hint or "").strip().lower()
    if source in MULTI_HOP_SOURCES:
        return "comparison" if _COMPARISON_A.search(q) else "multi_hop_reasoning"
    if source == "popqa":
        return "entity_attribute_lookup"
    if source in KNOWN_SOURCES:
        return "direct_retrieval"
    if _COMPARISON_D.search(q):
        return "comparison"
    if _MULTI_HOP_D.search(" " + q + " "):
        return "multi_hop_reasoning"
    return "direct_retrieval"


#: Reference fallback for the data source of a SkillRL Search rollout file named ``<int>.txt``
#: (inclusive ranges; 0-80 holds 81 ids, the others 80). Used only when neither the
#: file nor its path names a source (D-S3): a configured table, never the first choice.
DATA_SOURCE_RANGES: tuple[tuple[int, int, str], ...] = (
    (0, 80, "nq"), (81, 160, "popqa"), (161, 240, "2wikimultihopqa"), (241, 320, "triviaqa"),
    (321, 400, "hotpotqa"), (401, 480, "musique"))
#: Source of any other integer stem (reference behaviour).
DATA_SOURCE_DEFAULT = "bamboogle"


def data_source_from_stem(stem: str, ranges=DATA_SOURCE_RANGES, default: str = DATA_SOURCE_DEFAULT) -> str | None:
    """Reference range table: ``"0081"`` -> ``popqa``, ``"-3"`` -> ``bamboogle``;
    ``None`` for a non-integer stem (the reference returned ``"unknown"``)."""
    try:
        n = int(stem)
    except ValueError:
        return None
    for lo, hi, name in ranges:
        if lo <= n <= hi:
            return name
    return default


_REACT_QA = re.compile(r"^\s*(search|finish)\[(.*)\]\s*$", re.I | re.S)


def normalise_action(action: str) -> str:
    """Map a ReAct QA action onto SkillRL Search's tag form (our normalisation, documented so the
    SFT targets of every QA source share one action syntax):
    ``Search[x]`` -> ``<search>x</search>``, ``Finish[x]`` -> ``<answer>x</answer>``.
    Anything else (``Lookup[x]``, already-tagged actions) is returned unchanged; validation
    then judges its format."""
    m = _REACT_QA.match(action or "")
    if not m:
        return action
    tag = "search" if m[1].lower() == "search" else "answer"
    return f"<{tag}>{m[2].strip()}</{tag}>"

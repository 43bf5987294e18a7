"""Text rules that several stages must apply identically, written once.

Distill accepts an LLM answer with them, build_pairs keeps or quarantines a pair with them and the
rollout's format reward uses them; a copy per module had drifted (distill's CJK class missed the
CJK punctuation block U+3000-303F and its tag pattern missed ``<information>``, so distill
accepted thinks that build_pairs then quarantined).

* :data:`TAGS` - the tag names of SkillRL's agent protocol: ``<think>``, ``<action>`` (ALFWorld,
  WebShop), ``<search>``, ``<answer>``, ``<information>`` (search QA). Reference:
  ``examples/sft_data_generation`` prompts of SkillRL.
* :data:`TAG_PART` - one opening or closing protocol tag, any case, inner spaces and attributes
  allowed (``< /Think >``, ``<action x=1>``); groups: (``"/"`` or ``""``, tag name).
* :data:`CJK` - Chinese/Japanese/Korean script: CJK symbols and punctuation (U+3000-303F),
  kana (U+3040-30FF), CJK ideographs (U+3400-4DBF, U+4E00-9FFF, U+F900-FAFF), Hangul
  (U+AC00-D7AF) and full-width forms (U+FF00-FFEF). A think must be English: SkillRL's RL
  projection penalises CJK output.
* :data:`REASONING` - an action that only thinks (``think: ...`` in ALFWorld, ``think[...]`` in
  WebShop): remove_loops does not count it as an action and the verify checkers skip it.
"""
from __future__ import annotations

import re

TAGS = ("think", "action", "search", "answer", "information")
TAG_PART = re.compile(r"<\s*(/?)\s*(" + "|".join(TAGS) + r")\b[^>]*>", re.IGNORECASE)
REASONING = re.compile(r"^\s*think\s*(?::|\[)", re.I)
CJK = re.compile(r"[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


def has_tag(text: str) -> bool:
    """True when ``text`` contains any protocol tag of :data:`TAGS` (opening or closing)."""
    return TAG_PART.search(text) is not None


def has_cjk(text: str) -> bool:
    """True when ``text`` contains a character of the :data:`CJK` ranges."""
    return CJK.search(text) is not None


def is_reasoning(step) -> bool:
    """True for a thinking-only step (:data:`REASONING`): a
    :class:`~pipeline.core.records.Step` or its row dict."""
    action = step["action"] if isinstance(step, dict) else step.action
    return action is not None and bool(REASONING.match(action))

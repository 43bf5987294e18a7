"""Degenerate-text rules for any LLM-written field.

Seen in the export of the embedded 135M model: thinks ``1.25`` / ``3.75``; general skills
``**1**: 2 _Apply when: 3 },_`` and ``**4**: 5, 6 }]} ]{ 10, 11, 12``; one trajectory whose seven
steps alternate between two identical thinks. Rules (reasons of :data:`pipeline.quality.REASONS`):

* ``no_words``     - no word (a run of >= 2 letters, any script) or a letter share of the visible
  (non-space) characters under ``min_letter_share``;
* ``not_a_phrase`` - a title that is not a short phrase (:func:`is_phrase`);
* ``ngram_loop``   - one word n-gram repeated ``min_repeats`` times or more (:func:`ngram_loop`);
* ``reused_think`` - two different steps of one trajectory with the same think (:func:`reused`).
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

from pipeline.quality import Violation

_WORD = re.compile(r"[^\W\d_]{2,}")      # a run of >= 2 letters
_TOKEN = re.compile(r"[^\W_]+")           # letters/digits, for n-grams
_BRACKETS = re.compile(r"[{}\[\]<>|]")
_MARKUP = re.compile(r"[*_`#]+")          # markdown emphasis around a title is not content


def words(text: str) -> list[str]:
    """Runs of >= 2 letters in ``text`` (``"1.5-2.3"`` -> ``[]``, ``"go to desk 1"`` -> 3 words)."""
    return _WORD.findall(text or "")


def letter_share(text: str) -> float:
    """Letters / visible (non-whitespace) characters of ``text``; 0.0 for a blank text."""
    visible = [c for c in text or "" if not c.isspace()]
    return sum(c.isalpha() for c in visible) / len(visible) if visible else 0.0


def no_words(text: str, min_letter_share: float) -> bool:
    """True when ``text`` has no word, or under ``min_letter_share`` of its visible characters are
    letters (``"**1**: 2 _Apply when: 3 },_"``: 9 letters of 21 -> 0.43)."""
    return not words(text) or letter_share(text) < min_letter_share


def is_phrase(title: str, max_words: int) -> bool:
    """A short phrase: after dropping markdown emphasis, it starts with a letter, has 1 to
    ``max_words`` whitespace tokens, at least 2/3 of them contain a letter, and it has no
    bracket/brace/pipe character (``"Verify Before Acting"`` yes; ``"**1**"``, ``"2 }"`` no)."""
    text = _MARKUP.sub("", title or "").strip()
    tokens = text.split()
    if not tokens or not text[0].isalpha() or len(tokens) > max_words or _BRACKETS.search(text):
        return False
    return 3 * sum(any(c.isalpha() for c in t) for t in tokens) >= 2 * len(tokens)


def ngram_loop(text: str, n: int, min_repeats: int) -> str | None:
    """The most repeated word ``n``-gram of ``text`` (lower-cased letter/digit tokens) when it
    occurs at least ``min_repeats`` times, else None. ``n = 1`` is allowed; ``min_repeats < 2``
    disables the rule. (``"go to desk go to desk go to desk"`` -> ``"go to desk"`` at n=3, 3.)"""
    if min_repeats < 2:
        return None
    tokens = [t.lower() for t in _TOKEN.findall(text or "")]
    grams = Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    if not grams:
        return None
    gram, count = grams.most_common(1)[0]
    return " ".join(gram) if count >= min_repeats else None


def field_violations(name: str, text: str, cfg) -> list[Violation]:
    """``no_words`` and ``ngram_loop`` of one field ``name`` (e.g. ``"skills[2].principle"``);
    ``cfg`` is a :class:`pipeline.core.config.QualityConfig`. A blank field is left to the stage's own
    blank check (it is a form error, reported as such)."""
    if not (text or "").strip():
        return []
    out = []
    if no_words(text, cfg.min_letter_share):
        out.append(Violation("no_words", f"{name} is not text (numbers or symbols): {text[:60]!r}"))
    loop = ngram_loop(text, cfg.loop_ngram, cfg.loop_min_repeats)
    if loop is not None:
        out.append(Violation("ngram_loop", f"{name} repeats {loop!r} {cfg.loop_min_repeats}+ times; "
                                           "write it once"))
    return out


def title_violations(name: str, title: str, cfg) -> list[Violation]:
    """``not_a_phrase`` for a title field (after the :func:`field_violations` of the same text)."""
    if (title or "").strip() and not is_phrase(title, cfg.max_title_words):
        return [Violation("not_a_phrase", f"{name} {title[:60]!r} is not a short phrase of words "
                                          f"(<= {cfg.max_title_words} words, starting with a letter)")]
    return []


def _norm(text: str) -> str:
    return " ".join(_TOKEN.findall((text or "").lower()))


def reused(thinks: Iterable[tuple[int, str]]) -> list[Violation]:
    """``reused_think`` for each think equal (case, punctuation and spacing ignored) to the think
    of an earlier, different step index; ``thinks`` are ``(step_index, think)``."""
    first: dict[str, int] = {}
    out = []
    for i, text in thinks:
        key = _norm(text)
        if not key:
            continue
        if key in first and first[key] != i:
            out.append(Violation("reused_think", f"the think for step {i} repeats the think for step "
                                                 f"{first[key]}; explain each step on its own"))
        first.setdefault(key, i)
    return out

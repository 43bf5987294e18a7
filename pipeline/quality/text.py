"""Degenerate-text rules for any LLM-written field.

Seen in the export of the embedded 135M model: thinks ``1.25`` / ``3.75``; general skills
``**1**: 2 _Apply when: 3 },_`` and ``**4**: 5, 6 }]} ]{ 10, 11, 12``; one trajectory whose seven
steps alternate between two identical thinks. Rules (reasons of :data:`pipeline.quality.REASONS`):

* ``no_words``     - no word (a run of >= 2 letters, any script) or a letter share of the visible
  (non-space) characters under ``min_letter_share``;
* ``not_a_phrase`` - a title that is not a short phrase (:func:`is_phrase`);
* ``ngram_loop``   - one word n-gram repeated ``min_repeats`` times or more (:func:`ngram_loop`);
* ``reused_think`` - two different steps of one trajectory with the same think, or with thinks
  that share most of their words in one run (:func:`reused`): the 135M model numbers one
  boilerplate sentence ``1. The environment is TextWorld Express, ...``, ``2. The environment
  is ...`` or appends a different tail to it.
"""
from __future__ import annotations

import re
from collections import Counter
from difflib import SequenceMatcher
from typing import Iterable

from pipeline.quality.violation import Violation
from pipeline.quality.echo import STOP

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


_ENUMERATION = re.compile(r"^\W*(?:step\s*)?\d+\s*[.):\]-]\s*", re.IGNORECASE)  # "1. ", "(2) ", "Step 3:"

#: ``reused_think`` near-duplicates: two thinks of one trajectory share a run of at least this many
#: consecutive tokens, and the run covers :data:`REUSE_SHARE` of the later think. Measured on the
#: 30 recorded thoughts of the ReAct/ETO samples: the longest run two thoughts of one trajectory
#: share is 9 tokens (a WebShop product phrase quoted in both; 0.45 of the shorter), and none
#: fires; the 135M model's boilerplate thinks of the outcome run share 20 to 24 tokens (0.77-1.0).
REUSE_MIN_RUN = 6
#: See :data:`REUSE_MIN_RUN`: below this share of its own tokens a think may quote a phrase of an
#: earlier one and still say something new.
REUSE_SHARE = 0.6


def _tokens(text: str) -> list[str]:
    """Lower-cased letter/digit tokens of ``text`` after a leading enumeration (``"2. Go"`` ->
    ``["go"]``); digits stay, so "nothing in cabinet 1" and "nothing in cabinet 2" differ."""
    return _TOKEN.findall(_ENUMERATION.sub("", (text or "").strip()).lower())


def _longest_match(a: list[str], b: list[str]):
    """difflib's longest run of consecutive tokens common to ``a`` and ``b`` (``.a``, ``.b``, ``.size``)."""
    return SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b))


def shared_run(a: list[str], b: list[str]) -> int:
    """Length of the longest run of consecutive tokens common to ``a`` and ``b``."""
    return _longest_match(a, b).size


def _masked(tokens: list[str]) -> list[str]:
    """``tokens`` with every token that holds a digit replaced by ``#``."""
    return ["#" if any(c.isdigit() for c in t) else t for t in tokens]


def _about_other_objects(a: list[str], b: list[str]) -> bool:
    """True when thinks ``a`` and ``b`` say the same about other numbered objects: equal once
    numbers are masked and stop words dropped ("I need a pen ... drawer 1", then "I need the pen
    ... drawer 2"), with different numbers (the same numbers make it a repeat)."""
    def content(tokens: list[str]) -> list[str]:
        return [t for t in _masked(tokens) if t not in STOP]
    numbers = [[t for t in toks if any(c.isdigit() for c in t)] for toks in (a, b)]
    return numbers[0] != numbers[1] and content(a) == content(b)


def _repeats(a: list[str], b: list[str], task: frozenset[str] = frozenset()) -> bool:
    """True when think ``a`` repeats the earlier think ``b`` (see :func:`reused`); ``task``: the
    task's tokens."""
    if a == b:
        return True
    if _about_other_objects(a, b):  # the same sentence about other objects: "cabinet 2 ... cabinet 3"
        return False
    m = _longest_match(a, b)
    own = any(t not in STOP and t not in task for t in a[m.a:m.a + m.size])
    return own and m.size >= REUSE_MIN_RUN and m.size >= REUSE_SHARE * len(a)


def reused(thinks: Iterable[tuple[int, str]], task: str = "") -> list[Violation]:
    """``reused_think`` for each think that repeats the think of an earlier, different step index:
    equal tokens (case, punctuation, spacing and a leading enumeration ignored) or a shared run of
    >= :data:`REUSE_MIN_RUN` tokens covering >= :data:`REUSE_SHARE` of the later think's tokens
    and holding a word that is neither a stop word (:data:`pipeline.quality.echo.STOP`) nor a
    token of ``task``: ReAct thoughts quote the question's entities in turn ("I need to search
    the game where Malcolm Smith was named Most Valuable Player", then "Malcolm Smith was named
    Most Valuable Player in Super Bowl XLVIII": 7 shared task tokens of 10; three of the four
    FireAct HotpotQA successes of tests/fixtures). ``thinks`` are ``(step_index, think)``; at most
    one violation per think. Two thinks that differ only in their numbers (and stop words) are no
    reuse: a search says "Cabinet 1 has no mug, so I try cabinet 2." then "Cabinet 2 has no mug,
    so I try cabinet 3." (7 shared tokens of 10).
    """
    return [_reuse_violation(i, j) for i, j in _reuse_pairs(thinks, task)]


def reused_with(mine: Iterable[tuple[int, str]], others: Iterable[tuple[int, str]], task: str = "") -> list[Violation]:
    """:func:`reused` over ``mine`` and ``others`` together in step order, keeping only the
    repeats that involve a think of ``mine``: a call's answer judged against the thinks its
    trajectory already has from other calls (the pen search's "so I will look at drawer 4" for
    both the go to and the open of drawer 4, one from a chunk and one asked alone)."""
    mine = list(mine)
    own = {i for i, _ in mine}
    both = sorted([*mine, *((i, t) for i, t in others if i not in own)], key=lambda x: x[0])
    return [_reuse_violation(i, j) for i, j in _reuse_pairs(both, task) if i in own or j in own]


def _reuse_violation(i: int, j: int) -> Violation:
    return Violation("reused_think", f"the think for step {i} repeats the think for step {j}; explain each step on "
                                     "its own")


def _reuse_pairs(thinks: Iterable[tuple[int, str]], task: str) -> Iterable[tuple[int, int]]:
    """``(i, j)`` for each think ``i`` that repeats the earlier think ``j`` (see :func:`reused`)."""
    task_tokens = frozenset(_tokens(task))
    seen: list[tuple[int, list[str]]] = []
    for i, text in thinks:
        toks = _tokens(text)
        if not toks:
            continue
        j = next((j for j, prev in seen if j != i and _repeats(toks, prev, task_tokens)), None)
        if j is not None:
            yield i, j
        seen.append((i, toks))


#: Characters a complete sentence or phrase may end with; a field at its length bound that ends
#: otherwise was cut by the grammar (``rule cut_off``).
_ENDINGS = ".!?)\"'”’]"


def cut_off(name: str, text: str, max_chars: int | None, sentence: bool = True) -> list[Violation]:
    """``cut_off`` when ``text`` reaches its schema bound ``max_chars`` (within 2 characters) and,
    for a ``sentence`` field, does not end as a sentence ends: a grammar endpoint stops a string at
    its ``maxLength``, mid-word ("apply when the mug is in the micro"). A title (``sentence=False``)
    at its bound is cut whatever its last character."""
    text = (text or "").rstrip()
    if not max_chars or len(text) < max_chars - 2:
        return []
    if sentence and text.endswith(tuple(_ENDINGS)):
        return []
    return [Violation("cut_off", f"{name} stops at its {max_chars}-character bound mid-sentence "
                                 f"({text[-30:]!r}); say it in fewer words")]

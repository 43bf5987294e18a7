"""Echo rules: LLM text that repeats its input instead of saying something.

Seen in the export of the embedded 135M model:

* thinks that are an action command and no reasoning: ``put spraybottle on toilet 2`` before
  the action ``put spraybottle 2 in/on toilet 2``; ``go to cabinet 2`` before ``open cabinet 2``;
* skills that repeat the words of the prompt's headings and instructions: a skill titled
  ``Mistakes seen in failed episodes`` with the principle ``Learn from what worked and failed to
  fail.``, a when-to-apply ``When to apply this skill.``, a skill titled ``Cool``.

Rules (reasons of :data:`pipeline.quality.REASONS`):

* ``think_is_action`` (:func:`think_violations`) - a think whose content words (:func:`action_words`)
  are words of an action string, at most one of them missing (:func:`near_action`), or
  an action-shaped command: it starts with an action verb and uses no word outside the words of
  the actions it could name (:func:`action_shaped`).
* ``echo_prompt`` (:func:`echo_violations`, :func:`think_echo_violations`) - a skill/mistake
  field (a think) with at least :data:`MIN_ECHO_WORDS` (:data:`THINK_MIN_ECHO_WORDS`) content
  words of which at least
  :data:`ECHO_SHARE` are words of the prompt template's fixed text (:func:`echo_share`): the
  outcome run's think ``The environment is TextWorld Express, a text game where the agent
  explores rooms ...`` (1.0), which is the distill prompt's environment line.
* ``not_actionable`` (:func:`echo_violations`) - a skill title of one word, or a principle (or a
  mistake's fix) with fewer than :data:`MIN_PRINCIPLE_WORDS` content words; and
  (:func:`action_field_violations`) a principle, a mistake's cause or its fix that only restates
  an action of the memories fed to the call (the sample run's WebShop mistake: cause
  ``click[B07HRFJWP8] },``, fix ``Click Natural Black #1b``, which is the very bad action its
  memory recorded).

Words are compared after :func:`stem` (a few English suffixes cut: ``failed`` = ``fail``), so
inflection does not hide an echo. The constants below are measured in
``tests/pipeline/quality/test_echo.py`` (figures in each constant's comment).
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from pipeline.quality.violation import Violation

_WORD = re.compile(r"[a-z]{2,}")   # runs of >= 2 ASCII letters, lower-cased text (numbers dropped)
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")

#: Words that never decide whether a text is an echo: articles, prepositions, pronouns,
#: auxiliaries, "and"/"or" and the filler of a bare command ("now I will ..."). Words that carry
#: a reason stay content words ("so", "because", "if", "not", "here", "need", "should").
STOP = frozenset("""
a an the in on to from with at into onto of for by up out off over under about as
i me my we us our you your it its this that these those he she they them their
is are was were be been being am do does did have has had will would shall can may
let lets and or then now next first finally also just
""".split())

#: ``think_is_action``: a think restates an action string when it adds no content word of its own
#: and drops at most this many of the action's. With 1 the 135M model's examples fire ("put spraybottle
#: on toilet 2" has exactly the words of "put spraybottle 2 in/on toilet 2"; "go to cabinet 2"
#: equals the admissible and earlier action "go to cabinet 2"; "take the spraybottle" lacks only
#: "cabinet" of "take spraybottle 2 from cabinet 2"), while any word of its own lets a think pass
#: ("the fridge is closed" adds "closed" to "open fridge 1"; "I go to cabinet 2 to look for it"
#: adds "look"). Measured: none of the 30 recorded thoughts of the ReAct/ETO ALFWorld and ReAct
#: WebShop samples fires (tests/pipeline/quality/test_echo.py).
NEAR_ACTION_SLACK = 1

#: ``echo_prompt``: share of a field's content words that are prompt words. Measured on the 162
#: skills and mistakes of the SkillRL ALFWorld, WebShop and Search banks (tests/fixtures), every
#: field: the highest share is 0.67 against the skills prompt and against the skill-update prompt
#: (3-word titles: "Grab When Seen", "Prevent Action Loops"); the 135M model's junk scores 1.0
#: ("Mistakes seen in failed episodes", "Learn from what worked and failed to fail.", "When to
#: apply this skill."). 0.8: a title of 4 or 5 words must be all or 4/5 echo. Thinks: the 30
#: recorded thoughts of the ReAct/ETO samples reach at most 0.3 against their distill prompt.
ECHO_SHARE = 0.8
#: ``echo_prompt`` judges only fields with at least this many content words: one or two shared
#: words say nothing ("Verify Task" shares "task" with every prompt; the reference bank's terse
#: "No memory." shares both its words with the skills prompt). The 135M model's junk has 3 to 5.
MIN_ECHO_WORDS = 3
#: ``not_actionable``: content words a principle (a mistake's how-to-avoid) needs: at least a verb
#: and what it acts on ("Reread the goal", "Track visits."). In the good banks the shortest
#: principle or how-to-avoid has 12; the sample run's "In the morning." has 1. A mistake's
#: description is not judged: the prompt tests' reference bank describes one as "Looping.".
MIN_PRINCIPLE_WORDS = 2


def stem(word: str) -> str:
    """A crude English stem: ``-ies`` -> ``-y``; ``-ing``/``-ed``/``-es``/``-s`` cut when at least 3
    letters remain (``failed`` -> ``fail``, ``episodes`` -> ``episode``, ``mistakes`` -> ``mistake``,
    ``glass`` unchanged). Not a linguistic stemmer: it only has to map a prompt's word and its
    echo to the same key."""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    for suffix in ("ing", "ed", "s"):
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            return word[:-len(suffix)]
    return word


def content_words(text: str) -> list[str]:
    """Stemmed words of ``text`` that are not :data:`STOP` words, in order (``"Learn from what
    worked"`` -> ``["learn", "work"]``; numbers and one-letter tokens dropped)."""
    return [stem(w) for w in _WORD.findall((text or "").lower()) if w not in STOP]


def action_words(text: str) -> set[str]:
    """:func:`content_words` of an action or a think, as a set (``"put spraybottle 2 in/on toilet
    2"`` -> ``{put, spraybottle, toilet}``; ``"click[Buy Now]"`` -> ``{click, buy}``)."""
    return set(content_words(text))


def near_action(think: set[str], action: set[str], slack: int = NEAR_ACTION_SLACK) -> bool:
    """True when the think's words are the action's: a non-empty ``think`` with no word outside
    ``action``, lacking at most ``slack`` of its words."""
    return bool(think) and think <= action and len(action - think) <= slack


def action_shaped(think_text: str, actions: Sequence[str]) -> bool:
    """True when ``think_text`` reads as a bare command: its first content word is the first word
    of one of ``actions`` (a verb of this environment: go, take, open, click, search ...) and all
    its content words occur in ``actions`` (``"go to cabinet 2 open cabinet 2"``)."""
    words = content_words(think_text)
    verbs = {c[0] for c in map(content_words, actions) if c}
    vocab = {w for a in actions for w in content_words(a)}
    return bool(words) and words[0] in verbs and set(words) <= vocab


def think_is_action(think_text: str, action: str, others: Iterable[str]) -> str | None:
    """The action string that ``think_text`` merely restates, else None: ``action`` (the step's
    own) first, then each of ``others`` (the step's admissible actions, the trajectory's actions),
    by :func:`near_action`; then ``"an action-shaped command"`` when :func:`action_shaped` holds
    against them all. A think without content words is left to rule ``no_words``."""
    words = action_words(think_text)
    if not words:
        return None
    candidates = [action, *others]
    for a in candidates:
        if a and near_action(words, action_words(a)):
            return a
    return "an action-shaped command" if action_shaped(think_text, [a for a in candidates if a]) else None


def think_violations(thinks: Iterable[tuple[int, str]], steps: dict[int, tuple[str, Sequence[str]]],
                     trajectory_actions: Sequence[str]) -> list[Violation]:
    """``think_is_action`` for each ``(step_index, think)`` of ``thinks``; ``steps`` maps a step
    index to ``(the action taken, the admissible actions shown)``, ``trajectory_actions`` are all
    recorded actions of the trajectory."""
    out = []
    for i, think in thinks:
        action, admissible = steps[i]
        echo = think_is_action(think, action, [*admissible, *trajectory_actions])
        if echo is not None:
            out.append(Violation("think_is_action", f"the think for step {i} {think[:60]!r} only restates "
                                                    f"{echo!r}; say why this action is taken now"))
    return out


def prompt_words(sections: Iterable[str]) -> frozenset[str]:
    """The content words (:func:`content_words`) of a prompt template's fixed text: ``sections``
    with their ``{placeholders}`` removed."""
    return frozenset(w for s in sections for w in content_words(_PLACEHOLDER.sub(" ", s)))


def echo_share(text: str, vocab: frozenset[str]) -> tuple[float, int]:
    """``(share of text's content words in vocab, number of content words)``; ``(0.0, 0)`` when the
    text has none."""
    words = content_words(text)
    return (sum(w in vocab for w in words) / len(words), len(words)) if words else (0.0, 0)


#: ``echo_prompt`` of a think judges only thinks with at least this many content words. A short
#: think may well use the prompt's words: the ALFWorld done step's "Now the goal is achieved, so
#: the episode can end with done." (6 words, share 0.83) is right; the echo seen in the outcome
#: run, the TextWorld environment line, has 13.
THINK_MIN_ECHO_WORDS = 8


def think_echo_violations(thinks: Iterable[tuple[int, str]], vocab: frozenset[str]) -> list[Violation]:
    """``echo_prompt`` for each ``(step_index, think)`` with >= :data:`THINK_MIN_ECHO_WORDS` content words,
    >= :data:`ECHO_SHARE` of them in ``vocab`` (:func:`prompt_words` of the distill template and its
    environment lines)."""
    out = []
    for i, think in thinks:
        share, n = echo_share(think, vocab)
        if n >= THINK_MIN_ECHO_WORDS and share >= ECHO_SHARE:
            out.append(Violation("echo_prompt", f"the think for step {i} {think[:60]!r} repeats the prompt's own "
                                                f"words ({share:.0%} of its words); reason about this step"))
    return out


#: ``lists_observation``: the most things of its observation a think may list in one run. Seen in
#: the TextWorld outcome run: 21 of the 53 thinks of the arm without skills opened with the room's
#: contents ("I see a stove, an oven, a fridge, a counter, a kitchen cupboard, ..."), and the 135M
#: student trained on them wrote lists until its token limit at evaluation ("a hat rack, a hat
#: rack, a hat rack, ..."), a format error in a third of its steps. Naming two or three things to
#: compare is reasoning ("a mug, a cup and a bowl, but no plate"); four or more copied from the
#: observation is an inventory. Measured: none of the 39 recorded thoughts of the ReAct/ETO
#: samples lists more than 2 (tests/pipeline/quality/test_echo.py).
MAX_LISTED = 3
#: A list item is a short noun phrase: at most this many words ("a kitchen cupboard that is closed"
#: is one thing; a longer clause is prose, not an item).
LIST_ITEM_WORDS = 6
_SENTENCE = re.compile(r"[.;:!?]+(?:\s|$)")
_THING = re.compile(r"\b(?:a|an|the|some)\s+[a-z][a-z ]*$", re.I)   # a noun phrase ending the part
_ITEM_SPLIT = re.compile(r",\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+(?=(?:a|an|the|some)\s)")


def listed_things(think: str, observation: str, task: str = "") -> list[str]:
    """The longest run, in one sentence of ``think``, of comma- (or "and a"-) separated things:
    short noun phrases with an article ("an oven", <= :data:`LIST_ITEM_WORDS` words), each with a
    content word of ``observation`` that is not a word of ``task`` (a list of the goal's
    requirements, "black, leather, size 7", is reasoning; so is ReAct's list of places to try,
    "drawer (1-10), shelf (1-9), bed (1)", which names no things seen). A longer part that ends in
    such a phrase opens a run ("I see a stove, an oven, ...")."""
    seen = set(content_words(observation)) - set(content_words(task))
    best: list[str] = []
    for sentence in _SENTENCE.split(think or ""):
        run: list[str] = []
        for part in _ITEM_SPLIT.split(sentence):
            part = part.strip()
            m = _THING.search(part)
            if m and m.start() == 0 and len(part.split()) <= LIST_ITEM_WORDS and seen.intersection(content_words(part)):
                run.append(part)
                continue
            best = max(best, run, key=len)
            run = [part] if m and seen.intersection(content_words(m.group(0))) else []
        best = max(best, run, key=len)
    return best


def list_violations(thinks: Iterable[tuple[int, str]], observations: dict[int, str], task: str = ""
                    ) -> list[Violation]:
    """``lists_observation`` for each ``(step_index, think)`` that lists more than
    :data:`MAX_LISTED` things seen in ``observations[step_index]`` (the observations up to that
    step: a list of a room left behind is an inventory too) in one run (:func:`listed_things`)."""
    out = []
    for i, think in thinks:
        items = listed_things(think, observations.get(i, ""), task)
        if len(items) > MAX_LISTED:
            out.append(Violation("lists_observation", f"the think for step {i} lists {len(items)} things of the "
                                                      f"observations ({', '.join(items[:4])}, ...); say which one "
                                                      f"matters for this action and why"))
    return out


#: The fields that ``not_actionable`` requires :data:`MIN_PRINCIPLE_WORDS` content words of.
PRINCIPLE_FIELDS = ("principle", "how_to_avoid")


def echo_violations(name: str, item: dict[str, Any], fields: Sequence[str], vocab: frozenset[str]
                    ) -> list[Violation]:
    """``echo_prompt`` and ``not_actionable`` of one skill or mistake ``item`` (its ``fields``),
    named ``name`` in messages (``"skills[0]"``); ``vocab`` is :func:`prompt_words` of the prompt
    that asked for it. Blank fields are left to the stage's form check."""
    out = []
    for f in fields:
        text = str(item.get(f) or "")
        share, n = echo_share(text, vocab)
        if n >= MIN_ECHO_WORDS and share >= ECHO_SHARE:
            out.append(Violation("echo_prompt", f"{name}.{f} {text[:60]!r} repeats the prompt's own words "
                                                f"({share:.0%} of its words); state a concrete skill"))
    title = str(item.get("title") or "").strip()
    if "title" in fields and title and len(_WORD.findall(title.lower())) < 2:  # "Collect-Then-Compare": 3
        out.append(Violation("not_actionable", f"{name}.title {title[:60]!r} is one word; name the skill "
                                               "in 3 to 5 words"))
    for f in (f for f in PRINCIPLE_FIELDS if f in fields):
        text = str(item.get(f) or "")
        if text.strip() and len(content_words(text)) < MIN_PRINCIPLE_WORDS:
            out.append(Violation("not_actionable", f"{name}.{f} {text[:60]!r} has fewer than "
                                                   f"{MIN_PRINCIPLE_WORDS} content words; say what to do"))
    return out


#: The fields :func:`action_field_violations` judges: what to do and why, never a title or a
#: trigger (a trigger may well name an action: "after click[buy now] fails").
ACTION_FIELDS = ("principle", "why_it_happens", "how_to_avoid")


def action_field_violations(name: str, item: dict[str, Any], actions: Sequence[str]) -> list[Violation]:
    """``not_actionable`` for each :data:`ACTION_FIELDS` field of ``item`` that only restates one
    of ``actions`` (:func:`think_is_action`: the same content words, at most
    :data:`NEAR_ACTION_SLACK` missing, or a bare command in their words): a skill must say what
    to do and why, not replay a recorded step. ``actions``: the actions of the memories fed to
    the call (refined steps' actions, mistakes' bad actions). Measured: none of the 162 items of
    the SkillRL fixture banks has a field in bracketed action syntax, and each of their
    principles and fixes adds words of its own (tests/pipeline/quality/test_echo.py)."""
    if not actions:
        return []
    out = []
    for f in (f for f in ACTION_FIELDS if f in item):
        text = str(item.get(f) or "")
        if (same := think_is_action(text, "", actions)) is not None:
            out.append(Violation("not_actionable", f"{name}.{f} {text[:60]!r} only restates the action "
                                                   f"{same[:60]!r}; say what to do instead and why"))
    return out


def memory_actions(memories: Iterable[dict[str, Any]]) -> list[str]:
    """The actions named by ``memories`` (memory rows): each refined step's action and each
    mistake's bad action, distinct, first-seen order."""
    seen = [s.get("action") or "" for m in memories for s in (m.get("refined_trajectory") or [])]
    seen += [x.get("bad_action") or "" for m in memories for x in (m.get("mistakes_to_avoid") or [])]
    return list(dict.fromkeys(a for a in seen if a.strip()))


#: ``echo_prompt`` of a copied example: a field whose content words match one of the prompt's
#: worked-example strings in order for at least this share (``difflib`` ratio): a copy, not the
#: example's form filled with this episode. Seen with the 1.5B teacher: the WebShop failure
#: example's description copied word for word into the memory of a failure whose cause was
#: another one (1.0), the example skills copied into the bank (1.0). At 0.8 the rule also took
#: adaptations that are true of their episode ("... must be heated" for the example's "... must
#: be cool", 0.86): memory kept 9 of 19 instead of 11 and the bank 3 items, so only copies count.
#: Planning patterns and conditions (a skill's when-to-apply, a mistake's trigger) are not judged:
#: the right abstract plan of a heat task is the example's plan, "While the object has not been
#: found yet." is a condition, and so is "The object is still not transformed as the goal
#: requires" in a failed heat episode (the teacher's memory of it, whose bad actions name the
#: stoveburner it examined, was lost to that trigger alone). The mistake's bad action, which says
#: what this episode did, is still judged.
EXAMPLE_COPY_RATIO = 0.95
#: Fields never judged as copies (see :data:`EXAMPLE_COPY_RATIO`).
EXAMPLE_FREE_FIELDS = ("planning_pattern", "when_to_apply", "trigger_condition")


def example_violations(named: Iterable[tuple[str, str]], examples: Sequence[str]) -> list[Violation]:
    """``echo_prompt`` for each ``(name, text)`` that copies one of the worked ``examples``
    (:data:`EXAMPLE_COPY_RATIO`; texts of fewer than 4 content words are not judged)."""
    from difflib import SequenceMatcher
    refs = [(e, content_words(e)) for e in examples]
    out = []
    for name, text in named:
        words = content_words(text)
        if len(words) < 4 or name.endswith(EXAMPLE_FREE_FIELDS):
            continue
        for e, ref in refs:
            if ref and SequenceMatcher(None, words, ref, autojunk=False).ratio() >= EXAMPLE_COPY_RATIO:
                out.append(Violation("echo_prompt", f"{name} {text[:60]!r} copies the prompt's worked example "
                                                    f"{e[:60]!r}; write about this episode"))
                break
    return out

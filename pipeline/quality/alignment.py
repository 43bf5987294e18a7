"""Think rules: a think must reason toward *its own* step, before acting, in the first person.

Seen in the thinks Qwen2.5-Coder-1.5B wrote for the shipped sample (every one passed the older
rules):

* ``think_misaligned`` (:func:`misaligned`) - the think speaks of another step: ``go to drawer
  4`` got "The agent opens drawer 1 again and finds the pen in it." (another receptacle, acted on
  now), ``take cup 3 from countertop 2`` got "After cooling the cup, the agent moves it to the
  diningtable." (the cup was never cooled: an event that has not happened), and a ``take`` think
  may name another object than the one taken. Allowed: the step's own action, the task's goal,
  and past events that did happen (earlier actions).
* ``narration`` (:func:`narration`) - third-person, past-tense narration after the fact ("The
  agent saw that the cabinet 2 was closed. The agent decided to open cabinet 2."), or a think that
  tells its own action as done ("I opened cabinet 2."). An SFT target teaches the policy to
  *decide*: it speaks as the agent, before the action.

Measured in ``tests/pipeline/quality/test_alignment.py``: neither rule fires on the recorded
thoughts of the samples and fixtures (ReAct ALFWorld and WebShop, ETO ALFWorld).
"""
from __future__ import annotations

import re
from typing import Iterable

from pipeline.core.records import Trajectory
from pipeline.quality import Violation
from pipeline.quality import actions as act
from pipeline.quality.echo import STOP
from pipeline.quality.grounding import entities

#: A third-person actor as the subject of a think: "The agent saw", "the player decided".
_THIRD_PERSON = re.compile(r"\b(?:the|this|our)\s+(?:agent|player|robot|assistant|user|ai)\b|^\s*agent\b", re.I)
#: Words before a past participle that make it a state, not an event: "the drawer is closed",
#: "it's closed", "mugs are usually placed". Adverbs may stand between (up to two words back).
_STATE = frozenset({"is", "are", "was", "were", "be", "been", "being", "remains", "stays", "still", "seems", "s",
                    "re", "m", "get", "gets"})
#: A negation in the three words before a past form: "I haven't placed the apple" claims nothing.
_NEGATION = frozenset({"not", "t", "never", "haven", "hasn", "hadn", "didn", "yet", "no", "without"})
#: A gerund after one of these claims the event is over: "after cooling the cup".
_DONE_MARKERS = frozenset({"after", "having", "already", "once"})
_GERUND = re.compile(r"ing$")


_TASK_WORDS = frozenset({"find", "two", "some", "look", "under", "using", "want", "need", "looking", "price", "lower",
                         "than", "dollars"})


def _task_nouns(task: str) -> set[str]:
    """The object and receptacle words of a task sentence ("put a hot apple in fridge" -> apple,
    hot, fridge): its words less stop words, verbs and task boilerplate."""
    return {w[:-1] if w.endswith("s") and not w.endswith("ss") else w for w in re.findall(r"[a-z]+", (task or "").lower())
            if w not in STOP and w not in act.VERBS and w not in _TASK_WORDS and len(w) > 2}


def _claims_done(tokens: list[str], m: act.Mention) -> bool:
    """Whether prose mention ``m`` says its action has already happened: a past form that is not
    a state ("is closed", "the closed drawer" for open/close), or a gerund after "after"/"having"."""
    word = tokens[m.pos]
    prev = tokens[m.pos - 1] if m.pos else ""
    back = set(tokens[max(0, m.pos - 3):m.pos])
    if back & _NEGATION:
        return False
    if m.past:
        if set(tokens[max(0, m.pos - 2):m.pos]) & _STATE or prev in ("a", "an", "any"):
            return False  # a state ("it's closed") or any such thing ("a chilled plate"), not an event
        nxt = tokens[m.pos + 1] if m.pos + 1 < len(tokens) else ""
        if m.concept in ("open", "close") and (nxt.isalpha() and nxt not in ("it", "the", "a", "them")):
            return False  # "the closed drawer": an adjective naming a state
        return True
    return bool(_GERUND.search(word)) and prev in _DONE_MARKERS


def misaligned(think: str, traj: Trajectory, i: int, action: str) -> str | None:
    """Why the think of distill entry ``i`` (explaining ``action``, taken after observation ``i``)
    speaks of another step, else ``None``:

    * it says an action already happened (:func:`_claims_done`) that no earlier action
      (``1..i``) nor the current one did (``after cooling the cup``);
    * it acts now on a numbered entity (``drawer 1``) that is neither in ``action`` nor in the
      task: an action verb followed within a few words by that entity;
    * it takes or puts an object kind that is neither in ``action`` nor in the task.
    """
    tokens = act.tokenize(think)
    current = act.command_mention(action)
    earlier = [m for m in map(act.command_mention, traj.actions[:i]) if m is not None]
    nouns = act.nouns_of(traj.actions) | _task_nouns(traj.task)
    kinds = nouns | act.RECEPTACLES | act.OBJECTS
    own = entities(action) | entities(traj.task)
    before = set().union(*(entities(a) for a in traj.actions[:i])) if i else set()
    goal = _task_nouns(traj.task)
    # only verbs of this episode's command grammar: a WebShop product "easy carry backdrop" is no move
    concepts = _ACTING & {m.concept for m in map(act.command_mention, traj.actions) if m is not None}
    for m in act.text_mentions(think, nouns):
        if _claims_done(tokens, m):
            # only a claim about a named object or receptacle of this episode ("after cooling the
            # cup"); "items are sometimes placed there" or "after heating liquids" name none
            if m.nouns and not any(act.same_event(m, d) for d in earlier) and not (current and act.same_event(m, current)):
                return f"says '{' '.join(tokens[m.pos:m.pos + 3])}' happened, but no earlier action did that"
            continue
        end = next((q for q in range(m.pos + 1, min(len(tokens), m.pos + 7)) if tokens[q] in (".", ",", ";", "and", "then")),
                   min(len(tokens), m.pos + 7))
        clause = tokens[m.pos:end]
        # an entity of an earlier action is a recap ("now I take a lettuce (1)"), unless "again"
        seen = set() if "again" in clause else before
        foreign = sorted(e for e in entities(" ".join(clause)) if e not in own and e not in seen
                         and e.split()[-2] in kinds)
        if foreign and m.concept in concepts:
            return f"acts on {foreign[0]} ('{' '.join(clause)}'), but this step's action is {action!r}"
        if current and m.concept == current.concept and m.concept in ("take", "put"):
            other = [n for n in m.nouns if n not in goal and n not in act.RECEPTACLES and n not in ("object", "item", "target")
                     and not any(c.endswith(n) or n.endswith(c) for c in current.nouns)]
            if other:
                return f"{m.concept}s {other[0]}, but this step's action is {action!r}"
    return _says_it_does_another(tokens, act.text_mentions(think, nouns), current, earlier[-1:], action, concepts)


#: Words before a verb that make it the agent's own action now, in the present: "I take", "so I
#: go". A future ("I'll close it and go to the desk") is a plan and not judged.
_NOW = (("i",),)


def _says_it_does_another(tokens: list[str], mentions: list[act.Mention], current: act.Mention | None,
                          previous: list[act.Mention], action: str, concepts: set[str]) -> str | None:
    """Why the think says the agent does another action now, else ``None``: a first-person
    present or immediate-future verb ("I take it", "I'll go to the diningtable") of another
    concept than this step's action, while no such verb names this step's concept. A recap of
    the previous action ("Now I take a spraybottle (2)" before going on, as ReAct agents write)
    is not another action."""
    if current is None or any(m.concept == current.concept for m in mentions if not m.past):
        return None  # it speaks of this step's action too ("I use the microwave to heat the mug")
    now = [m for m in mentions if not m.past and any(tuple(tokens[max(0, m.pos - len(w)):m.pos]) == w for w in _NOW)]
    other = [m for m in now if m.concept in concepts and not any(act.same_event(m, p) for p in previous)
             and "look" not in tokens[m.pos + 1:m.pos + 4]]  # "I take a quick look"
    if other:
        m = other[0]
        return f"says the agent will now '{' '.join(tokens[m.pos:m.pos + 4])}', but this step's action is {action!r}"
    return None


_ACTING = frozenset({"go", "open", "close", "take", "put", "heat", "cool", "clean", "use", "examine"})


def narration(think: str, action: str, earlier_actions: Iterable[str] = ()) -> str | None:
    """Why the think is narration, else ``None``: a third-person actor ("the agent") as in a
    report, or the step's own action told in the past tense ("I opened cabinet 2") when no
    ``earlier_actions`` (the trajectory's actions before it) did the same."""
    hit = _THIRD_PERSON.search(think or "")
    if hit:
        return f"speaks of {hit.group(0).strip()!r} in the third person"
    current = act.command_mention(action)
    if current is None:
        return None
    tokens = act.tokenize(think)
    earlier = [m for m in map(act.command_mention, earlier_actions) if m is not None]
    for m in act.text_mentions(think):
        # "the first card I placed" speaks of an earlier put, not of this one
        if m.past and _claims_done(tokens, m) and act.same_event(m, current) and not any(act.same_event(m, d) for d in earlier):
            return f"tells this step's own action as done ('{' '.join(tokens[max(0, m.pos - 1):m.pos + 3])}')"
    return None


def think_violations(thinks: Iterable[tuple[int, str]], traj: Trajectory, actions: dict[int, str]) -> list[Violation]:
    """``narration`` and ``think_misaligned`` for each ``(step_index, think)``; ``actions`` maps a
    step index to the action it explains (the synthetic ``done`` included)."""
    out = []
    for i, think in thinks:
        why = narration(think, actions[i], traj.actions[:i])
        if why:
            out.append(Violation("narration", f"the think for step {i} {why}; write the agent's own reasoning "
                                              "in the first person, before it acts (\"I need ..., so I ...\")"))
            continue
        why = misaligned(think, traj, i, actions[i])
        if why:
            out.append(Violation("think_misaligned", f"the think for step {i} {why}; explain this step's action"))
    return out

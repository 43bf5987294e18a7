"""Grounding rules: an LLM claim about a trajectory must match what was recorded.

* ``ungrounded_step`` - a memory's refined step must cite an action step (1..n, the numbering
  of ``memory.render_trajectory``) whose recorded action equals the claimed one after
  :func:`norm_action`; the model may drop instance numbers (the ALFWorld prompt asks it to
  abstract), but any number it writes must be the recorded one.
* ``ungrounded_observation`` - its ``critical_observation`` must be a span or near-span of the
  observation the agent saw before the action (step k-1) or the one the action produced (step
  k): at least ``min_overlap`` of its tokens found, in order, in that observation
  (:func:`span_coverage`).
* ``future_leak`` - a think for action ``i + 1`` (distill entry ``i``, which shows observation
  ``i``) must not name an entity that first appears in an observation after step ``i``
  (:func:`future_entities`).
* ``ungrounded_think`` - a think for entry ``i`` must name something of what the agent had: at
  least one of its content words (:func:`pipeline.quality.echo.content_words`, stemmed) is a word
  of the task, of observations ``0..i``, of the action taken or of the admissible actions shown
  (:func:`ungrounded_think`). "This action helps me complete the task." and "Let me think about
  it." name nothing; they teach reasoning that fits every step. Measured on the 85 distinct
  recorded thoughts of the samples and fixtures: 2 fire, both Reflexion's WebShop few-shot
  "The first two items are not what I want." (items = the products listed; no shared word).
* ``unknown_source_memory`` / ``category_mismatch`` - a skill's source memories exist, and a
  task-specific skill's category equals theirs (:func:`skill_source_violations`).
"""
from __future__ import annotations

import difflib
import re
from typing import Any, Iterable

from pipeline.core.records import Trajectory
from pipeline.quality.violation import Violation
from pipeline.quality.echo import content_words

_TOKEN = re.compile(r"[a-z0-9]+")
#: Entity mentions: a name followed by an instance number (ALFWorld/TextWorld ``drawer 3``,
#: ``apple 1``) or a WebShop product id (ASIN, ``B0`` + 8 characters).
_ENTITY = re.compile(r"\b([a-z][a-z-]*\s\d+)\b|\b(b0[0-9a-z]{8})\b")


def tokens(text: str) -> list[str]:
    """Lower-cased runs of letters/digits (``"Take apple 1 from the countertop 1."`` -> 7 tokens)."""
    return _TOKEN.findall((text or "").lower())


def norm_action(action: str) -> str:
    """Case, spacing and surrounding punctuation removed (``" Take apple 1 ."`` -> ``"take apple 1"``)."""
    return " ".join((action or "").lower().split()).strip(" .,;:'\"`")


def action_matches(claimed: str, recorded: str) -> bool:
    """``claimed`` is the ``recorded`` action: equal after :func:`norm_action`, or equal once
    instance numbers are dropped from both provided ``claimed`` writes no number at all
    (``"take apple from countertop"`` matches ``"take apple 1 from countertop 1"``;
    ``"go to cabinet 2"`` does not match ``"go to cabinet 1"``)."""
    a, b = norm_action(claimed), norm_action(recorded)
    if a and a == b:
        return True
    ta, tb = tokens(a), tokens(b)
    if not ta or any(t.isdigit() for t in ta):
        return False
    return ta == [t for t in tb if not t.isdigit()]


def span_coverage(claim: str, observation: str) -> float:
    """Share of ``claim``'s tokens that occur in ``observation`` in the same order (longest
    common token subsequence by ``difflib.SequenceMatcher`` matching blocks / claim tokens).
    1.0 for an exact span; 0.0 for an empty claim."""
    a, b = tokens(claim), tokens(observation)
    if not a:
        return 0.0
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return sum(m.size for m in matcher.get_matching_blocks()) / len(a)


def memory_step_violations(refined: Iterable[dict[str, Any]], traj: Trajectory, min_overlap: float
                           ) -> list[Violation]:
    """``ungrounded_step`` / ``ungrounded_observation`` of a memory's ``refined_trajectory`` items
    against ``traj`` (step ``k`` = ``traj.steps[k]``; step 0 is the start and has no action)."""
    out = []
    n = len(traj.steps) - 1
    for j, s in enumerate(refined):
        k, action = s.get("step_index"), str(s.get("action") or "")
        where = f"refined_trajectory[{j}]"
        if not isinstance(k, int) or not 1 <= k <= n:
            out.append(Violation("ungrounded_step", f"{where} cites step {k}, which is not an action step (1..{n})"))
            continue
        recorded = traj.steps[k].action or ""
        if not action_matches(action, recorded):
            out.append(Violation("ungrounded_step", f"{where}: step {k}'s recorded action is {recorded!r}, "
                                                    f"not {action[:80]!r}; copy the action of the step you cite"))
            continue
        crit = str(s.get("critical_observation") or "")
        best = max(span_coverage(crit, traj.steps[k - 1].observation), span_coverage(crit, traj.steps[k].observation))
        if best < min_overlap:
            out.append(Violation("ungrounded_observation",
                                 f"{where}.critical_observation {crit[:60]!r} is not in the observation of step "
                                 f"{k - 1} or {k} ({best:.2f} of its words found in order, need {min_overlap}); "
                                 "quote the observation"))
    return out


def entities(text: str) -> set[str]:
    """Entity mentions in ``text`` (lower-cased, spacing normalised): see ``_ENTITY``."""
    low = " ".join((text or "").lower().split())
    return {m.group(1) or m.group(2) for m in _ENTITY.finditer(low)}


def future_entities(traj: Trajectory, i: int) -> set[str]:
    """Entities that first appear after step ``i``: in observations ``i+1..``, but not in the task,
    observations ``0..i``, admissible lists ``0..i`` or actions ``1..i+1`` (the action being
    explained names its own arguments)."""
    seen = entities(traj.task)
    for s in traj.steps[:i + 1]:
        seen |= entities(s.observation) | entities(" ; ".join(s.admissible_actions or []))
    for s in traj.steps[1:i + 2]:
        seen |= entities(s.action or "")
    later: set[str] = set()
    for s in traj.steps[i + 1:]:
        later |= entities(s.observation)
    return later - seen


def future_leak(think: str, traj: Trajectory, i: int) -> list[Violation]:
    """``future_leak`` when the think of entry ``i`` names an entity of :func:`future_entities`."""
    leaked = sorted(entities(think) & future_entities(traj, i))
    if leaked:
        return [Violation("future_leak", f"the think for step {i} names {', '.join(leaked)}, which the agent "
                                         "has not seen yet at that step")]
    return []


def grounding_words(traj: Trajectory, i: int, action: str, admissible: Iterable[str]) -> set[str]:
    """Stemmed content words (:func:`pipeline.quality.echo.content_words`) of what the agent had
    at distill entry ``i``: the task, observations ``0..i``, ``action`` (the action taken) and
    ``admissible`` (the actions shown)."""
    texts = [traj.task, *(s.observation or "" for s in traj.steps[:i + 1]), action, *admissible]
    return set(content_words(" \n ".join(texts)))


def ungrounded_think(think: str, traj: Trajectory, i: int, action: str, admissible: Iterable[str]
                     ) -> list[Violation]:
    """``ungrounded_think`` when no content word of the think for entry ``i`` is one of
    :func:`grounding_words` (a think with no content word at all is left to ``no_words``)."""
    words = set(content_words(think))
    if words and not words & grounding_words(traj, i, action, admissible):
        return [Violation("ungrounded_think", f"the think for step {i} {think[:60]!r} names nothing of the task, "
                                              "the observations so far or the actions; say what in the observation "
                                              "leads to this action")]
    return []


def skill_source_violations(row: dict[str, Any], memories: dict[str, dict[str, Any]]) -> list[Violation]:
    """``unknown_source_memory`` when a source memory id of skill ``row`` is not in ``memories``
    (``{memory_id: memory row}``); ``category_mismatch`` when a task-specific skill's category is
    not the category of every source memory."""
    missing = [m for m in row.get("source_memory_ids") or [] if m not in memories]
    if missing:
        return [Violation("unknown_source_memory", f"skill {row.get('skill_id')} cites unknown memories {missing[:3]}")]
    if row.get("kind") == "task_specific":
        cats = sorted({memories[m]["category"] for m in row["source_memory_ids"]} - {row.get("category")})
        if cats:
            return [Violation("category_mismatch", f"task-specific skill {row.get('skill_id')} of category "
                                                   f"{row.get('category')!r} comes from memories of {cats}")]
    return []


def missing_key_step(refined: Iterable[dict[str, Any]], traj: Trajectory) -> list[Violation]:
    """``missing_key_step`` when a success memory's refined steps leave out the action its task
    cannot succeed without and that the trajectory took: the category's key verb (ALFWorld heat,
    cool, clean, or use for look-at-in-light: :data:`pipeline.quality.actions.KEY_VERB`), or a
    WebShop purchase (``click[Buy Now]``). "Put a hot apple in fridge" remembered without
    ``heat apple 1 with microwave 1`` teaches a plan that fails."""
    from pipeline.quality import actions as act
    key = "buy" if traj.env == "webshop" else act.KEY_VERB.get(traj.category)
    if not key:
        return []
    taken = [(k, a) for k, a in enumerate(traj.actions, start=1)
             if (m := act.command_mention(a)) is not None and m.concept == key]
    if not taken:
        return []
    cited = {s.get("step_index") for s in refined}
    if any(k in cited for k, _ in taken):
        return []
    k, a = taken[-1]
    return [Violation("missing_key_step", f"the refined trajectory leaves out step {k} ({a!r}), the {key} step this "
                                          "task cannot succeed without; include it")]


def reground_steps(refined: list[dict[str, Any]], traj: Trajectory, min_overlap: float,
                   max_chars: int | None = None) -> dict[str, int]:
    """Repair, in place, what a memory's refined steps got wrong about the record, from the record
    itself (nothing is invented), and return the counts ``{"step_index": n, "critical_observation": m}``:

    * a step whose action is not recorded at its ``step_index`` but is recorded at exactly one
      step gets that index (the 1.5B teacher copies the action right and miscounts the step);
    * a ``critical_observation`` that is no (near-)quote of the observation before or after its
      step (:func:`span_coverage` < ``min_overlap``) becomes the observation the action produced,
      cut at a sentence or word end within ``max_chars`` (the model paraphrased: "You put the mug
      1 on the coffee machine." for "You put the mug 1 in/on the coffeemachine 1."), or the
      observation before the step when the step recorded none (the final step of many ETO
      episodes, where the 1.5B teacher makes one up).

    A step whose action is recorded nowhere, or at several steps, is left for ``ungrounded_step``."""
    fixed = {"step_index": 0, "critical_observation": 0}
    n = len(traj.steps) - 1
    for s in refined:
        k, action = s.get("step_index"), str(s.get("action") or "")
        if not (isinstance(k, int) and 1 <= k <= n and action_matches(action, traj.steps[k].action or "")):
            at = [j for j in range(1, n + 1) if action_matches(action, traj.steps[j].action or "")]
            if len(at) != 1:
                continue
            s["step_index"], k = at[0], at[0]
            fixed["step_index"] += 1
        crit = str(s.get("critical_observation") or "")
        best = max(span_coverage(crit, traj.steps[k - 1].observation), span_coverage(crit, traj.steps[k].observation))
        # the last step of a finished episode often has no recorded observation: then the
        # observation the action was taken on is the quote (the prompt allows either)
        source = next((o for o in (traj.steps[k].observation, traj.steps[k - 1].observation) if (o or "").strip()), "")
        if best < min_overlap and source:
            s["critical_observation"] = _clip_quote(source, max_chars or 200)
            fixed["critical_observation"] += 1
    return fixed


def _clip_quote(text: str, max_chars: int) -> str:
    """``text`` on one line, cut at the last sentence end (else word end) that fits ``max_chars``."""
    text = " ".join((text or "").split())
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    cut = max(head.rfind(". "), head.rfind("! "), head.rfind("? "))
    return head[:cut + 1] if cut > max_chars // 3 else head[:head.rfind(" ")].rstrip(",;:")


#: A money amount: "$32.99", "$ 50", "50.00 dollars", "40 usd".
_MONEY = r"(?:\$\s?(\d+(?:\.\d+)?)|(\d+(?:\.\d+)?)\s*(?:dollars?|usd)\b)"
#: Words that claim the amount before them is above (">") or below ("<") the amount after them.
_ABOVE = r"exceeds?|exceeding|is\s+above|above|over|more\s+than|higher\s+than|greater\s+than|too\s+expensive"
_BELOW = r"below|under|less\s+than|lower\s+than|within|cheaper\s+than|fits|meets"
_COMPARISON = re.compile(_MONEY + r"(?P<between>[^$.;!?]{0,80}?)\b(?P<word>" + _ABOVE + "|" + _BELOW + r")\b"
                         r"[^$.;!?]{0,60}?" + _MONEY, re.I)


def false_comparisons(think: str) -> list[Violation]:
    """``false_comparison`` when a think says one price is above (or below) another and the
    numbers say the opposite: "The price of this product is $32.99, which exceeds the
    instruction's constraint of 'price lower than 50.00 dollars'" (the 1.5B teacher, WebShop).
    The comparison word is the first one after the first amount; equal amounts are not judged."""
    out = []
    for m in _COMPARISON.finditer(think or ""):
        first = float(m.group(1) or m.group(2))
        second = float(m.group(5) or m.group(6))
        above = re.fullmatch(_ABOVE, m.group("word"), re.I) is not None
        if first != second and above != (first > second):
            out.append(Violation("false_comparison", f"the think says {first:g} is {'above' if above else 'below'} "
                                                     f"{second:g} ('{m.group('word')}'); compare the prices again"))
    return out

"""Skill-bank rules: skills and mistakes that a 1.5B teacher writes and an agent cannot use.

Seen in the bank Qwen2.5-Coder-1.5B built from the shipped sample:

* ``restated_action`` - "Go To Cabinet: Navigate to the specified cabinet by following the
  sequence of steps." One command in other words teaches nothing the admissible list does not
  already say (:func:`restated_action`).
* ``contradicts_success`` - "Cool the Vase: go to the fridge before taking the vase." contradicts
  every successful cool episode (they take the object, then go to the fridge); "Heat Mug: first
  locate the stoveburner" names a place no successful heat episode used (ALFWorld heats in the
  microwave); "Use Light Source: use the light source first before moving to the target" in a
  look-in-light task, whose object must be in hand when the lamp goes on. A skill's prescribed
  order, or its first step, is checked against the successful source trajectories of its
  category (:func:`order_violations`), or, when none can tell, against the order ALFWorld's
  rules force (:data:`GAME_ORDER`).
* ``duplicate_mistake`` - five mistakes with one boilerplate cause ("did not remember where X is
  located in the kitchen"); WebShop's "does not click on the required option" and "does not
  select any option": the later copies add nothing (:func:`duplicate_mistakes`).

Each rule is measured on the samples' and fixtures' real banks in
``tests/pipeline/quality/test_bankrules.py``: none of SkillRL's 43 ALFWorld and 47 WebShop skills
and mistakes fires.
"""
from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import Any, Iterable, Sequence

from pipeline.core.records import Trajectory
from pipeline.quality.violation import Violation
from pipeline.quality import actions as act
from pipeline.quality import phrases
from pipeline.quality.echo import STOP, stem

#: Words that make a principle more than one command: an order, a condition, a reason, a choice
#: or a scope ("before", "if", "so", "instead", "every"...). A principle with any of them is
#: never ``restated_action``.
STRATEGY = frozenset("""
before after until unless if when whenever while once then first instead rather avoid never always only
every each all any remaining unexplored unvisited other another again already because since so otherwise
check verify ensure confirm prioritize prefer systematically likely common commonly usually nearest
closest more most least both either not no without soon immediately directly
""".split())
#: Words that add nothing to a command: "the specified cabinet", "by following the sequence of steps".
FILLER = frozenset("""
specified specific given required desired appropriate correct right relevant necessary sequence step
follow task goal location order properly carefully successfully complete accomplish perform action
way area spot place exact exactly designated particular mentioned needed
""".split())
#: ``duplicate_mistake``: two mistakes whose cause (or fix) share this share of their words, in
#: order (``difflib`` ratio over content words, verbs as their action concept), say the same
#: thing. The five boilerplate causes of the sample bank score 0.83-0.92 with one another, the
#: 1.5B teacher's "does not click on the required option" / "does not select any option" 0.83;
#: its "does not check if it matches the description" scores 0.46 against either (another
#: cause); the most similar pair of SkillRL's own ALFWorld, WebShop or Search mistakes scores 0.33.
DUPLICATE_RATIO = 0.75


def _plain(word: str) -> str:
    """``word`` without a plural or verb ending, for the :data:`FILLER` and noun lookups."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and word[:-len(suffix)] in FILLER:
            return word[:-len(suffix)]
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


#: Conditions and orders that add nothing to a command, removed before the :data:`STRATEGY`
#: test: being told to do it ("Go to the toilet when instructed to do so", "when the
#: observation says the agent should ...": ALFWorld observations never say what to do), and a
#: put or use "after taking it" (nothing can be put before it is held). The 1.5B teacher wrote
#: each of these for a bare step once outlines of the successes were in its prompt.
VOID_CLAUSE = re.compile(phrases.alternation("bank_phrases.toml", "void_clause"), re.I)  # data/bank_phrases.toml


def restated_action(principle: str, known_nouns: Iterable[str] = ()) -> str | None:
    """The one command a principle restates (``"go cabinet"``), else ``None``: exactly one action
    concept (:func:`pipeline.quality.actions.text_mentions`), no :data:`STRATEGY` word once the
    :data:`VOID_CLAUSE` phrases are removed, and at most one other word that is neither a stop
    word, a verb form, an object or receptacle kind, nor :data:`FILLER`."""
    principle = VOID_CLAUSE.sub(" ", principle or "")
    words = re.findall(r"[a-z]+", (principle or "").lower())
    if not words or any(w in STRATEGY for w in words):
        return None
    mentions = act.text_mentions(principle, known_nouns)
    concepts = {m.concept for m in mentions}
    if len(concepts) != 1:
        return None
    nouns = {n for m in mentions for n in m.nouns} | set(known_nouns) | act.RECEPTACLES | {"object", "item"}
    rest = [w for w in words if w not in STOP and w not in act.VERBS and _plain(w) not in nouns
            and w not in FILLER and _plain(w) not in FILLER and len(w) > 1]
    if len(rest) > 1:
        return None
    return f"{next(iter(concepts))} {' '.join(sorted({n for m in mentions for n in m.nouns}))}".strip()


#: Words that stand for the object or place of a command in a title ("Go To Location",
#: "Put Object In Target Location").
PLACE_WORDS = frozenset({"object", "item", "target", "it", "location", "destination", "place", "receptacle"})


def command_title(title: str, known_nouns: Iterable[str] = ()) -> bool:
    """Whether a skill title is a bare command: one action verb and only the objects or
    receptacles it acts on ("Go To Microwave", "Take Object", "Put Object In Target")."""
    words = [w for w in re.findall(r"[a-z]+", (title or "").lower()) if w not in STOP]
    mentions = act.text_mentions(title, known_nouns)
    if len({m.concept for m in mentions}) != 1 or not words or words[0] not in act.VERBS:
        return False
    nouns = set(known_nouns) | act.RECEPTACLES | act.OBJECTS | PLACE_WORDS
    return all(w in act.VERBS or _plain(w) in nouns for w in words)


def restated_violations(name: str, item: dict[str, Any], known_nouns: Iterable[str]) -> list[Violation]:
    """``restated_action`` of one skill (``name``: the item in messages, ``skills[2]``): its
    principle restates one command (:func:`restated_action`), or its title is a bare command
    (:func:`command_title`) and its principle gives no order, condition or reason
    (:data:`STRATEGY`): "Go To Microwave: Place the object in the microwave for heating.",
    one step of a plan split into skills."""
    principle = str(item.get("principle") or "")
    what = restated_action(principle, known_nouns)
    if what is None and command_title(str(item.get("title") or ""), known_nouns) \
            and not any(w in STRATEGY for w in re.findall(r"[a-z]+", VOID_CLAUSE.sub(" ", principle).lower())):
        what = str(item.get("title")).strip()
    if what is None:
        return []
    return [Violation("restated_action", f"{name}.principle only restates the command '{what}'; "
                                         "write a rule of behaviour: when and why, in which order")]


def order_claims(text: str, known_nouns: Iterable[str] = ()) -> list[tuple[act.Mention, act.Mention | None]]:
    """The order a text prescribes, as ``(earlier, later)`` mentions: ``A before B``, ``A then B``,
    ``after A, B`` / ``B after A``, and ``first A`` (``later`` is ``None``: A comes before the
    task's key step). Mentions of ``go``/``open``/``use`` must name a receptacle to count."""
    text = lamp_prose(text)
    tokens = act.tokenize(text)
    mentions = [m for m in act.text_mentions(text, set(known_nouns) | {LAMP})
                if m.concept not in ("go", "open", "use") or any(n in act.RECEPTACLES or n == LAMP for n in m.nouns)]
    claims: list[tuple[act.Mention, act.Mention | None]] = []
    for p, tok in enumerate(tokens):
        before = [m for m in mentions if m.pos < p]
        after = [m for m in mentions if m.pos > p]
        if "or" in tokens[max(0, p - 1):p + 2]:
            continue  # "before or after", "then or": no order is prescribed
        if tok in ("before", "then") and before and after:
            claims.append((before[-1], after[0]))
        elif tok == "after" and after:
            clause_end = next((q for q in range(p + 1, len(tokens)) if tokens[q] in ",.;"), len(tokens))
            main = [m for m in mentions if m.pos > clause_end] if not before or tokens[p - 1] in ",.;" else before[-1:]
            if main:
                claims.append((after[0], main[0] if main[0].pos > p else main[-1]))
        elif tok == "first" and after and after[0].pos - p <= 3 and not _FIRST_ENDS & set(tokens[p + 1:after[0].pos]):
            claims.append((after[0], None))
        elif tok == "first" and before and p - before[-1].pos <= 4:  # "locate the fridge first"
            claims.append((before[-1], None))
    # an order inside a condition ("after X, check Y; if it fails, search again") is not prescribed
    return [c for c in claims if c[1] is None or not _CONDITIONAL & set(tokens[min(c[0].pos, c[1].pos):max(c[0].pos, c[1].pos)])]


_CONDITIONAL = frozenset({"if", "unless", "otherwise", "whenever", "when"})
#: Tokens that close the phrase ``first`` ends: "take it first, then go ...", "heat it first
#: before putting it" speak of the action before ``first``, not of the one after.
_FIRST_ENDS = frozenset({",", ".", ";", ":", "then", "before", "and"})

#: The noun a skill's "lamp", "light" or "light source" becomes (:func:`lamp_prose`); it matches
#: a command on either lamp kind of ALFWorld (:data:`LAMPS`).
LAMP = "lamp"
LAMPS = frozenset({"desklamp", "floorlamp"})
_LIGHT_SOURCE = re.compile(r"\b(?:(?:desk|floor)\s*)?(?:light\s+sources?|lights?|lamps?)\b", re.I)
_LOOK_IN_LAMP = re.compile(r"\blook(?:s|ing)?\s+(?:in|into|at|under|through|with)\s+(?:the\s+|a\s+)?lamp\b", re.I)


def lamp_prose(text: str) -> str:
    """``text`` with the words a skill uses for ALFWorld's lamps made one noun :data:`LAMP`
    ("light source", "light", "desk lamp", "desklamp", "floorlamp"), and "look in/at/under the
    lamp" read as "use the lamp" (the look-in-light tasks' only lamp action is ``use desklamp 1``):
    "look in the light source first" -> "use the lamp first"."""
    return _LOOK_IN_LAMP.sub("use the lamp", _LIGHT_SOURCE.sub(LAMP, text or ""))


def _matches(claim: act.Mention, done: act.Mention) -> bool:
    """:func:`pipeline.quality.actions.matches`, where the prose :data:`LAMP` is either lamp kind."""
    return act.matches(claim, done) and (LAMP not in claim.nouns or bool(LAMPS & set(done.nouns)))


def _first(steps: Sequence[act.Mention | None], claim: act.Mention) -> int | None:
    return next((k for k, s in enumerate(steps) if s is not None and _matches(claim, s)), None)


#: Steps whose order ``first A`` is judged among: taking the object, transforming it, putting it.
_MAIN = frozenset({"take", "put", "heat", "cool", "clean", "use"})


def violated_in(claim: tuple[act.Mention, act.Mention | None], steps: Sequence[act.Mention | None],
                category: str) -> bool | None:
    """Whether the successful sequence ``steps`` (command mentions) of a ``category`` task
    contradicts ``claim``: its later action happens first (or without the earlier one), or, for
    ``first A``, A never happens before the task's key step (:data:`pipeline.quality.actions.KEY_VERB`;
    the last action when the category has none). When A *is* the key step ("use the lamp first"
    in a look-in-light task), "first" can only mean before the other main steps (take, put,
    transform): it is contradicted when one of them comes before A and none after it (the object
    is taken, then the lamp used, and the episode ends). ``None`` when ``steps`` take neither
    action (they cannot tell)."""
    earlier, later = claim
    ia = _first(steps, earlier)
    if later is None:
        key = act.KEY_VERB.get(category)
        if key and earlier.concept == key:
            if ia is None:
                return None
            main = [k for k, s in enumerate(steps) if s is not None and s.concept in _MAIN and k != ia]
            return bool(main) and all(k < ia for k in main)
        ik = next((k for k, s in enumerate(steps) if s is not None and s.concept == key), None) if key else None
        ik = ik if ik is not None else len(steps) - 1
        return ia is None or ia > ik
    ib = _first(steps, later)
    if ia is None and ib is None:
        return None
    return ib is not None and (ia is None or ib < ia)


def violated_by(claim: tuple[act.Mention, act.Mention | None], traj: Trajectory) -> bool | None:
    """Whether a successful ``traj`` contradicts ``claim`` (:func:`violated_in` over its commands)."""
    return violated_in(claim, [act.command_mention(a) for a in traj.actions], traj.category)


#: The order ALFWorld's PDDL domain forces on the steps of each task type, as command concepts:
#: heat/cool/clean need the object in hand (``HeatObject``/``CoolObject``/``CleanObject``
#: preconditions ``holds``), so does ``put`` and the look-in-light goal (hold the object while the
#: lamp is on); the transformed object must then be put. Used when no successful episode of the
#: category can tell (:func:`order_violations`). Going and opening are left out: the game lets
#: the agent go anywhere in any order.
GAME_ORDER: dict[str, tuple[str, ...]] = {
    "pick_and_place": ("take", "put"), "pick_two_obj_and_place": ("take", "put"),
    "look_at_obj_in_light": ("take", "use"), "heat": ("take", "heat", "put"),
    "cool": ("take", "cool", "put"), "clean": ("take", "clean", "put")}


def game_violated(claim: tuple[act.Mention, act.Mention | None], category: str) -> bool | None:
    """Whether :data:`GAME_ORDER` of ``category`` contradicts ``claim`` (concepts only: the game's
    order names no receptacle). ``None`` when the category has no known order or the claim
    names a step outside it."""
    order = GAME_ORDER.get(category)
    if order is None or any(m is not None and m.concept not in order for m in claim):
        return None
    bare = tuple(None if m is None else act.Mention(m.concept, ()) for m in claim)
    return violated_in(bare, [act.Mention(c, ()) for c in order], category)


def _claim_text(claim: tuple[act.Mention, act.Mention | None]) -> str:
    a, b = claim
    first = f"{a.concept} {' '.join(a.nouns)}".strip()
    return f"'{first}' first" if b is None else f"'{first}' before '{b.concept} {' '.join(b.nouns)}'".replace(" '", " '")


def order_violations(name: str, text: str, successes: Sequence[Trajectory], category: str = "") -> list[Violation]:
    """``contradicts_success`` when one order :func:`order_claims` finds in ``text`` is violated
    by every trajectory of ``successes`` that can tell (at least one must); when none can tell
    and ``category`` is an ALFWorld task type, by the order its game rules force
    (:func:`game_violated`: "use the lamp first" in a look-in-light task, whose object must be
    in hand when the lamp is on)."""
    nouns = act.nouns_of(a for t in successes for a in t.actions)
    # only verbs these episodes' command grammar has ("search" is no ALFWorld command)
    concepts = {m.concept for t in successes for m in map(act.command_mention, t.actions) if m is not None}
    for claim in order_claims(text, nouns):
        told = []
        if not any(m is not None and m.concept not in concepts for m in claim):
            told = [v for v in (violated_by(claim, t) for t in successes) if v is not None]
        if told and all(told):
            return [Violation("contradicts_success", f"{name} prescribes {_claim_text(claim)}, which none of the "
                                                     f"{len(told)} successful episodes of its kind did; describe "
                                                     "the order the successes followed")]
        if not told and game_violated(claim, category):
            return [Violation("contradicts_success", f"{name} prescribes {_claim_text(claim)}, but the game's rules "
                                                     f"order a {category} task {' -> '.join(GAME_ORDER[category])}")]
    return []


#: Appliances a skill may wrongly name as the tool of a transform (ALFWorld scene objects).
APPLIANCES = frozenset({"stoveburner", "stove", "microwave", "fridge", "sinkbasin", "sink", "toaster",
                        "coffeemachine", "desklamp", "floorlamp", "bathtubbasin"})


_TO_PLACE = re.compile(r"\b(?:it|them|object|item)\s+(?:over\s+)?to\s+(?:the\s+|a\s+)?([a-z]+)")


def tool_violations(name: str, item_text: str, principle: str, successes: Sequence[Trajectory],
                    category: str) -> list[Violation]:
    """``contradicts_success`` when a skill of a transform category (``heat``, ``cool``, ``clean``,
    ``look_at_obj_in_light``: :data:`pipeline.quality.actions.KEY_VERB`) sends the agent to an
    appliance that no successful episode used for that transform, and never names the one they
    used ("Heat Mug: first locate the stoveburner", when every success heated in the microwave).
    Without a success that shows the transform, the appliance ALFWorld's domain requires
    (:data:`pipeline.quality.actions.TRANSFORM_TOOLS`) stands in ("Cool Cup: carry it to the
    sinkbasin and cool it there"). For heat, cool and clean, the receptacle the agent goes to or
    puts the object in just before the transform counts as named ("carry it to the dining table
    and heat it there").
    ``item_text`` is the whole skill (title included), ``principle`` the field judged."""
    key = act.KEY_VERB.get(category)
    if not key or not any(m.concept == key for m in act.text_mentions(item_text)):
        return []
    used = {n for t in successes for m in map(act.command_mention, t.actions)
            if m is not None and m.concept == key for n in m.nouns if n in APPLIANCES}
    # no success of the category shows the transform (all were demoted, say): the game's own rule
    who = "every successful episode of its kind used" if used else "the game's rules require"
    used = used or set(act.TRANSFORM_TOOLS.get(key, ()))
    mentions = act.text_mentions(principle)
    named = {n for m in mentions if m.concept in ("go", "use", key) for n in m.nouns if n in APPLIANCES}
    # "take it to the microwave and wait until it is cold" (the 1.5B teacher's cool skill): carried to it
    named |= {act.singular(w) for w in _TO_PLACE.findall(act.join_names(principle.lower()))} & APPLIANCES
    if key in ("heat", "cool", "clean"):
        # the place reached just before the transform is where it happens: "carry it to the dining table
        # and heat it there" (the 1.5B teacher) names the dining table as the heater
        named |= {n for m, nxt in zip(mentions, mentions[1:]) if m.concept in ("go", "put") and nxt.concept == key
                  for n in m.nouns if n in act.RECEPTACLES}
    if not used or named & used or not named - used:
        return []
    return [Violation("contradicts_success", f"{name} sends the agent to {', '.join(sorted(named - used))} to {key}, "
                                             f"but {who} {', '.join(sorted(used))}")]


def _mistake_words(text: str) -> list[str]:
    """Content words of a mistake field, each verb of the command grammar as its concept
    (:data:`pipeline.quality.actions.VERBS`: "select an option" and "click the option" say one thing)."""
    return [act.VERBS.get(w) or stem(w) for w in re.findall(r"[a-z]{2,}", (text or "").lower()) if w not in STOP]


def duplicate_mistakes(key: str, items: Sequence[dict[str, Any]]) -> list[Violation]:
    """``duplicate_mistake`` for each mistake whose ``why_it_happens`` or ``how_to_avoid`` is
    near-identical (:data:`DUPLICATE_RATIO`) to an earlier item's: the later copy is reported
    (``Violation.item``: its index)."""
    out = []
    for j in range(1, len(items)):
        for i in range(j):
            for field in ("why_it_happens", "how_to_avoid"):
                a, b = _mistake_words(str(items[i].get(field) or "")), _mistake_words(str(items[j].get(field) or ""))
                if a and b and SequenceMatcher(None, a, b, autojunk=False).ratio() >= DUPLICATE_RATIO:
                    out.append(Violation("duplicate_mistake", f"{key}[{j}].{field} repeats {key}[{i}]'s; merge them "
                                                              "or name a different cause and fix", item=j))
                    break
            else:
                continue
            break
    return out


#: "the agent did not select ...", "The agent clicked ...": one episode told, not a condition.
_EPISODE_TOLD = re.compile(r"\b(?:the|an?|this)\s+agent\s+(?:did|didn't|does\s+not|has|had|hadn't|was|wasn't|were|"
                           r"\w+ed)\b", re.I)


#: "...: Clicked on a product that ...": a recorded bad action pasted after a colon.
_ACTION_TOLD = re.compile(r":\s+(?:[A-Z][a-z]+ed)\b")


def condition_narration(name: str, when: str) -> list[Violation]:
    """``narration`` of a skill's when-to-apply that tells what an agent did in one episode
    instead of naming a state the agent can check. Seen in the 1.5B teacher's WebShop bank:
    "When The agent did not select a natural-looking product: Clicked Buy Now without selecting
    a product that meets the natural looking requirement." (a mistake of its memory pasted in), or
    "When The search results are too broad ...: Clicked on a product that does not meet the price
    constraint." (a bad action pasted after a colon). A when-to-apply is read by the agent before
    acting: "When the product page lists options"."""
    hit = _EPISODE_TOLD.search(when or "") or _ACTION_TOLD.search(when or "")
    if hit is None:
        return []
    return [Violation("narration", f"{name} tells an episode ('{hit.group(0).lstrip(': ')}') instead of a state the agent can "
                                   "check before acting; say when the skill applies")]


#: Words before an example list: objects named after them illustrate a kind ("such as a
#: butterknife when the goal names a knife") and are not the episode's own.
_EXAMPLE_LEAD = re.compile(r"\b(?:such\s+as|e\.g\.|for\s+example|for\s+instance|like)\b", re.I)


#: Appliances and lamps (:data:`pipeline.quality.actions.TRANSFORM_TOOLS`): tools of a kind of task,
#: not places of one episode.
_TOOLS = frozenset(t for tools in act.TRANSFORM_TOOLS.values() for t in tools)


def _episode_things(text: str) -> tuple[set[str], set[str]]:
    """ALFWorld ``(object kinds, receptacle kinds)`` named in ``text`` before any example list
    (:data:`_EXAMPLE_LEAD`); :data:`_TOOLS` do not count as receptacles."""
    head = _EXAMPLE_LEAD.split(text or "", maxsplit=1)[0]
    words = {act.singular(w) for w in act.tokenize(head)}
    return words & act.OBJECTS, (words & act.RECEPTACLES) - _TOOLS


def episode_violations(name: str, item: dict[str, Any], sources: Sequence[str]) -> list[Violation]:
    """``episode_specific`` of one ALFWorld common mistake: a description or fix that names the goal
    object of one of its source tasks together with a place (``sources``: the tasks and
    descriptions of the memories fed to the call). Seen in the 1.5B teacher's bank of the shipped
    sample, from "look at book under the desklamp": "The book is not moved from shelf to dining
    table." / "Look for the book in all the drawers before moving it to the dining table.": one
    failed episode retold, of no use in another task. SkillRL's 11 ALFWorld mistakes name no
    object kind; an object named after "such as" illustrates a kind and does not count."""
    for f in ("description", "how_to_avoid"):
        objs, recs = _episode_things(str(item.get(f) or ""))
        if not recs:
            continue
        for src in sources:
            if same := objs & _episode_things(src)[0]:
                return [Violation("episode_specific", f"{name}.{f} retells one episode (the {', '.join(sorted(same))} "
                                                      f"of {src[:60]!r}, at {', '.join(sorted(recs))}); name the kind "
                                                      "of mistake and a fix for any object and place")]
    return []

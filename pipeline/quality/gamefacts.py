"""Skill-bank rules that check what an item says against facts of the game.

Seen in the bank Qwen2.5-Coder-1.5B built from the shipped sample, each passing every other rule:

* ``self_target`` - "Cool Vase: When the goal asks for a cool vase, take it first, carry it to the
  fridge and cool it there before putting it in the vase." The object is put in or on an object
  of its own kind: no ALFWorld task asks that, and no episode can do it (:func:`self_target`).
* ``missing_control`` - WebShop "Filter by Price: After searching for products, select the price
  range from the drop-down menu to narrow down your results." WebShop's text pages have no
  drop-down, filter, sort, slider, checkbox, cart, checkout or login; an agent that follows the
  skill issues clicks the page answers with "Invalid action!" (:func:`missing_controls`).
* ``wrong_category`` - "Move Object to Target Receptacle: ... then go to the target receptacle and
  place it there" filed as a look-at-in-light skill: a step no episode of the category takes
  (:func:`foreign_actions`).
* ``not_portable`` - "Use Desklamp: When the goal asks for a desklamp, use the desklamp from your
  inventory." ALFWorld's lamps, appliances and receptacles cannot be picked up, and ``use``
  toggles a lamp where it stands (:func:`fixed_things`).
* ``feeling_reason`` - "Do not revisit a place that is empty, as this may lead to confusion or
  frustration." A game has no frustration; the real cost (steps lost against the step limit)
  goes unsaid (:func:`feeling_words`).
* ``instance_number`` - a mistake's fix "Move the egg from the encil 1 to the cabinet 3 before
  placing it on the dining table": a numbered instance is another place in the next episode
  (:func:`numbered_instances`).
* ``false_game_fact`` - thinks for "examine the pen with the desklamp": "Desklamps are usually in
  drawers" and "Desklamps are usually used to clean pens". Lamps stand on furniture and only
  light; each appliance does one transform (:func:`false_facts`). Also judged in skills and fixes.

The rules read the fields that tell the agent what to do (a skill's principle, a mistake's
how-to-avoid; ``feeling_reason`` also a skill's when-to-apply), and are measured on the shipped
banks in ``tests/pipeline/quality/test_gamefacts.py``.
"""
from __future__ import annotations

import re
from typing import Iterable

from pipeline.envs import webshop
from pipeline.quality.violation import Violation
from pipeline.quality import actions as act
from pipeline.quality import phrases

_PUT_INTO = frozenset({"in", "into", "on", "onto", "inside"})
_PRONOUNS = frozenset({"it", "them"})
_CLAUSE_END = frozenset({".", ",", ";", ":", "!", "?", "and", "then", "but", "so", "or", "before", "after",
                         "while", "because", "until"})


def _objects(known_nouns: Iterable[str]) -> set[str]:
    """Object kinds (not receptacles, not generic words) a text may name."""
    return (act.OBJECTS | {act.singular(n) for n in known_nouns}) - act.RECEPTACLES - {"object", "item", "target"}


def self_target(text: str, title: str = "", known_nouns: Iterable[str] = ()) -> str | None:
    """The object kind ``text`` puts in or on an object of the same kind, else ``None``.

    A put verb (:data:`pipeline.quality.actions.VERBS`: put, place, drop...) carries the object
    kinds named between it and its preposition (in, into, on, onto, inside); "it"/"them" stand
    for the last object kind named before the verb, or in ``title`` when the text names none
    ("Cool Vase"). Its destination is the first object or receptacle kind after the preposition,
    within three tokens. ``"take the vase and cool it before putting it in the vase"`` -> ``"vase"``;
    ``"put the pencil in the mug"`` -> ``None``. A receptacle kind as the destination never
    counts (putting a cabinet is no command)."""
    objects = _objects(known_nouns)
    tokens = act.tokenize(text)
    title_objects = [act.singular(t) for t in act.tokenize(title) if act.singular(t) in objects]
    for i, tok in enumerate(tokens):
        if act.VERBS.get(tok) != "put" or (i and tokens[i - 1] in ("the", "a", "an", "likely", "usual")):
            continue
        prep = next((j for j in range(i + 1, min(i + 7, len(tokens)))
                     if tokens[j] in _PUT_INTO or tokens[j] in _CLAUSE_END), None)
        if prep is None or tokens[prep] not in _PUT_INTO:
            continue
        dest = next((act.singular(t) for t in tokens[prep + 1:prep + 4]
                     if act.singular(t) in objects or t in act.RECEPTACLES), None)
        if dest is None or dest not in objects:
            continue
        carried = [act.singular(t) for t in tokens[i + 1:prep] if act.singular(t) in objects]
        if not carried and _PRONOUNS & set(tokens[i + 1:prep]):
            before = [act.singular(t) for t in tokens[:i] if act.singular(t) in objects]
            carried = before[-1:] or title_objects[-1:]
        if dest in carried:
            return dest
    return None


def self_target_violations(name: str, text: str, title: str = "", known_nouns: Iterable[str] = ()
                           ) -> list[Violation]:
    """``self_target`` of one field (``name``: the field in messages) (:func:`self_target`)."""
    kind = self_target(text, title, known_nouns)
    if kind is None:
        return []
    return [Violation("self_target", f"{name} puts the {kind} in or on a {kind}: the goal object is not its own "
                                     "target; name the receptacle the goal gives")]


#: Page elements a shopping skill may tell the agent to use that WebShop's text pages lack (their
#: clickables are :data:`pipeline.envs.webshop.PAGE_BUTTONS`, a product id and an option value).
#: Each pattern is the element as the thing operated: "dropdown option" (WebShop's options are
#: clickable values) and "hard filters in the query" (constraints, not a control) do not match.
MISSING_CONTROLS: dict[str, re.Pattern] = {e.name: re.compile(e.pattern)
                                           for e in phrases.entries("webshop_controls.toml", "control")}

#: Elements a skill may name for WebShop's option buttons ("choose the size from the drop-down",
#: "toggle the on-page filters (men, women)" in SkillRL's memories): they pass when their clause
#: names an option kind (:data:`OPTION_KINDS`).
OPTION_LIKE = frozenset({"drop-down", "menu", "filter", "checkbox"})
OPTION_KINDS = re.compile(r"\b(?:size|color|colour|style|flavou?r|scent|pack|count|fit|pattern|length|width|variant"
                          r"|options?)s?\b")
#: Qualifiers that make an option-like element a control WebShop lacks even when its clause names
#: an option kind: "the price range filter ..., then the size filter" is a price filter.
_NOT_OPTION = re.compile(r"\b(?:site|price|search|global|category|brand|rating|sidebar|result)s?\b")
#: A price range is never an option: a control that sets it is missing even beside a size.
_PRICE_RANGE = re.compile(r"\bprice\s+(?:range|bracket|band)s?\b")
#: Words that make the element something not to use ("do not re-filter", "avoid global filters").
_NEGATION = re.compile(r"\b(?:not|never|avoid|avoiding|without|no|don't|instead\s+of)\b")


#: A clause ends at ``. ! ? ; :`` before a space, but not at the dots of "e.g." and "i.e.".
_CLAUSE_END_MARK = re.compile(r"(?<![a-z]\.[a-z])[.!?;:](?=\s|$)")


def _clause_start(text: str, pos: int) -> int:
    """Where the clause holding ``text[pos]`` starts (just after the last clause end before it)."""
    ends = [m.end() for m in _CLAUSE_END_MARK.finditer(text, 0, pos)]
    return ends[-1] if ends else 0


_NEGATION_WINDOW = 40  # characters before an element searched for a :data:`_NEGATION` word (about 6 words)


def missing_controls(text: str) -> list[str]:
    """The names of :data:`MISSING_CONTROLS` that ``text`` tells the agent to use, in table order:
    an element matched (one of :data:`OPTION_LIKE` only when its clause names no option kind)
    with no negation (:data:`_NEGATION`) in the :data:`_NEGATION_WINDOW`
    characters before it in its clause: "do not re-filter the product" is advice against it, not
    an instruction; in "broader colors (e.g., red instead of blush) and narrow down with on-page
    filters" the "instead of" is too far to negate the filters."""
    low = (text or "").lower().replace("\u2019", "'")
    found = []
    for name, pattern in MISSING_CONTROLS.items():
        for m in pattern.finditer(low):
            clause = _clause_start(low, m.start())
            end = _CLAUSE_END_MARK.search(low, m.end())
            stop = end.start() if end else len(low)
            if (name in OPTION_LIKE and not _NOT_OPTION.search(m.group(0)) and not _PRICE_RANGE.search(low, clause, stop)
                    and OPTION_KINDS.search(low, clause, stop)):
                continue
            if not _NEGATION.search(low, max(clause, m.start() - _NEGATION_WINDOW), m.start()):
                found.append(name)
                break
    return found


def control_violations(name: str, text: str) -> list[Violation]:
    """``missing_control`` of one field of a WebShop item (:func:`missing_controls`)."""
    names = missing_controls(text)
    if not names:
        return []
    return [Violation("missing_control", f"{name} tells the agent to use {', '.join(names)}, which WebShop pages do "
                                         "not have: they offer search[...] and click[...] on a product id, an option "
                                         f"or {', '.join(webshop.PAGE_BUTTONS)}")]


#: The agent's feelings a skill may give as the reason for a rule ("overwhelming" is left out:
#: SkillRL writes "an overwhelming result set" of the page; "discourage" and "stress" are verbs
#: there: "metrics that discourage repeating", "stress the key attribute").
FEELINGS = re.compile(r"\b(?:" + phrases.alternation("feelings.toml", "feeling") + r")\b")  # data/feelings.toml

#: Words that make what follows a reason or a consequence ("as this may lead to confusion",
#: "to avoid frustration"); a feeling without one ("when confused, re-read the goal") is a state
#: the rule applies in, not its reason.
_CAUSE = re.compile(r"\b(?:as|because|since|lead|leads|leading|cause|causes|causing|result|results|resulting|avoid"
                    r"|avoids|avoiding|prevent|prevents|preventing|reduce|reduces|reducing|minimi[sz]e|otherwise)\b")
#: "confusion between two cabinets", "confusing the 5x with the 5x-large" are factual mix-ups.
_MIX_UP = re.compile(r"\s+(?:between|with|about|of)\b|(?:\s+\S+){1,3}\s+with\b")
_CAUSE_WINDOW = 60  # characters before a feeling word searched for a :data:`_CAUSE` word (about 10 words)


def feeling_words(text: str) -> list[str]:
    """The feelings ``text`` gives as a reason (:data:`FEELINGS` after a :data:`_CAUSE` word in
    the same clause, at most :data:`_CAUSE_WINDOW` characters before it), in order; a mix-up
    ("confusing the 5x with 5x-large", "confusion between two drawers") is not one."""
    low = (text or "").lower()
    out = []
    for m in FEELINGS.finditer(low):
        if m.group(0).startswith("confus") and _MIX_UP.match(low, m.end()):
            continue
        start = max(_clause_start(low, m.start()), m.start() - _CAUSE_WINDOW)
        if _CAUSE.search(low, start, m.start()):
            out.append(m.group(0))
    return out


def feeling_violations(name: str, text: str) -> list[Violation]:
    """``feeling_reason`` of one field (:func:`feeling_words`).

    Quarantines (not a flag) although the advice beside it may be sound: a skill bank is prompt
    text the trained agent reads at every step, and a feeling given as the reason teaches a
    cause the game does not have (the episode's cost is steps against the limit, which the item
    leaves unsaid); thinks written from such a prompt repeat it. A bank loses little: the sound
    advice comes back in another item or in the repair round. ``quality.flag_rules:
    [feeling_reason]`` makes it a count only."""
    words = feeling_words(text)
    if not words:
        return []
    return [Violation("feeling_reason", f"{name} gives the agent's feelings ({', '.join(dict.fromkeys(words))}) as "
                                        "a reason; give what happens in the game instead (steps lost, an object "
                                        "missed)")]


#: The actions each ALFWorld task category takes in a successful episode (its PDDL goal and the
#: game's commands): every category goes, opens, closes, examines and takes; a put ends every one
#: but look-at-in-light (which ends with ``use desklamp``); a transform belongs to its own
#: category only. ``use`` is free everywhere ("use the microwave to heat").
_COMMON = frozenset({"go", "open", "close", "examine", "search", "take", "use"})
CATEGORY_ACTIONS: dict[str, frozenset[str]] = {
    "pick_and_place": _COMMON | {"put"}, "pick_two_obj_and_place": _COMMON | {"put"},
    "look_at_obj_in_light": _COMMON,
    "heat": _COMMON | {"put", "heat"}, "cool": _COMMON | {"put", "cool"}, "clean": _COMMON | {"put", "clean"}}
#: "transform" is no command of the game, but a skill that says it prescribes heat, cool or clean.
_TRANSFORM = re.compile(r"\btransform(?:s|ing)?\b", re.I)
_STEP_VERBS = frozenset({"put", "heat", "cool", "clean"})


def foreign_actions(text: str, category: str) -> list[str]:
    """The actions ``text`` prescribes (present-tense verbs of :data:`actions.VERBS`, and
    "transform") that no successful episode of ALFWorld ``category`` takes, distinct, in order;
    ``[]`` for a category outside :data:`CATEGORY_ACTIONS`. Past forms are states, not steps
    ("if the goal says heated, cooled or cleaned")."""
    allowed = CATEGORY_ACTIONS.get(category)
    if allowed is None:
        return []
    found = [m.concept for m in act.text_mentions(text) if not m.past and m.concept in _STEP_VERBS]
    found += ["transform"] * bool(_TRANSFORM.search(text or ""))
    return list(dict.fromkeys(c for c in found if c not in allowed))


def category_violations(name: str, text: str, category: str) -> list[Violation]:
    """``wrong_category`` of one task-specific skill's principle (:func:`foreign_actions`).

    Seen in the 1.5B teacher's bank: "Move Object to Target Receptacle: ... take the object, then
    go to the target receptacle and place it there" filed under look_at_obj_in_light, and
    "Transform Before Placing" under pick_and_place. The bank shows a category's skills in every
    prompt of that category, so an agent reads there a step its task never takes (a look-at
    episode that puts the object down has dropped what it must hold under the lamp)."""
    bad = foreign_actions(text, category)
    if not bad:
        return []
    return [Violation("wrong_category", f"{name} prescribes {', '.join(bad)}, which no {category} episode does; "
                                        f"its steps are {', '.join(sorted(CATEGORY_ACTIONS[category]))}")]


#: "from your inventory", "in the inventory": where an ALFWorld skill says a thing is held.
_INVENTORY = re.compile(r"\b(?:from|in|out\s+of|inside)\s+(?:your|the|my|its|their)\s+inventory\b")
#: Words between a verb and its object that do not name the object ("take the lamp").
_ARTICLES = frozenset({"the", "a", "an", "your", "its", "up"})


def fixed_things(text: str) -> list[str]:
    """What an ALFWorld skill tells the agent to carry that the game never lets it pick up, in
    order: a receptacle, lamp or appliance right after a take ("pick up the desklamp"), or
    anything used "from your inventory" in the same clause ("use the appropriate tool from your
    inventory": the game's ``use`` toggles a lamp where it stands and nothing else is used).
    Carrying the goal object is fine ("the mug is in your inventory")."""
    low = (text or "").lower()
    tokens = act.tokenize(low)
    found = []
    for m in act.text_mentions(low):
        if m.concept != "take" or m.past:
            continue
        nxt = next((t for t in tokens[m.pos + 1:m.pos + 4] if t not in _ARTICLES), "")
        if act.singular(nxt) in act.RECEPTACLES:
            found.append(act.singular(nxt))
    for hit in _INVENTORY.finditer(low):
        clause = low[_clause_start(low, hit.start()):hit.start()]
        used = [m for m in act.text_mentions(clause) if m.concept == "use" and not m.past]
        if used:
            found.append(" ".join(act.tokenize(clause)[used[-1].pos:]) + " " + hit.group(0))
    return list(dict.fromkeys(found))


def fixed_violations(name: str, text: str) -> list[Violation]:
    """``not_portable`` of one field of an ALFWorld skill or fix (:func:`fixed_things`). Seen in
    the 1.5B teacher's bank: "Use Desklamp: When the goal asks for a desklamp, use the desklamp
    from your inventory." An agent that follows it tries ``take desklamp 1``, which the game
    refuses, instead of going to the lamp with the object in hand."""
    bad = fixed_things(text)
    if not bad:
        return []
    return [Violation("not_portable", f"{name} has the agent carry or use from its inventory what ALFWorld never "
                                      f"lets it pick up ({'; '.join(bad)}): lamps, appliances and receptacles stay "
                                      "where they are; go to them with the object in hand")]


#: What each fixed tool of ALFWorld does: the transform concepts (:data:`pipeline.quality.actions.VERBS`)
#: it serves. A lamp only lights (``use``); the microwave and the stoveburner heat, the fridge
#: cools, the sinkbasin cleans (the game's tasks; :data:`pipeline.quality.actions.TRANSFORM_TOOLS`).
TOOL_DOES = {"desklamp": {"use"}, "floorlamp": {"use"}, "lamp": {"use"}, "microwave": {"heat"},
             "stoveburner": {"heat"}, "stove": {"heat"}, "fridge": {"cool"}, "sinkbasin": {"clean"}, "sink": {"clean"}}
_TRANSFORMS = frozenset({"heat", "cool", "clean"})
#: A lamp said to be kept inside a container ("Desklamps are usually in drawers"): ALFWorld's lamps
#: stand on desks, dressers and side tables, and the agent cannot put one anywhere.
_LAMP = r"\b(?:desk\s?|floor\s?)?lamps?\b"
_LAMP_STORED = re.compile(_LAMP + r"[^.;!?]{0,40}?\b(?:(?:in|inside)\s+(?:a\s+|an\s+|the\s+)?"
                          r"(drawers?|cabinets?|box(?:es)?|safes?|fridges?)|on\s+(?:a\s+|the\s+)?(drawers?))\b", re.I)
#: A lamp taken out of a container ("I need to first get the desklamp out of the drawer"): the same
#: false fact told as an action; only right after the lamp's name, so "the desklamp ... the pen I
#: took out of the drawer" is not read as one.
_LAMP_TAKEN_OUT = re.compile(_LAMP + r"(?:\s+\d+)?\s+(?:out\s+of|from)\s+(?:a\s+|an\s+|the\s+)?"
                             r"(drawers?|cabinets?|box(?:es)?|safes?|fridges?)\b", re.I)
#: A receptacle said to be usually found somewhere ("Drawers are usually on the shelves",
#: "Fridges are usually on countertops": the teacher's "<object>s are usually in <place>" with a
#: place as the object). The game's receptacles are the places the agent goes to, never things
#: kept in or on another; lamps have their own rules.
_PLACE_FOUND = re.compile(r"\b([a-z]+)\s+(?:are|is)\s+(?:usually|often|typically|normally|mostly|commonly|generally)"
                          r"\s+(?:found\s+|kept\s+|located\s+|placed\s+|stored\s+)?(?:in|on|inside|under|near)\b", re.I)
#: A lamp said to show what a receptacle holds, or used to search ("use a desklamp to illuminate
#: it and observe its contents" "when looking for an object"): the game's lamp only lights the
#: object the agent holds, to examine it; contents are seen by going to or opening a receptacle.
_LAMP_REVEALS = re.compile(_LAMP + r"[^.;!?]{0,80}?\bcontents\b", re.I)
_LAMP_SEARCHES = re.compile(
    r"\b(?:looking\s+for|searching(?:\s+for)?|to\s+find|while\s+search\w*)\s+(?!(?:a\s+|an\s+|the\s+)?"
    + _LAMP + r")(?:(?!\bthen\b|\band\b)[^.;!?]){0,60}?\buse\s+(?:a\s+|an\s+|the\s+)?" + _LAMP
    + r"|\buse\s+(?:a\s+|an\s+|the\s+)?" + _LAMP + r"[^.;!?]{0,40}?\bto\s+(?:search|find|look\s+for)\b", re.I)
#: Rooms: an ALFWorld episode takes place in one room, and ``go to`` reaches its receptacles. A
#: think or skill that moves the agent to a room ("I will go back to the kitchen to look for it"),
#: or lists several rooms to search ("Look in the kitchen, living room, bathroom, and other common
#: areas", the teacher's skill, which its thinks then followed), describes another game. Looking
#: "around the kitchen" it stands in is right (an ETO thought).
_ROOM = "(?:" + phrases.alternation("alfworld_facts.toml", "room") + ")"  # data/alfworld_facts.toml, table room
_TO_ROOM = re.compile(r"\b(?:go(?:es|ing)?|went|head(?:s|ing)?|mov(?:e|es|ing)|return(?:s|ing)?|walk(?:s|ing)?)"
                      r"\s+(?:back\s+)?(?:to|into)\s+(?:the\s+|a\s+|another\s+)?" + _ROOM + r"\b", re.I)
_ROOM_WORD = re.compile(r"\b" + _ROOM + r"\b", re.I)
#: Another room to go to: "I need to go to another room to get the password" (the 1.5B teacher).
_OTHER_ROOM = re.compile(r"\b(?:another|other|next|different)\s+rooms?\b", re.I)
#: Locks and codes: the game's receptacles open with ``open``, nothing is locked ("I can't open it
#: without knowing the password", the 1.5B teacher). No recorded ALFWorld thought names one.
_LOCK = re.compile(r"\b(?:" + phrases.alternation("alfworld_facts.toml", "lock") + r")\b", re.I)

#: "take it to the fridge and wait until it is cold", "place the pan inside to let it cool down": the
#: game has no waiting; its heat, cool and clean commands change the object at once.
_WAIT = re.compile(r"\b(?:" + phrases.alternation("alfworld_facts.toml", "wait") + r")\b", re.I)
_FOR_TO = frozenset({"for", "to"})
#: Words between the tool and its purpose that deny it: "not suitable for cooling" is right.
_DENIED = frozenset({"not", "never", "no", "t", "cannot", "nor", "unsuitable", "useless"})


def false_facts(text: str) -> list[str]:
    """The game facts an ALFWorld think (or skill) gets wrong, in order: a lamp kept inside a
    container or on a drawer (:data:`_LAMP_STORED`, :data:`_LAMP_TAKEN_OUT`), a receptacle said to be usually found
    somewhere (:data:`_PLACE_FOUND`), a lamp that shows contents or is used to search
    (:data:`_LAMP_REVEALS`, :data:`_LAMP_SEARCHES`), a room to go to or several rooms in one sentence
    (:data:`_TO_ROOM`, :data:`_OTHER_ROOM`: the game is one room), a lock or password
    (:data:`_LOCK`), a wait for the object to change (:data:`_WAIT`: "wait until it is cold", the
    teacher's cool skill), a transform done at a place that cannot do it ("heat it on
    the dining table", :func:`_transform_place`), a receptacle heated, cooled or cleaned ("To heat the fridge,
    locate the fridge") or used when it is no lamp or appliance ("Use the toilet after using a
    bathroom": the game's ``use`` only switches a lamp on), and a fixed tool given a transform it does not do ("desklamps
    are used to clean pens", "the fridge to heat it"), unless the clause denies it ("not suitable
    for cooling") or also names the tool that does it ("take the mug from the fridge to heat it in
    the microwave")."""
    low = (text or "").lower()
    found = [f"a lamp kept in {m.group(1) or m.group(2)}" for m in _LAMP_STORED.finditer(low)]
    found += [f"a lamp kept in {m.group(1)}" for m in _LAMP_TAKEN_OUT.finditer(low)]
    found += [f"a {act.singular(m.group(1))} found somewhere" for m in _PLACE_FOUND.finditer(low)
              if act.singular(m.group(1)) in act.RECEPTACLES - {"desklamp", "floorlamp"}]
    found += [fact for fact, pattern in (("a lamp that shows contents", _LAMP_REVEALS),
                                         ("a lamp used to search", _LAMP_SEARCHES),
                                         ("a room to go to", _TO_ROOM), ("another room", _OTHER_ROOM),
                                         ("a lock", _LOCK), ("a wait for a transform", _WAIT))
              if pattern.search(low)]
    if any(len({" ".join(r.split()) for r in _ROOM_WORD.findall(sent)}) > 1 for sent in re.split(r"[.;!?]", low)):
        found.append("several rooms")
    tokens = act.tokenize(low)  # tokenize and text_mentions join two-word names themselves
    for m in act.text_mentions(low):
        # the thing acted on right after the verb: "heat the fridge", "use the toilet"
        nxt = next((t for t in tokens[m.pos + 1:m.pos + 3] if t not in _ARTICLES), "")
        thing = act.singular(nxt)
        if thing in act.RECEPTACLES and (m.concept in _TRANSFORMS or (m.concept == "use" and thing not in TOOL_DOES)):
            found.append(f"{tokens[m.pos]} the {thing}")
        # where the transform happens: "heat it on the dining table" (the teacher's "Heat Egg on Dining Table")
        if m.concept in _TRANSFORMS and not m.past and (place := _transform_place(tokens, m.pos)) \
                and place in act.RECEPTACLES and m.concept not in TOOL_DOES.get(place, ()):
            found.append(f"{tokens[m.pos]} it at the {place}")
    for j, tok in enumerate(tokens):
        tool = act.singular(tok)
        if tool not in TOOL_DOES:
            continue
        # a comma ends the tool's clause too: "before putting it in the fridge, I need to heat it" is no fridge that heats
        end = next((q for q in range(j + 1, len(tokens)) if tokens[q] in (".", ";", "!", "?", ",")), len(tokens))
        clause = tokens[j + 1:min(end, j + 9)]
        for q in range(1, len(clause)):
            concept = act.VERBS.get(clause[q])
            if clause[q - 1] in _FOR_TO and concept in _TRANSFORMS and concept not in TOOL_DOES[tool] \
                    and not set(clause[:q - 1]) & _DENIED \
                    and not any(act.singular(t) in act.TRANSFORM_TOOLS[concept] for t in tokens[max(0, j - 8):end]):
                found.append(f"the {tool} {clause[q - 1]} {clause[q]}")
                break
    return list(dict.fromkeys(found))


_AT = frozenset({"in", "on", "at", "inside", "using", "with"})


def _transform_place(tokens: list[str], pos: int) -> str:
    """The receptacle a transform verb at ``pos`` names as where it happens ("heat it on the
    dining table" -> ``diningtable``): the first word after ``in``/``on``/``at``/``using``/``with``
    within the next six words of its clause, articles skipped; "" when none."""
    for q in range(pos + 1, min(pos + 7, len(tokens) - 1)):
        if tokens[q] in _CLAUSE_END:
            return ""
        if tokens[q] in _AT:
            return act.singular(next((t for t in tokens[q + 1:q + 3] if t not in _ARTICLES), ""))
    return ""


def false_fact_violations(name: str, text: str) -> list[Violation]:
    """``false_game_fact`` of one ALFWorld text (:func:`false_facts`). Seen in the 1.5B teacher's
    thinks for "examine the pen with the desklamp": "Desklamps are usually in drawers, so I will
    look at drawer 2." and "Desklamps are usually used to clean pens." A policy trained on them
    searches drawers for a lamp and believes lamps clean things."""
    bad = false_facts(text)
    if not bad:
        return []
    return [Violation("false_game_fact", f"{name} states what ALFWorld contradicts ({'; '.join(bad)}): lamps stand on "
                                         "furniture and only light; the microwave heats, the fridge cools, the "
                                         "sinkbasin cleans, each at once; an episode is one room")]


_NUMBERED = re.compile(r"\b([a-z]+)\s+(\d+)\b")


def numbered_instances(text: str) -> list[str]:
    """The numbered ALFWorld instances a skill or fix names ("cabinet 3", "pencil 1"), in order:
    a receptacle or object kind (:data:`pipeline.quality.actions.RECEPTACLES`, ``OBJECTS``)
    followed by a number. Numbers change from one episode to the next."""
    low = act.join_names((text or "").lower())
    return list(dict.fromkeys(f"{m.group(1)} {m.group(2)}" for m in _NUMBERED.finditer(low)
                              if act.singular(m.group(1)) in act.RECEPTACLES | act.OBJECTS))


def instance_violations(name: str, text: str) -> list[Violation]:
    """``instance_number`` of one field of an ALFWorld skill or fix (:func:`numbered_instances`).
    Seen in the 1.5B teacher's mistakes: "Move the egg from the encil 1 to the cabinet 3 before
    placing it on the dining table." A bank item is reused in other episodes, where cabinet 3 is
    another cabinet or none; SkillRL's 162 items name no instance."""
    named = numbered_instances(text)
    if not named:
        return []
    return [Violation("instance_number", f"{name} names {', '.join(named)}: numbers differ in every episode; say "
                                         "which kind of place or object, and why")]


# --- TextWorld Express -------------------------------------------------------------------------

#: ``false_game_fact`` (TextWorld): "look around" told as a way to find or check something. In
#: TextWorld Express a room's whole description (objects, closed containers, exits) is printed on
#: entering it, and ``look around`` prints the same text again: it finds nothing and costs a step.
#: Every TextWorld bank the 1.5B teacher built from coin games prescribed it ("Before moving into a
#: new room, look around to ensure there are no hidden objects or obstacles", "Look around before
#: moving north.", "The agent should look around the current room to find objects or clues."). An
#: "inventory" of the room is the same mistake: ``inventory`` lists what the agent carries ("inventory
#: the room to see what objects are available", "inventory all the items in the current room": the
#: teacher's general coin skills).
_LOOK_AROUND = re.compile(phrases.alternation("textworld_facts.toml", "look_around"))  # data/textworld_facts.toml

#: ``episode_specific`` (TextWorld): a compass direction. Each game draws its own map, so "try
#: moving east first" or "Move south or west to explore the pantry" (the teacher's coin bank) is
#: one episode's route, wrong in the next game.
_COMPASS = re.compile(r"\b(?:north|south|east|west)(?:ward|wards|ern)?\b")


def _unnegated(pattern: re.Pattern, text: str) -> list[str]:
    """Matches of ``pattern`` in lower-cased ``text`` with no :data:`_NEGATION` word in the
    :data:`_NEGATION_WINDOW` characters before them in their clause, after its last comma ("instead
    of looking around" is advice against it; in "If the object is not found, try looking around"
    the "not" belongs to the condition)."""
    low = (text or "").lower().replace("\u2019", "'")
    out = []
    for m in pattern.finditer(low):
        clause = max(_clause_start(low, m.start()), low.rfind(",", 0, m.start()) + 1)
        if not _NEGATION.search(low, max(clause, m.start() - _NEGATION_WINDOW), m.start()):
            out.append(m.group(0))
    return out


#: ``false_game_fact`` (TextWorld): an obstacle, or a colour or texture to look at. Rooms hold no
#: obstacles and objects are only named, so neither can be checked ("Quickly Identify Obstacles:
#: ... by looking at its color or texture", the GRPO skill updater after failed put-away games).
_NO_SUCH_THING = re.compile(phrases.alternation("textworld_facts.toml", "no_such_thing"))  # data/textworld_facts.toml

#: ``false_game_fact`` (TextWorld): something that blocks the agent's path, in an item that names no
#: door. Only a closed door stops a move in TextWorld Express; the 1.5B teacher wrote "check your
#: inventory to ensure you don't have any objects that could block your path" (its worked skill
#: about inventory, bent), and the student trained on its thinks looked around instead of moving.
_BLOCKED_PATH = re.compile(r"\bblock(?:s|ed|ing)?\s+(?:(?:your|the|its|my|their|his|her|a|an|our)\s+)?"
                           r"(?:path|way|exit|route|passage)s?\b")

#: Words right before a blocked path that deny it ("nothing blocks your path"). The general
#: negation window would also pass "don't have any objects that could block your path", where the
#: negation belongs to another verb.
_NOTHING_BLOCKS = re.compile(r"\b(?:nothing|never|not|no\s+\w+)\s+(?:(?:can|could|will|would)\s+)?$")


def _blocked_path(text: str) -> str:
    """The first blocked-path phrase of ``text`` (:data:`_BLOCKED_PATH`) that no word right before
    it denies, when ``text`` names no door; else ''."""
    low = (text or "").lower()
    if "door" in low:
        return ""
    for m in _BLOCKED_PATH.finditer(low):
        if not _NOTHING_BLOCKS.search(low, max(0, m.start() - 24), m.start()):
            return m.group(0)
    return ""


def textworld_violations(name: str, text: str) -> list[Violation]:
    """TextWorld Express rules of one field of a skill or mistake: ``false_game_fact`` for a
    ``look around`` it prescribes (:data:`_LOOK_AROUND`), an obstacle, colour or texture to check
    (:data:`_NO_SUCH_THING`) or a blocked path in an item without a door (:data:`_BLOCKED_PATH`),
    ``episode_specific`` for a compass direction it prescribes (:data:`_COMPASS`); negated
    mentions pass ("do not look around again")."""
    out = []
    if _unnegated(_LOOK_AROUND, text):
        out.append(Violation("false_game_fact", f"{name} {text[:60]!r} has the agent look around (or take an "
                                                "inventory of the room) to find something: a TextWorld room's whole "
                                                "description is shown on entering it, look around only repeats it and "
                                                "inventory lists what the agent carries"))
    if blocked := _blocked_path(text):
        out.append(Violation("false_game_fact", f"{name} {text[:60]!r} has something {blocked!r}: in TextWorld "
                                                "Express only a closed door stops a move; objects, carried or seen, "
                                                "never block one"))
    if things := _unnegated(_NO_SUCH_THING, text):
        out.append(Violation("false_game_fact", f"{name} {text[:60]!r} has the agent check {things[0]!r}: TextWorld "
                                                "Express rooms hold no obstacles and its objects have no colour or "
                                                "texture to look at"))
    if dirs := _unnegated(_COMPASS, text):
        out.append(Violation("episode_specific", f"{name} {text[:60]!r} prescribes the direction {dirs[0]!r}: each "
                                                 "TextWorld game has its own map; say how to choose an exit instead"))
    return out


#: ``false_game_fact`` (TextWorld): a door, key or lock the item relies on, as ``(word pattern, the
#: word an observation must hold)``. TextWorld Express draws doors only with ``includeDoors=1``, and
#: keys and locks only in some games; an item about them is true only where the games it was
#: learnt from have them. The 1.5B teacher wrote "if you have a key and a door, use the key to open
#: the door" and "The agent tries to move north when there is a closed door blocking its exit" from
#: coin games without a door (its prompt's worked skill was then about opening doors).
_GAME_THINGS = ((re.compile(r"\bdoors?(?:ways?)?\b"), "door"), (re.compile(r"\bkeys?\b"), "key"),
                (re.compile(r"\b(?:un)?lock(?:s|ed|ing)?\b"), "lock"))


def unseen_things(text: str, seen: str) -> list[str]:
    """Doors, keys and locks (:data:`_GAME_THINGS`) that ``text`` names and the lower-cased source
    text ``seen`` (the games' observations and admissible actions) never mentions; negated
    mentions count too ("without a key" still assumes there are keys)."""
    low = (text or "").lower()
    return [word for pattern, word in _GAME_THINGS if pattern.search(low) and word not in seen]


def unseen_violations(name: str, text: str, seen: str) -> list[Violation]:
    """``false_game_fact`` of one field of a TextWorld skill or mistake that names a door, key or
    lock no source game shows (:func:`unseen_things`); ``seen`` empty (no source game): none."""
    if not seen:
        return []
    return [Violation("false_game_fact", f"{name} {text[:60]!r} is about a {w}, but no observation of the games it "
                                         f"was learnt from shows one: name only what these games have")
            for w in unseen_things(text, seen)]

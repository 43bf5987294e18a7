"""A bank item's instructions checked against the environment's own action set.

An agent can only follow advice with the commands its environment accepts. ALFWorld's grammar
(``alfred.twl2``: go to, open, close, take, put/move, heat, cool, clean, slice, use, examine,
look, inventory), WebShop's two (``search[...]``, ``click[...]`` on the page's buttons: results,
options, Description, Features, Reviews, Buy Now, Back to Search, Next/Prev) and TextWorld
Express' (move, go, open, close, take, put, look, inventory, examine, read, eat, cook, ...) are
all there is: "wait for the food to heat", "filter by price", "add it to the cart", "set the
microwave's power" ask for something no command does.

An *instruction verb* is the first word of a clause of the item's instruction fields (principle,
when-to-apply, how-to-avoid: split at sentence ends, semicolons, commas and "then"/"and"), or the
word after "to" (infinitive). Each is looked up: a command of the env (with its usual synonyms:
grab = take, place = put, warm = heat, wash = clean), a thinking verb any agent can do (check,
find, make sure, read...), or an action of :data:`WORLD_ACTIONS` that the env lacks -- *foreign*.
Words that are none of these (nouns, adjectives) are ignored.
"""
from __future__ import annotations

import re
from typing import Any

#: What any agent can do in any env: look for, read, decide, remember (no command needed, or the
#: env's look/examine/search covers it).
THINKING = frozenset("""check find locate search look explore examine inspect read identify note notice remember
verify ensure confirm consider plan think keep avoid focus prioritize prioritise follow complete try make compare
choose decide determine recall review observe pay start begin continue repeat stop proceed return revisit
navigate visit head go move walk""".split())

#: Commands of each env with their usual synonyms (module docstring).
ENV_ACTIONS: dict[str, frozenset[str]] = {
    "alfworld": frozenset("""take pick grab get collect retrieve obtain fetch put place drop set leave deposit
open close heat warm microwave cool chill refrigerate freeze clean wash rinse slice cut use turn switch toggle
examine inventory bring carry hold""".split()),
    "webshop": frozenset("""search click select choose buy purchase order open browse scan view type enter
query refine back""".split()),
    "textworld": frozenset("""take pick grab get collect put place drop open close unlock lock eat cook chop slice
read examine inventory go move walk enter exit""".split()),
    "search": frozenset("""search query look answer submit""".split()),
}

#: Actions in the world or on a web page; a verb here that its env lacks is foreign (module docstring).
WORLD_ACTIONS = frozenset("""wait pause sit stand sleep rest idle wake call ask tell talk speak shout
drag scroll zoom swipe tap press push pull hover refresh reload bookmark login log sign register subscribe
filter sort add checkout pay cancel return refund contact message email share download upload print save
adjust set configure tune calibrate preheat boil fry bake roast grill steam fill pour empty drain dry wipe
scrub plug unplug charge throw toss kick break smash climb jump run fly swim dig plant water feed
heat cool clean slice cut chop cook eat drink unlock lock open close take put place drop use turn switch
toggle buy purchase order click select choose""".split())

_CLAUSE = re.compile(r"[.;:!?,()]|\b(?:then|and|or|but|before|after|when|while|until|if|so)\b", re.I)
_WORD = re.compile(r"[A-Za-z][a-z]+")
_TO_VERB = re.compile(r"\bto\s+([a-z]+)", re.I)
INSTRUCTION_FIELDS = ("title", "principle", "when_to_apply", "how_to_avoid")


def _base(word: str) -> str:
    """A crude lemma: lower case, ``-ing``/``-s`` stripped when the stem is a known verb."""
    w = word.lower()
    stems = [w[:-3], w[:-3] + "e", w[:-4]] if w.endswith("ing") else []  # taking, putting
    stems += [w[:-1], w[:-2]] if w.endswith("s") else []                 # takes, washes
    for stem in stems:
        if stem in WORLD_ACTIONS or stem in THINKING:
            return stem
    return w


def instruction_verbs(item: dict[str, Any]) -> list[str]:
    """The instruction verbs of ``item`` (module docstring), lemmatised, in text order."""
    out = []
    for f in INSTRUCTION_FIELDS:
        text = str(item.get(f) or "")
        for clause in _CLAUSE.split(text):
            words = _WORD.findall(clause or "")
            if words:
                out.append(_base(words[0]))
        out += [_base(m.group(1)) for m in _TO_VERB.finditer(text)]
    return out


def foreign_actions(item: dict[str, Any], env: str) -> list[str]:
    """Instruction verbs of ``item`` that are actions of :data:`WORLD_ACTIONS` its env ``env`` has
    no command for (module docstring). An env without an action set has none."""
    allowed = ENV_ACTIONS.get(env)
    if allowed is None:
        return []
    return [v for v in instruction_verbs(item) if v in WORLD_ACTIONS and v not in allowed and v not in THINKING]


def foreign_share(item: dict[str, Any], env: str) -> float:
    """Share of ``item``'s action verbs (those the env has, thinking verbs, and foreign ones) that
    are foreign: 0 when it asks for nothing the env lacks, 1 when it asks only for what it lacks."""
    allowed = ENV_ACTIONS.get(env)
    if allowed is None:
        return 0.0
    verbs = [v for v in instruction_verbs(item) if v in WORLD_ACTIONS or v in allowed or v in THINKING]
    foreign = foreign_actions(item, env)
    return len(foreign) / len(verbs) if verbs else 0.0

"""Action concepts: the verbs of an environment's command grammar, found in commands and in prose.

Several content rules compare what an LLM *says* about actions with what the agent *did*. Both
sides are reduced to **mentions** ``(concept, nouns)``: ``concept`` is a verb of the command
grammar (``go``, ``take``, ``put``, ``open``, ``close``, ``heat``, ``cool``, ``clean``, ``use``,
``examine``; WebShop ``search``, ``click``, ``buy``) and ``nouns`` the object and receptacle kinds
it acts on, instance numbers dropped.

* a recorded command maps by its first word (:func:`command_mention`): ``"cool vase 1 with
  fridge 1"`` -> ``("cool", ("vase", "fridge"))``; ``"click[Buy Now]"`` -> ``("buy", ())``;
* prose maps each verb form or synonym to its concept (:data:`VERBS`, :func:`text_mentions`):
  ``"go to the fridge before taking the vase"`` -> ``[("go", ("fridge",)), ("take", ("vase",))]``.

The grammar is ALFWorld's (``alfworld/gen/planner/domains`` PDDL actions as exposed by its text
interface: ``go to``, ``take X from Y``, ``put X in/on Y``, ``open``, ``close``, ``heat X with
Y``, ``cool X with Y``, ``clean X with Y``, ``use``, ``examine``), which TextWorld's cooking
games share for their movement and container verbs, and WebShop's two commands ``search[...]`` /
``click[...]`` (``Buy Now`` is its purchase). The synonym list is ours: the words the samples'
models use for those verbs.
"""
from __future__ import annotations

import re
from typing import Iterable, NamedTuple

#: Word form (lower case) -> concept. Past tense and participles included, since the rules tell
#: a claim about the past from an intention (:data:`PAST_FORMS`).
VERBS: dict[str, str] = {}
PAST_FORMS: set[str] = set()


def _verb(concept: str, base: Iterable[str], past: Iterable[str], other: Iterable[str] = ()) -> None:
    for w in base:
        VERBS[w] = concept
    for w in past:
        VERBS[w] = concept
        PAST_FORMS.add(w)
    for w in other:
        VERBS[w] = concept


_verb("go", ["go", "goes", "navigate", "navigates", "move", "moves", "walk", "walks", "head", "heads",
             "travel", "travels", "visit", "visits", "return", "returns", "proceed", "proceeds", "locate", "locates", "carry", "carries", "bring", "brings"],
      ["went", "gone", "navigated", "moved", "walked", "headed", "traveled", "travelled", "visited", "returned",
       "proceeded", "carried", "brought"],
      ["going", "navigating", "moving", "walking", "heading", "traveling", "travelling", "visiting", "returning",
       "proceeding", "locating", "carrying", "bringing"])
_verb("take", ["take", "takes", "pick", "picks", "grab", "grabs", "collect", "collects", "acquire", "acquires",
               "retrieve", "retrieves", "obtain", "obtains"],
      ["took", "taken", "picked", "grabbed", "collected", "acquired", "retrieved", "obtained"],
      ["taking", "picking", "grabbing", "collecting", "acquiring", "retrieving", "obtaining"])
_verb("put", ["put", "puts", "place", "places", "drop", "drops", "deposit", "deposits"],
      ["placed", "dropped", "deposited"], ["putting", "placing", "dropping", "depositing"])
_verb("open", ["open", "opens"], ["opened"], ["opening"])
_verb("close", ["close", "closes"], ["closed"], ["closing"])
_verb("heat", ["heat", "heats", "warm", "warms"], ["heated", "warmed", "microwaved"],
      ["heating", "warming"])
_verb("cool", ["cool", "cools", "chill", "chills", "refrigerate", "refrigerates"], ["cooled", "chilled", "refrigerated"],
      ["cooling", "chilling"])
_verb("clean", ["clean", "cleans", "wash", "washes", "rinse", "rinses"], ["cleaned", "washed", "rinsed"],
      ["cleaning", "washing", "rinsing"])
_verb("use", ["use", "uses", "switch", "switches", "turn", "turns", "toggle", "toggles"],
      ["used", "switched", "turned", "toggled"], ["using", "switching", "turning", "toggling"])
_verb("examine", ["examine", "examines", "inspect", "inspects"], ["examined", "inspected"],
      ["examining", "inspecting"])
_verb("search", ["search", "searches"], ["searched"], ["searching"])
_verb("click", ["click", "clicks", "select", "selects", "choose", "chooses"], ["clicked", "selected", "chose", "chosen"],
      ["clicking", "selecting", "choosing"])
_verb("buy", ["buy", "buys", "purchase", "purchases"], ["bought", "purchased"], ["buying", "purchasing"])

#: Receptacle and appliance kinds of ALFWorld scenes (its ``OBJECTS``/``RECEPTACLES`` lists, the
#: ones that occur in the samples and the SkillRL memories), plus the generic words a skill uses
#: for them.
RECEPTACLES = frozenset("""
armchair bathtubbasin bathtub bed cabinet cart coffeemachine coffeetable countertop desk diningtable
drawer dresser fridge garbagecan handtowelholder laundryhamper microwave ottoman safe shelf sidetable
sinkbasin sink sofa stoveburner stove toaster toilet toiletpaperhanger towelholder tvstand desklamp floorlamp
""".split())
#: Object kinds of ALFWorld scenes (its pickupable ``OBJECTS``), so that prose naming another
#: object than the one acted on is noticed even when the episode never mentions it.
OBJECTS = frozenset("""
alarmclock apple baseballbat basketball book bowl box bread butterknife candle cd cellphone cloth creditcard
cup dishsponge egg fork glassbottle handtowel kettle keychain knife ladle laptop lettuce mug newspaper pan
pen pencil peppershaker pillow plate plunger pot potato remotecontrol saltshaker scrubbrush soapbar
soapbottle spatula spoon spraybottle statue teddybear tennisracket tissuebox toiletpaper tomato towel vase
watch winebottle
""".split())
#: Which appliance each transform uses in ALFWorld (heat: microwave; cool: fridge; clean: sinkbasin;
#: look in light: a lamp), from its PDDL domain's ``HeatObject``/``CoolObject``/``CleanObject``/
#: ``ToggleObject`` preconditions.
TRANSFORM_TOOLS = {"heat": frozenset({"microwave"}), "cool": frozenset({"fridge"}),
                   "clean": frozenset({"sinkbasin", "sink"}), "use": frozenset({"desklamp", "floorlamp"})}
#: The verb a task category cannot succeed without (ALFWorld game-file types).
KEY_VERB = {"heat": "heat", "cool": "cool", "clean": "clean", "look_at_obj_in_light": "use"}

_TOKEN = re.compile(r"[a-z]+")
_TEXT_TOKEN = re.compile(r"[a-z]+|\d+|[.,;:!?]")  # words, numbers, clause punctuation: Mention.pos counts these
#: ALFWorld's one-word names as models write them in prose ("carry it to the dining table"): joined
#: before tokenizing, so a rule sees the receptacle or object (longest phrase first).
_SPLIT_NAMES = {" ".join(words): "".join(words) for words in (
    ("toilet", "paper", "hanger"), ("hand", "towel", "holder"), ("arm", "chair"), ("bathtub", "basin"),
    ("coffee", "machine"), ("coffee", "table"), ("counter", "top"), ("desk", "lamp"), ("dining", "table"),
    ("floor", "lamp"), ("garbage", "can"), ("laundry", "hamper"), ("side", "table"), ("sink", "basin"),
    ("stove", "burner"), ("towel", "holder"), ("tv", "stand"), ("alarm", "clock"), ("baseball", "bat"),
    ("butter", "knife"), ("cell", "phone"), ("credit", "card"), ("dish", "sponge"), ("glass", "bottle"),
    ("hand", "towel"), ("key", "chain"), ("remote", "control"), ("salt", "shaker"), ("pepper", "shaker"),
    ("scrub", "brush"), ("soap", "bar"), ("soap", "bottle"), ("spray", "bottle"), ("teddy", "bear"),
    ("tennis", "racket"), ("tissue", "box"), ("toilet", "paper"), ("wine", "bottle"))}
_SPLIT_NAME = re.compile(r"\b(" + "|".join(sorted((re.escape(k).replace(r"\ ", r"\s+") for k in _SPLIT_NAMES),
                                                   key=len, reverse=True)) + r")(?=s?\b)")
_NOUN_WINDOW = 5  # tokens after a verb searched for the nouns it acts on


class Mention(NamedTuple):
    """An action as ``concept`` + object/receptacle ``nouns`` (no instance numbers); ``past``:
    written in a past-tense form (prose only); ``pos``: token position in the text."""
    concept: str
    nouns: tuple[str, ...]
    past: bool = False
    pos: int = 0


def singular(word: str) -> str:
    """``word`` without a plural ``s`` (not of ``-ss`` words nor words of <= 3 letters): "mugs" -> "mug"."""
    return word[:-1] if word.endswith("s") and not word.endswith("ss") and len(word) > 3 else word


def command_mention(action: str) -> Mention | None:
    """The mention of one recorded command: the first word's concept and the other words that
    are not prepositions or numbers (``"take mug 1 from countertop 2"`` -> ``take (mug,
    countertop)``); WebShop ``click[Buy Now]`` is ``buy``, ``search[...]`` is ``search``, another
    click is ``click`` with no nouns; a name in two words is the game's one word (:func:`join_names`).
    ``None`` for an empty or unknown verb."""
    low = (action or "").strip().lower()
    if low.startswith("click[buy"):
        return Mention("buy", ())
    if low.startswith("search["):
        return Mention("search", ())
    if low.startswith("click["):
        return Mention("click", ())
    words = _TOKEN.findall(join_names(low))  # ETO's "go to dining table 1" is the game's diningtable
    if not words or words[0] not in VERBS:
        return None
    nouns = tuple(w for w in words[1:] if w not in _FUNCTION and w not in VERBS)
    if words[0] == "move" and "to" in words[2:]:  # newer ALFWorld: "move cup 3 to diningtable 4" is its put
        return Mention("put", nouns)
    return Mention(VERBS[words[0]], nouns)


#: Words after which a verb form is a noun ("the usual places of a mug", "a quick return").
_DETERMINERS = frozenset("""the a an this that these those usual likely other some all any each every many few
common possible typical same different new""".split())
_CLAUSE_END = frozenset({".", ",", ";", ":", "!", "?", "and", "then", "but", "so", "or", "while", "because"})
_FUNCTION = frozenset("to from in on with at into onto the a an some up down of for".split())


def tokenize(text: str) -> list[str]:
    """Lower-cased words and clause punctuation of ``text``: the positions ``Mention.pos`` counts.
    A name written in two or three words ("dining table") is one token (:data:`_SPLIT_NAMES`)."""
    return _TEXT_TOKEN.findall(join_names(text))


def join_names(text: str) -> str:
    """``text`` lower-cased, with each name of :data:`_SPLIT_NAMES` written as the game's one word
    ("go to the Dining Table 1" -> "go to the diningtable 1")."""
    return _SPLIT_NAME.sub(lambda m: _SPLIT_NAMES[" ".join(m.group(1).split())], (text or "").lower())


def text_mentions(text: str, known_nouns: Iterable[str] = ()) -> list[Mention]:
    """Every verb of :data:`VERBS` in ``text`` with the nouns found in the next few tokens before
    the next verb: a receptacle of :data:`RECEPTACLES`, a word of ``known_nouns`` (the objects of
    the trajectory or task), or ``object``/``item``. ``pick up`` counts as ``take``; ``turn``/
    ``switch`` count as ``use`` only when followed by ``on``."""
    tokens = tokenize(text)
    known = {singular(n) for n in known_nouns} | RECEPTACLES | OBJECTS | {"object", "item", "target"}
    out = []
    for i, w in enumerate(tokens):
        concept = VERBS.get(w)
        if concept is None or (i and tokens[i - 1] in _DETERMINERS):  # "the usual places", "a return"
            continue
        if concept == "use" and w not in ("use", "uses", "used", "using") and "on" not in tokens[i + 1:i + 3]:
            continue
        nouns = []
        for t in tokens[i + 1:i + 1 + _NOUN_WINDOW]:
            if (t in VERBS and t != "place") or t in _CLAUSE_END:  # "place" is also a noun ("a likely place")
                break
            if singular(t) in known and singular(t) not in nouns:
                nouns.append(singular(t))
        out.append(Mention(concept, tuple(nouns), w in PAST_FORMS, i))
    return out


def nouns_of(actions: Iterable[str]) -> set[str]:
    """The nouns of every recorded command in ``actions`` (:func:`command_mention`)."""
    out: set[str] = set()
    for a in actions:
        m = command_mention(a)
        if m is not None:
            out.update(m.nouns)
    return out


def matches(claim: Mention, done: Mention) -> bool:
    """Whether the recorded command ``done`` is the action ``claim`` speaks of: same concept, and
    every receptacle the claim names is one of the command's nouns (objects are not compared:
    a skill says "the vase" of a category whose tasks move other objects)."""
    if claim.concept != done.concept:
        return False
    return all(n in done.nouns for n in claim.nouns if n in RECEPTACLES)


def same_event(claim: Mention, done: Mention) -> bool:
    """Whether prose ``claim`` speaks of the recorded ``done`` as an event: same concept, and for
    ``go``/``open``/``close`` the receptacles it names are ``done``'s; for the other verbs the
    objects it names (if any) include one of ``done``'s (receptacles are not compared there: in
    "place the cooled pan on the countertop" the countertop belongs to the placing)."""
    if claim.concept != done.concept:
        return False
    if claim.concept in ("go", "open", "close"):
        return all(n in done.nouns for n in claim.nouns if n in RECEPTACLES)
    objects = [n for n in claim.nouns if n not in RECEPTACLES and n not in ("object", "item", "target")]
    return not objects or any(n in done.nouns for n in objects)

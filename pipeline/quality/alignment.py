"""Think rules: a think must reason toward *its own* step, before acting, in the first person.

Seen in the thinks Qwen2.5-Coder-1.5B wrote for the shipped sample (every one passed the older
rules):

* ``think_misaligned`` (:func:`misaligned`) - the think speaks of another step: ``go to drawer
  4`` got "The agent opens drawer 1 again and finds the pen in it." (another receptacle, acted on
  now), ``take cup 3 from countertop 2`` got "After cooling the cup, the agent moves it to the
  diningtable." (the cup was never cooled: an event that has not happened), and a ``take`` think
  may name another object than the one taken. Allowed: the step's own action, the task's goal,
  and past events that did happen (earlier actions). Also: the previous action told in the
  present as if done now ("The fridge is closed. I open it to see if there's anything inside."
  for ``go to diningtable 1``; a ReAct recap "Now I take an apple (1). Next, ..." is allowed),
  and the opposite transformation of the goal given as a purpose ("I put the hot apple in the
  fridge for cooling" when the task asks for a hot apple), and a receptacle's state the agent
  has not seen yet ("The cabinet is closed, so I will open it." for ``go to cabinet 2``).
* ``think_unrelated`` (:func:`unrelated`) - the think names neither its command's verb nor any
  of its arguments: ``open fridge 1`` got "I need to heat the apple first. Apples are usually in
  the microwave for heating." (it does not explain opening, and the belief is false).
* ``narration`` (:func:`narration`) - third-person, past-tense narration after the fact ("The
  agent saw that the cabinet 2 was closed. The agent decided to open cabinet 2."), the game's
  second-person text quoted ("On the cabinet 1, you see a cloth 1, ..."), or a think that tells
  its own action as done ("I opened cabinet 2."). An SFT target teaches the policy to
  *decide*: it speaks as the agent, before the action.

Measured in ``tests/pipeline/quality/test_alignment.py``: no rule fires on the recorded thoughts
of the samples and fixtures (ReAct ALFWorld and WebShop, ETO ALFWorld, Reflexion).
"""
from __future__ import annotations

import re
from typing import Iterable

from pipeline.core.records import Trajectory
from pipeline.quality.violation import Violation
from pipeline.quality import actions as act
from pipeline.quality import phrases
from pipeline.quality.echo import STOP
from pipeline.quality.grounding import entities
from pipeline.verify import alfworld_text as tx

#: The game's own second-person text inside a think: "On the cabinet 1, you see a cloth 1",
#: "You pick up the spraybottle 2 from the cabinet 2" (the 1.5B teacher quoting observations),
#: and a second-person recap "You have clicked 8.5 ounce (pack of 1) before buying." (WebShop).
#: The article after the verb keeps the idiom out ("I like football, you see.").
_GAME_TEXT = re.compile(r"\byou\s+(?:(?:see|pick\s+up|open|close|put|heat|cool|clean|turn\s+on)\s+(?:a|an|the|nothing|some)|"
                        r"arrive\s+at|are\s+in\s+the\s+middle|(?:have\s+)?(?:clicked|selected|chosen|chose|bought|searched))\b", re.I)
#: A think that talks to "you" instead of reasoning as "I": a sentence opening with "You are in the
#: kitchen", "You need to", "You can explore ..." (the 1.5B teacher on TextWorld coin, echoing the
#: game's "You are in the kitchen."). Only at a sentence start: "as you see" inside a clause passes.
_SECOND_PERSON = re.compile(r"(?:^|[.!?]\s+)you\s+(?:are|have|had|can|could|need|needs|should|must|will|take|took|"
                            r"do|did|move|moved|go|went|look|looked|explore|explored)\b", re.I)
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


#: Words right before a past form that make it the verb of a clause ("I opened cabinet 2").
_SUBJECTS = frozenset({"i", "we", "ve", "have", "had", "just", "already"})


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
        if m.concept in ("open", "close") and prev not in _SUBJECTS \
                and (nxt.isalpha() and nxt not in ("it", "the", "a", "them")):
            return False  # "the closed drawer": an adjective naming a state; "I opened cabinet 2" is a verb
        return True
    return bool(_GERUND.search(word)) and prev in _DONE_MARKERS


def misaligned(think: str, traj: Trajectory, i: int, action: str) -> str | None:
    """Why the think of distill entry ``i`` (explaining ``action``, taken after observation ``i``)
    speaks of another step, else ``None``:

    * it says an action already happened (:func:`_claims_done`) that no earlier action
      (``1..i``) nor the current one did (``after cooling the cup``);
    * it acts now on a numbered entity (``drawer 1``) that is neither in ``action`` nor in the
      task: an action verb followed within a few words by that entity;
    * it takes or puts an object kind that is neither in ``action`` nor in the task;
    * ALFWorld: :func:`_already`, :func:`_other_conclusion`, :func:`_usual_elsewhere`,
      :func:`_adds_a_condition` say so;
    * WebShop: a search or another click told for this click, a buy argued against
      (:func:`_buys_over_budget`);
    * it says the agent cannot do this step's command (:func:`_cannot`).
    """
    tokens = act.tokenize(think)
    current = act.command_mention(action)
    earlier = [m for m in map(act.command_mention, traj.actions[:i]) if m is not None]
    nouns = act.nouns_of(traj.actions) | _task_nouns(traj.task)
    kinds = nouns | act.RECEPTACLES | act.OBJECTS
    # names as the tokens have them ("dining table 1" in ETO's actions is the think's "diningtable 1")
    own = entities(act.join_names(action)) | entities(act.join_names(traj.task))
    before = set().union(*(entities(act.join_names(a)) for a in traj.actions[:i])) if i else set()
    goal = _task_nouns(traj.task)
    concepts = _command_concepts(traj)
    for m in act.text_mentions(think, nouns):
        if m.concept in _ACTING and _claims_done(tokens, m):  # not WebShop's "I searched for the cream"
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
        if current and m.concept == current.concept == "go" and _intent(tokens, m.pos) \
                and (place := _goes_elsewhere(m, clause, current, own)):
            return f"goes to {place}, but this step's action is {action!r}"
    if traj.env == "textworld" and (other := _textworld_other_move(think, action) or _textworld_unseen_room(think, traj, i)):
        return other
    mentions = act.text_mentions(think, nouns)
    if traj.env == "alfworld" and (elsewhere := _alfworld_elsewhere(think, traj, i, action, own, mentions, current)):
        return elsewhere
    return (traj.env == "webshop" and _webshop_other_step(think, action, traj.actions[i - 1] if i else "")) or \
        _cannot(think, action) or \
        _redoes_transform(tokens, mentions, current, earlier) or \
        _opposite_purpose(tokens, traj.task) or \
        _says_it_does_another(tokens, mentions, current, earlier[-1:], action, concepts) or \
        _explains_previous(tokens, mentions, current, earlier[-1:], action)


#: "I", "I'll", "I should", "I need to" ... before a verb: a TextWorld agent's own move now.
_TW_I = r"\bi(?:'ll|'m going to| will| should| must| can| need to| have to| want to| decide to| am going to)?\s+"
_TW_DIRS = ("north", "south", "east", "west")
_TW_DIR = r"(" + "|".join(_TW_DIRS) + r")"
#: What a TextWorld think says the agent does now, as (kind, argument): a move (its direction, or
#: "" for "move to another room"), a look around, a take, an inventory check.
_TW_INTENTS = (
    ("move", re.compile(_TW_I + r"(?:move|go|head|walk)\s+(?:to\s+the\s+)?" + _TW_DIR + r"\b")),
    ("move", re.compile(r"\bmoving\s+" + _TW_DIR + r"\s+(?:seems|is|would|makes)\b")),
    ("move", re.compile(_TW_I + r"(?:move|go|head)\s+(?:to|into)\s+(another|a\s+different|the\s+next)\s+room\b")),
    # "so I return west", "I try moving west first", "I head back north"
    ("move", re.compile(_TW_I + r"(?:return|try\s+moving|try\s+going|head\s+back|go\s+back|move\s+back)\s+"
                        + _TW_DIR + r"\b")),
    # a room as the target: "so I try the pantry first" (any move), "I try the pantry to the east" (east)
    ("move", re.compile(_TW_I + r"(?:try|enter|visit|return\s+to|go\s+to|head\s+to|move\s+to|go\s+into)\s+the\s+"
                        r"(?!coin\b)[a-z]+(?:\s+room)?(?:\s+to\s+the\s+" + _TW_DIR + r")?\b")),
    ("look", re.compile(_TW_I + r"look\s+around\b()")),  # "I looked around" is a recap, no intent
    ("take", re.compile(_TW_I + r"(?:take|pick\s+up|grab)\b()")),
    ("inventory", re.compile(_TW_I + r"(?:check\s+(?:my\s+)?inventory|inventory)\b()")),
)


def _textworld_other_move(think: str, action: str) -> str | None:
    """Why a TextWorld think says the agent does something else now, else ``None``: it states
    at least one intent of :data:`_TW_INTENTS` and none is this step's ``move <dir>``, ``look
    around``, ``take ...`` or ``inventory`` (other commands are not judged). Seen with the 1.5B
    teacher on ``coin``: "I should look around to see if there are any clues" for ``move south``,
    "Moving south seems like a good direction." for ``take coin``; a move "to another room"
    matches any direction."""
    words = (action or "").lower().split()
    kind = words[0] if words and words[0] in ("move", "look", "take", "inventory") else None
    if kind is None or (kind == "look" and words[1:2] != ["around"]):
        return None
    text = " ".join(think.lower().replace("\u2019", "'").split())
    said = [(k, (hit.group(1) or "").strip(), hit.start()) for k, rx in _TW_INTENTS for hit in rx.finditer(text)]
    if not said:
        return None
    arg = words[1] if kind == "move" and len(words) > 1 else ""
    # a move with no direction ("to another room") matches any move
    if any(k == kind and (k != "move" or a not in _TW_DIRS or a == arg) for k, a, _ in said):
        return None
    k, a, _ = min(said, key=lambda x: x[2])  # the first intent the think states
    told = {"move": f"move {a}" if a in _TW_DIRS else "move to another room", "look": "look around",
            "take": "take something", "inventory": "check its inventory"}[k]
    return f"says the agent will {told}, but this step's action is {action!r}"


#: The rooms of TextWorld Express's house map (the engine's ``kitchen`` ... ``supermarket``).
_TW_ROOMS = re.compile(r"\b(" + phrases.alternation("textworld_facts.toml", "room") + r")\b")  # data/textworld_facts.toml


def _textworld_unseen_room(think: str, traj: Trajectory, i: int) -> str | None:
    """Why a TextWorld think speaks of a room no observation up to step ``i`` has named, else
    ``None``. Seen with the 1.5B teacher on ``coin``: "The kitchen north of the living room is still
    unsearched" in a game without a living room: the worked example's map pasted onto another."""
    seen = " ".join((s.observation or "") for s in traj.steps[:i + 1]).lower()
    for m in _TW_ROOMS.finditer((think or "").lower()):
        room = " ".join(m.group(1).split())
        if room not in " ".join(seen.split()):
            return f"speaks of the {room}, which no observation so far has named"
    return None


def _command_concepts(traj: Trajectory) -> frozenset[str]:
    """The acting verbs of ``traj``'s command grammar: ALFWorld's all, whatever the episode used ("I
    examine it" told for a go); elsewhere those of its actions (a WebShop product "easy carry
    backdrop" is no move)."""
    if traj.env == "alfworld":
        return _ACTING
    return _ACTING & frozenset(m.concept for m in map(act.command_mention, traj.actions) if m is not None)


def _alfworld_elsewhere(think: str, traj: Trajectory, i: int, action: str, own: set[str],
                        mentions: list[act.Mention], current: act.Mention | None) -> str | None:
    """The ALFWorld checks of :func:`misaligned` (``own``: the entities of the action and task)."""
    return (_looks_elsewhere(think, own) or _placed_elsewhere(think, traj, i) or _state_unseen(think, traj, i, action)
            or _looks_instead(think, mentions, current, action) or _already(think, action)
            or _other_conclusion(think, action) or _usual_elsewhere(think) or _adds_a_condition(think, traj.task)
            or _goes_where_it_is(think, action, traj.actions[i - 1] if i else "") or _held_elsewhere(think, traj, i)
            or _finds_what_it_holds(think, traj, i))


def _webshop_other_step(think: str, action: str, previous: str) -> str | None:
    """The WebShop checks of :func:`misaligned`: a search or another click told for this click,
    a buy argued against."""
    return (_searches_instead(think, action) or _clicks_previous(think, action, previous)
            or _selects_before_buying(think, action) or _buys_nothing(think, action)
            or _buys_over_budget(think, action))


_CANNOT = re.compile(r"\b(?:can't|cannot|can\s+not|unable\s+to|couldn't|could\s+not|not\s+able\s+to)\s+"
                     r"([a-z]+)(?:\s+([a-z]+))?", re.I)


def _cannot(think: str, action: str) -> str | None:
    """Why the think says the agent cannot do this step's own command, else ``None``: "The cabinet
    2 is closed and I can't open it without knowing the password." for ``open cabinet 2`` (the
    1.5B teacher). The action succeeded: the demonstration took it. No recorded thought of the
    shared data says it cannot do its own step's command."""
    verb = (action or "").split("[")[0].split()[0].lower() if (action or "").strip() else ""
    hit = next((m for m in _CANNOT.finditer(think or "")
                if verb and verb in (m.group(1).lower(), (m.group(2) or "").lower())), None)
    said = hit and hit.group(0)[:hit.end(1 if hit.group(1).lower() == verb else 2) - hit.start()]
    return f"says '{said}', but this step's action is {action!r}" if hit else None


#: A condition the think sets on the object: "make sure the bottle is clean" (the 1.5B teacher,
#: for a plain put). None of the shared data's recorded thoughts sets one.
_MAKE_SURE = re.compile(r"\b(?:make\s+sure|ensure|check)\s+(?:that\s+)?(?:the\s+|it\s+|its\s+)?(?:[a-z]+\s+){0,2}?"
                        r"(?:is|are)\s+(clean|hot|cold|cool|warm|heated|cooled|washed|chilled)\b", re.I)
_STATE_GOAL = {"clean": "clean", "washed": "clean", "hot": "heat", "warm": "heat", "heated": "heat",
               "cold": "cool", "cool": "cool", "cooled": "cool", "chilled": "cool"}


#: A go or a look planned in the first person: "I will go to the drawer 4", "so I will look at
#: the microwave 1".
_PLANS_GO = re.compile(r"\bi\s+(?:will|'ll|shall|should|must|need\s+to|have\s+to|am\s+going\s+to)\s+"
                       r"(?:first\s+)?(go\s+(?:back\s+)?to|look\s+(?:at|in))\s+(?:the\s+)?([a-z]+\s+\d+)", re.I)
#: Commands whose purpose is to see a place: a look planned for them is their own.
_SEEING = frozenset({"open", "examine", "look", "inventory"})


def _goes_where_it_is(think: str, action: str, previous: str) -> str | None:
    """Why the think of a step that is not a go plans to go to (or, unless the step opens or
    examines, to look at) the very place the previous action went to, else ``None``: "I will go
    to the drawer 4." for ``open drawer 4`` right after ``go to drawer 4``, "Apples are usually
    in the microwave, so I will look at the microwave 1." for ``heat apple 1 with microwave 1``
    (the 1.5B teacher, one step late). The agent is there already; the think explains the
    previous step, not this one."""
    verb = (action or "").split()[0].lower() if (action or "").strip() else ""
    if not verb or verb == "go" or not previous.lower().startswith("go to "):
        return None
    there = act.join_names(previous[len("go to "):]).strip()
    hit = next((m for m in _PLANS_GO.finditer(act.join_names(think or "")) if m.group(2).strip() == there
                and (m.group(1).startswith("go") or verb not in _SEEING)), None)
    return (f"plans '{hit.group(0)}', where the previous action already went, but this step's action is "
            f"{action!r}") if hit else None


def _adds_a_condition(think: str, task: str) -> str | None:
    """Why the think requires a state of the object that the task does not ask for, else ``None``
    (ALFWorld: a heat, cool or clean the demonstration never does is no step to train toward)."""
    for m in _MAKE_SURE.finditer(think or ""):
        goal = _STATE_GOAL[m.group(1).lower()]
        if _task_goal(task) != goal and goal not in (task or "").lower():
            return f"requires {m.group(0)!r}, which the task does not ask"
    return None


def _goes_elsewhere(m: act.Mention, clause: list[str], current: act.Mention, own: set[str]) -> str | None:
    """Where a think's own "I go" (mention ``m``, its ``clause``) leads when that is not this
    step's ``go`` (``current``), else ``None``: a receptacle of another kind ("so before the
    coffeemachine I go to the sinkbasin" for ``go to microwave 1``), or one of the same kind with
    another number ("I go to the drawer 1 to find it" for ``go to drawer 2``: the 1.5B teacher,
    one drawer late; earlier visits do not excuse it)."""
    if m.nouns and not any(_same_kind(n, c) for n in m.nouns for c in current.nouns) \
            and any(n in act.RECEPTACLES for n in m.nouns):
        return m.nouns[0]
    other = [e for e in entities(" ".join(clause)) if e not in own
             and any(_same_kind(e.rsplit(" ", 1)[0], c) for c in current.nouns)]
    return other[0] if other else None


#: A WebShop think that says the agent searches now ("I search for a styling cream that is cruelty
#: free ..." or "I need to search again for a more suitable product" before ``click[Buy Now]``, the
#: 1.5B teacher): "I searched" and "the search results" are not, nor a think that also says what it clicks ("I search no more; I click Buy Now").
_SEARCH_NOW = re.compile(r"\bi(?:'ll|\s+will|\s+now|\s+first|\s+need\s+to|\s+must|\s+have\s+to|\s+should)?\s+"
                         r"(?:search|type|enter|query)\b", re.I)
_CLICK_NOW = re.compile(r"\bi(?:'ll|\s+will|\s+now|\s+then|\s+can|\s+should)?\s+"
                        r"(?:click|select|choose|open|buy|pick|purchase|check|go|view|look)\b", re.I)


_CLICK_ARG = re.compile(r"^click\[(.+)\]$", re.I)


def _clicks_previous(think: str, action: str, previous: str) -> str | None:
    """Why a WebShop think for a click intends the previous click again, else ``None``: it says
    "I select/click/choose/pick" followed within a few words by the previous click's argument and
    never names this click's. "I select the '8.5 ounce (pack of 1)' option before buying." for
    ``click[Buy Now]`` right after ``click[8.5 ounce (pack of 1)]`` (the 1.5B teacher, one step
    late)."""
    now, before = _CLICK_ARG.match((action or "").strip()), _CLICK_ARG.match((previous or "").strip())
    if not now or not before:
        return None
    low = " ".join((think or "").lower().split())
    mine, prev = now.group(1).lower(), before.group(1).lower()
    if mine in low or prev == mine:
        return None
    hit = re.search(r"\bi(?:'ll|\s+will|\s+now)?\s+(?:select|click|choose|pick|open)\b[^.;!?]{0,20}?" + re.escape(prev), low)
    return (f"says the agent will now '{hit.group(0)}', the previous step's click, but this step's action is "
            f"{action!r}") if hit else None


_SELECT_BEFORE_BUY = re.compile(r"\bi(?:'ll|\s+will|\s+now|\s+first|\s+need\s+to|\s+should)?\s+(?:select|choose|pick)\b"
                                r"[^.;!?]{0,80}?\bbefore\s+(?:buying|i\s+buy|clicking|purchasing|the\s+purchase)\b")


_BUY_WORDS = re.compile(r"\b(?:buy|buys|buying|bought|purchase[sd]?|purchasing|order|checkout)\b")
_SEARCHED = re.compile(r"\bi\s+(?:have\s+|had\s+|already\s+)?searched\b")
_OTHER_CLICK = re.compile(r"\bi(?:'ll|\s+will|\s+now|\s+first|\s+need\s+to|\s+should|\s+can)?\s+"
                          r"(?:select|choose|pick|click|open|view|check|look)\b")


def _buys_nothing(think: str, action: str) -> str | None:
    """Why a WebShop think for ``click[Buy Now]`` tells another click and never the purchase,
    else ``None``: "The first result is a Cosycost USB Microphone ... I open it to see more
    details." (the product click before it), "I select the '8.5 ounce' option ..." (the option
    click before it; the 1.5B teacher, one step late), "I searched for styling cream that is
    cruelty free ..." (the search, told in the past)."""
    if (action or "").strip().lower() != "click[buy now]":
        return None
    low = " ".join((think or "").lower().split())
    if _BUY_WORDS.search(low):
        return None
    if searched := _SEARCHED.search(low):
        return f"tells the search the agent made ('{searched.group(0)}') and never that it buys, but this " \
               f"step's action is {action!r}"
    hit = _OTHER_CLICK.search(low)
    return (f"says the agent will now '{hit.group(0)}' and never that it buys, but this step's action is "
            f"{action!r}") if hit else None


#: A price said to break the instruction's limit: "the price is higher than 40.00", "too expensive".
_OVER_BUDGET = re.compile(r"\b(?:price|it|cost)\s+(?:is\s+)?(?:higher|more|greater)\s+than\b|\bover\s+(?:the\s+|my\s+)?"
                          r"budget\b|\bexceeds?\b|\btoo\s+expensive\b", re.I)


def _buys_over_budget(think: str, action: str) -> str | None:
    """Why a WebShop think for ``click[Buy Now]`` argues against the purchase, else ``None``: it
    calls the price too high ("... but the price is higher than 40.00. I need to search again",
    the 1.5B teacher on a product it then bought at $29.99). None of the 43 recorded thoughts
    before a buy in the shared WebShop data says so; recorded thoughts say it before clicking
    another product."""
    if (action or "").strip().lower() != "click[buy now]":
        return None
    hit = _OVER_BUDGET.search(think or "")
    return (f"calls the price too high ({hit.group(0)!r}), but this step's action is {action!r}: a buy follows "
            "a product that fits the instruction") if hit else None


def _selects_before_buying(think: str, action: str) -> str | None:
    """Why a WebShop think for ``click[Buy Now]`` says the agent selects an option first, else
    ``None``: "I select the size option for the noise cancelling cosycost usb microphone before
    buying." (the 1.5B teacher; that page had no option clicked at all). Buying is this step; an
    option is selected by a click of its own before it."""
    if (action or "").strip().lower() != "click[buy now]":
        return None
    hit = _SELECT_BEFORE_BUY.search(" ".join((think or "").lower().split()))
    return (f"says the agent will now '{hit.group(0)[:40]}', but this step's action is {action!r}: an option is "
            "its own click") if hit else None


def _searches_instead(think: str, action: str) -> str | None:
    """Why a WebShop think for a ``click[...]`` action says the agent searches now, else ``None``."""
    if not (action or "").lower().startswith("click[") or _CLICK_NOW.search(think or ""):
        return None
    hit = _SEARCH_NOW.search(think or "")
    return (f"says the agent will now '{hit.group(0)}', but this step's action is {action!r}: a search is "
            "another step") if hit else None


def _redoes_transform(tokens: list[str], mentions: list[act.Mention], current: act.Mention | None,
                      earlier: list[act.Mention]) -> str | None:
    """Why the think intends a heat, cool or clean that an earlier action already did (and this
    step's action is not), else ``None``: "I will heat the mug with the microwave and then place it
    in the coffeemachine" before ``go to coffeemachine 1``, after ``heat mug 1 with microwave 1``
    (the 1.5B teacher), "Before doing this, I should heat the apple first." or "I need to heat the apple first ... so I will use the microwave to heat
    the apple." before ``put apple 1 in/on fridge 1`` (:func:`_plans`)."""
    for m in mentions:
        if m.past or m.concept not in ("heat", "cool", "clean") or (current and current.concept == m.concept):
            continue
        should = tokens[max(0, m.pos - 2):m.pos] in (["i", "should"], ["i", "must"])  # "I should heat the apple first"
        if (_intent(tokens, m.pos) or _plans(tokens, m.pos) or should) and any(e.concept == m.concept for e in earlier):
            return f"plans '{' '.join(tokens[m.pos - 2:m.pos + 3])}', which an earlier action already did"
    return None


def _same_kind(word: str, kind: str) -> bool:
    """Whether ``word`` may name receptacle ``kind``: the kind, a part of it ("sink" for
    ``sinkbasin``) or another word for it (:data:`_ARGUMENT_WORDS`)."""
    return word == kind or kind.startswith(word) or kind.endswith(word) or word in _ARGUMENT_WORDS.get(kind, ())


def _intent(tokens: list[str], pos: int) -> bool:
    """Whether the verb at ``pos`` is the agent's own intent now ("I go", "I'll go", "I will go"),
    not a recap framed as one ("Now I go ...": :func:`_framed_as_recap`)."""
    back = tokens[max(0, pos - 2):pos]
    return (back[-1:] == ["i"] or back in (["i", "ll"], ["i", "will"])) and not _framed_as_recap(tokens, pos)


#: Words right after "I" that make a later "to <verb>" of the same sentence the agent's plan:
#: "I need to heat", "I will use the microwave to heat". "I was asked to heat" is not one.
_PLANNING = frozenset({"will", "ll", "need", "should", "must", "use", "have", "am", "m", "can"})


def _plans(tokens: list[str], pos: int) -> bool:
    """Whether the verb at ``pos`` is an infinitive of the agent's plan in its sentence ("I need
    to heat it", "so I will use the microwave to heat it"), with no negation between."""
    if pos < 2 or tokens[pos - 1] != "to":
        return False
    start = max((q + 1 for q in range(pos) if tokens[q] in _SENTENCE_END), default=0)
    clause = tokens[start:pos]
    planned = any(t == "i" and q + 1 < len(clause) and clause[q + 1] in _PLANNING for q, t in enumerate(clause))
    return planned and not set(clause) & _NEGATION


#: "I", "I'll", "I need to" ... before a verb: the agent's own next move.
_I_WILL = r"\bi(?:'ll|\s+will|\s+should|\s+can|\s+need\s+to|\s+want\s+to)?\s+"
#: "I will look at countertop 3": where a think says the agent looks next.
_LOOK_AT = re.compile(_I_WILL + r"(?:look\s+(?:at|in|inside|on)|check|search|explore)\s+(?:the\s+)?([a-z]+\s+\d+)\b")
#: "I will look at the cabinet", "I need to search": a search the agent says it makes next.
_LOOK_ANY = re.compile(_I_WILL + r"((?:look\s+(?:at|in|inside|on|for)|check|search|explore)(?:\s+the)?"
                       r"(?:\s+[a-z]+(?:\s+\d+)?)?)")


def _looks_instead(think: str, mentions: list[act.Mention], current: act.Mention | None, action: str) -> str | None:
    """Why an ALFWorld think for a ``take`` or ``put`` says only that the agent will look at a
    place, else ``None``: "Spraybottles are usually in toilets, so I will look at toilet 1." for
    ``put spraybottle 2 in/on toilet 1``, and its retry "I will look at the cabinet where the
    toilet is located." (the 1.5B teacher: the search of an earlier step, with the object in hand)."""
    if current is None or current.concept not in ("take", "put") or any(m.concept == current.concept for m in mentions):
        return None
    hit = _LOOK_ANY.search(" ".join(act.join_names(think).split()))
    return f"says the agent will {hit.group(1)}, but this step's action is {action!r}" if hit else None


def _looks_elsewhere(think: str, own: set[str]) -> str | None:
    """Why an ALFWorld think says the agent will look at a numbered receptacle that is neither
    its action's nor the task's ("Mugs are usually on countertops, so I will look at countertop 3."
    for ``go to sinkbasin 1``; the 1.5B teacher, copying its worked example), else ``None``."""
    for hit in _LOOK_AT.finditer(" ".join(act.join_names(think).split())):
        place = hit.group(1)
        if place not in own and place.split()[0] in act.RECEPTACLES:
            return f"will look at {place}, which this step's action does not name"
    return None


#: "Mug 1 is here on countertop 1", "I'm at the drawer 2", "I am at the microwave", "I am currently
#: holding the apple on the diningtable": where a think says the agent stands (a place without a
#: number is compared by its kind).
_HERE_AT = re.compile(r"\b(?:(?:is|are)\s+(?:right\s+)?here\s+(?:on|in|at)|i(?:\s+am|'m)\s+(?:now\s+|currently\s+)?"
                      r"(?:(?:holding|carrying)\s+(?:the\s+|an?\s+)?[a-z]+(?:\s+\d+)?\s+)?(?:at|by)|"
                      r"i(?:\s+am|'m)\s+(?:now\s+|currently\s+)?(?:holding|carrying)\s+(?:the\s+|an?\s+)?[a-z]+"
                      r"(?:\s+\d+)?\s+on|i(?:'ve|\s+have)?\s+arrived\s+at)\s+(?:the\s+)?([a-z]+(?:\s+\d+)?)\b")


def _location(traj: Trajectory, i: int) -> str | None:
    """The numbered receptacle the agent stands at before action ``i``: the destination of the
    last ``go to`` among ``traj.actions[:i]`` ("diningtable 1"), else ``None`` (the start room)."""
    for a in reversed(traj.actions[:i]):
        if (a or "").lower().startswith("go to "):
            found = sorted(entities(act.join_names(a)))
            return found[0] if found else None
    return None


def _placed_elsewhere(think: str, traj: Trajectory, i: int) -> str | None:
    """Why an ALFWorld think says the agent (or what it sees) is at a numbered receptacle other
    than where it stands before action ``i`` ("Mug 1 is here on countertop 1. I take it" for
    ``take mug 1 from sinkbasin 1`` right after ``go to sinkbasin 1``: the 1.5B teacher copying
    its worked example), else ``None``."""
    where = _location(traj, i)
    if where is None:
        return None
    for hit in _HERE_AT.finditer(" ".join(act.join_names(think).split()).lower()):
        place = hit.group(1)
        kind, here = place.split()[0], where.split()[0]
        if len(place.split()) > 1:
            wrong = place != where
        else:  # "the sink" is the sinkbasin; a lamp is no place to stand ("I am at the desk lamp")
            wrong = not (here.startswith(kind) or kind.startswith(here)) and not kind.endswith("lamp")
        if kind in act.RECEPTACLES and wrong:
            return f"says the agent is at {place}, but it stands at {where}"
    return None


#: "The spraybottle is in the cabinet": a think placing an object in or on a receptacle now.
_OBJECT_IN = re.compile(r"\b([a-z]+)(?:\s+\d+)?\s+(?:is|are)\s+(?:still\s+|now\s+)?(?:in|on|inside)\s+(?:the\s+)?"
                        r"([a-z]+)(?:\s+\d+)?\b")


def _held(traj: Trajectory, i: int) -> str | None:
    """The kind of object the agent holds before action ``i`` ("spraybottle"): taken by the last
    ``take`` among ``traj.actions[:i]`` and not put down since, else ``None``."""
    for a in reversed(traj.actions[:i]):
        cmd = tx.parse_command(a or "")
        if cmd is not None and cmd.verb == "put":
            return None
        if cmd is not None and cmd.verb == "take":
            return tx.name_type(cmd.args[0])
    return None


#: "I need to find one", "so I will look for a spraybottle": a search planned in a think (not
#: ReAct's recap "Now I find an apple (3)").
_FINDS = re.compile(r"\b(?:need|needs|have|has|want|wants|try|going)\s+to\s+(?:first\s+)?|\b(?:will|must|should)\s+"
                    r"(?:first\s+)?")
_FIND_WHAT = re.compile(r"(?:find|look\s+for|search\s+for|locate)\s+(?:(one)\b|(?:(?:a|an|the|some)\s+)?([a-z]+))")


def _finds_what_it_holds(think: str, traj: Trajectory, i: int) -> str | None:
    """Why an ALFWorld think plans to find the kind of object the agent already holds ("The goal
    asks for a spraybottle on the toilet, so I need to find one and put it there" at the put of
    the spraybottle in hand), else ``None``. A second object of a pick-two task is searched for
    while the agent is not holding the first, so "another", "second" and "other" pass."""
    held = _held(traj, i)
    if held is None:
        return None
    low = " ".join(act.join_names(think).split()).lower()
    for plan in _FINDS.finditer(low):
        what = _FIND_WHAT.match(low, plan.end())
        if what is None:
            continue
        word = what.group(2) or ""
        if word.rstrip("s") == held.rstrip("s") or (what.group(1) and held in low):
            return f"plans to find a {held}, but the agent already holds one"
    return None


def _held_elsewhere(think: str, traj: Trajectory, i: int) -> str | None:
    """Why an ALFWorld think says the object the agent holds lies in or on a receptacle ("The
    spraybottle is in the cabinet and I am at the toilet, so I put the spraybottle in it" for the
    put of the spraybottle in hand: the 1.5B teacher copying its worked example), else ``None``."""
    held = _held(traj, i)
    if held is None:
        return None
    for hit in _OBJECT_IN.finditer(" ".join(act.join_names(think).split()).lower()):
        if hit.group(1) == held and hit.group(2) in act.RECEPTACLES:
            return f"says the {held} is in or on the {hit.group(2)}, but the agent holds it"
    return None


#: "The cabinet is closed", "cabinet 2 is now open": a think's claim of a receptacle's state.
_STATE_CLAIM = re.compile(r"\b([a-z]+)(?:\s+(\d+))?\s+(?:is|are)\s+(?:now\s+|still\s+|already\s+|currently\s+)?"
                          r"(open|closed)\b")
#: "The cabinet 2 is closed.": the game's words for a receptacle's state.
_GAME_STATE = re.compile(r"\b([a-z]+ \d+) is (open|closed)\b")
#: Words before a state that make it a condition, not a claim: "make sure the fridge is open".
_CONDITION = frozenset({"sure", "if", "whether", "check", "ensure", "until", "unless", "see"})
#: "A spraybottle is here in cabinet 2": an object seen in (or on) the receptacle.
_SEEN_IN = re.compile(r"\b(?:is|are)\s+(?:right\s+)?here\s+(?:on|in|inside)\s+(?:the\s+)?([a-z]+\s+\d+)\b")


def _state_unseen(think: str, traj: Trajectory, i: int, action: str) -> str | None:
    """Why an ALFWorld think tells a state of its action's receptacle that the agent cannot have
    seen before acting, else ``None`` (the 1.5B teacher, one step early and one step late):

    * before ``go to X``, X "is closed" or "is open" while no observation so far (``1..i``) gave
      X's state and the one the agent stands in shows no receptacle of X's kind in that state
      ("The cabinet is closed, so I will open it." for ``go to cabinet 2``, after "On the cabinet
      1, you see a cloth 1");
    * before ``open X`` or ``close X``, X "is (now) open" (or closed), the state this action makes,
      while the observation before it says the opposite ("The cabinet is now open. I look inside
      for the spraybottle." for ``open cabinet 2`` after "The cabinet 2 is closed."), or an object
      "is here in X" while X is closed.
    """
    current = act.command_mention(action)
    target = sorted(entities(act.join_names(action)))
    if current is None or current.concept not in ("go", "open", "close") or not target:
        return None
    place = target[-1]
    kind, number = place.rsplit(" ", 1)
    low = " ".join(act.join_names(think).split())
    now = dict(_GAME_STATE.findall((traj.steps[i].observation or "").lower()))
    claims = [h.group(3) for h in _STATE_CLAIM.finditer(low) if h.group(1) == kind
              and (h.group(2) or "") in ("", number) and not set(low[:h.start()].split()[-4:]) & _CONDITION]
    if current.concept == "go":
        known = {m for s in traj.steps[1:i + 1] for m in _GAME_STATE.findall((s.observation or "").lower())}
        for state in claims:
            if (place, state) not in known and not any(p.startswith(kind + " ") and v == state for p, v in now.items()):
                return f"says the {kind} is {state} before the agent arrives at {place}"
        return None
    result = "open" if current.concept == "open" else "closed"
    if now.get(place) == ("closed" if result == "open" else "open"):
        if result in claims:
            return f"says {place} is {result}, the state this step's action makes"
        if result == "open" and place in _SEEN_IN.findall(low):
            return f"says what is in {place}, which is closed before this step's action"
    return None


#: The two transformations that undo each other, and the task words that ask for each ("put a
#: hot apple in fridge", "cool some bread and put it in diningtable").
_OPPOSITE = {"heat": "cool", "cool": "heat"}
_GOAL_WORDS = {"heat": frozenset({"hot", "heat", "heated", "warm"}),
               "cool": frozenset({"cool", "cold", "cooled", "chilled"})}
#: Words before "for"/"to" that make it a description of a thing, not the agent's purpose:
#: "the fridge is for cooling", "an appliance used to heat food".
_DESCRIBES = _STATE | {"used", "only", "meant", "designed", "made"}


#: Words before "be <done>" that make it a purpose: "so it can be cooled", "to be heated".
_MAY_BE = frozenset({"can", "could", "to", "will", "would"})


def _task_goal(task: str) -> str | None:
    """``heat`` or ``cool`` when the task asks for exactly one of them (:data:`_GOAL_WORDS`), else ``None``."""
    words = set(re.findall(r"[a-z]+", (task or "").lower()))
    goals = [g for g, w in _GOAL_WORDS.items() if words & w]
    return goals[0] if len(goals) == 1 else None


def _opposite_purpose(tokens: list[str], task: str) -> str | None:
    """Why the think gives the opposite transformation of the task's goal as the purpose of what
    it does ("I put the hot apple in the fridge for cooling" when the task asks for a hot apple),
    else ``None``: a verb of that concept right after "for"/"to" or a passive purpose ("so it can
    be cooled down"), not negated in the three words before, and not a description of a thing
    ("the fridge is for cooling")."""
    goal = _task_goal(task)
    if goal is None:
        return None
    for j in range(1, len(tokens)):
        if act.VERBS.get(tokens[j]) != _OPPOSITE[goal]:
            continue
        # "so it can be cooled down", "to be cooled": the passive purpose
        passive = tokens[j] in act.PAST_FORMS and j >= 2 and tokens[j - 1] == "be" and tokens[j - 2] in _MAY_BE
        if not passive and (tokens[j] in act.PAST_FORMS or tokens[j - 1] not in ("for", "to")):
            continue
        if set(tokens[max(0, j - 4):j - 1]) & _NEGATION or (j >= 2 and tokens[j - 2] in _DESCRIBES):
            continue
        return f"gives '{tokens[j - 1]} {tokens[j]}' as its purpose, but the task asks to {goal}"
    return None


#: Words before a verb that make it the agent's own action now, in the present: "I take", "so I
#: go". A future ("I'll close it and go to the desk") is a plan and not judged.
_NOW = (("i",),)
#: Words that make "I <verb>" a time or condition, not the move now: "before I use the microwave".
_SUBORDINATE = frozenset({"before", "after", "when", "once", "until", "while", "if", "unless"})


def _says_it_does_another(tokens: list[str], mentions: list[act.Mention], current: act.Mention | None,
                          previous: list[act.Mention], action: str, concepts: set[str]) -> str | None:
    """Why the think says the agent does another action now, else ``None``: a first-person
    present or immediate-future verb ("I take it", "I'll go to the diningtable") of another
    concept than this step's action, while no such verb names this step's concept. A recap of
    the previous action framed as one (:func:`_framed_as_recap`: "Now I take a spraybottle (2)"
    before going on, as ReAct agents write) is not another action; the previous action told in
    the present ("The fridge is closed. I open it to see ..." after ``open fridge 1``) is."""
    verb = (action or "").split()[0].lower() if (action or "").strip() else ""
    if current is None or any(m.concept == current.concept or tokens[m.pos] == verb
                              for m in mentions if not m.past):
        # it speaks of this step's action too ("I use the microwave to heat the mug"), or in the
        # command's own verb ("I move cup 3 to diningtable 4": newer ALFWorld's put)
        return None
    now = [m for m in mentions if not m.past and any(tuple(tokens[max(0, m.pos - len(w)):m.pos]) == w for w in _NOW)
           and tokens[max(0, m.pos - 2)] not in _SUBORDINATE]  # "Before I use the microwave, I check inside"
    other = [m for m in now if m.concept in concepts
             and not (_framed_as_recap(tokens, m.pos) and any(act.same_event(m, p) for p in previous))
             and "look" not in tokens[m.pos + 1:m.pos + 4]]  # "I take a quick look"
    if other:
        m = other[0]
        return f"says the agent will now '{' '.join(tokens[m.pos:m.pos + 4])}', but this step's action is {action!r}"
    return None


#: Words before a kind name that point past this step's argument: "move on to the next drawer".
_ELSEWHERE = frozenset({"next", "another", "other"})


def _names_own_argument(tokens: list[str], action: str, current: act.Mention) -> bool:
    """Whether the think names an argument of ``action``: its numbered entity ("drawer 2"), or
    its kind without another number ("the drawer", not "drawer 1", "the next drawer")."""
    if entities(action) & entities(" ".join(tokens)):
        return True
    for j, t in enumerate(tokens):
        if act.singular(t) in current.nouns:
            numbered = j + 1 < len(tokens) and tokens[j + 1].isdigit()
            if not numbered and (j == 0 or tokens[j - 1] not in _ELSEWHERE):
                return True
    return False


def _explains_previous(tokens: list[str], mentions: list[act.Mention], current: act.Mention | None,
                       previous: list[act.Mention], action: str) -> str | None:
    """Why the think is the previous step's, else ``None``: it intends the previous action's
    verb (not as a state, "is now open", nor as a "Now I ..." recap), intends nothing of this
    step's verb, and names none of this step's arguments. Seen with the 1.5B teacher, one step
    late down a row of drawers: ``go to drawer 2`` explained by "The drawer 1 is closed. I need to
    open it first to see if there's anything inside.", ``open drawer 2`` by "Drawer 1 is now open.
    I can see nothing inside. I will move on to the next drawer." """
    if current is None or not previous or previous[0].concept == current.concept \
            or not {current.concept, previous[0].concept} <= _ACTING:
        return None
    verb = (action or "").split()[0].lower()
    intents = [m for m in mentions if not m.past and not set(tokens[max(0, m.pos - 2):m.pos]) & _STATE
               and not _framed_as_recap(tokens, m.pos)]
    if any(m.concept == current.concept or tokens[m.pos] == verb for m in intents):
        return None
    stale = [m for m in intents if m.concept == previous[0].concept]
    if not stale or _names_own_argument(tokens, action, current):
        return None
    m = stale[0]
    return (f"plans '{' '.join(tokens[m.pos:m.pos + 3])}', the previous step's action, and names nothing of this "
            f"step's action {action!r}")


#: Tokens that end a sentence (a recap opens one).
_SENTENCE_END = frozenset({".", "!", "?", ";", ":"})


def _framed_as_recap(tokens: list[str], pos: int) -> bool:
    """Whether the first-person verb at ``pos`` is framed as a recap of what was just done: a
    sentence that opens with "Now I <verb>" ("Now I take an apple (1). Next, I need to ..."), as
    ReAct agents write after each action. A present-tense purpose clause ("I open it to see if
    there's anything inside") is not: it tells an action as the one being taken."""
    return pos >= 2 and tokens[pos - 2:pos] == ["now", "i"] and (pos == 2 or tokens[pos - 3] in _SENTENCE_END)


_ACTING = frozenset({"go", "open", "close", "take", "put", "heat", "cool", "clean", "use", "examine"})


#: Other words for an argument of a command (ALFWorld's one-word kind names) that models write,
#: beyond the parts :func:`_names_argument` already accepts ("table" for ``diningtable``, "lamp"
#: for ``desklamp``).
_ARGUMENT_WORDS = {"fridge": {"refrigerator"}, "garbagecan": {"trash", "bin"}, "sofa": {"couch"},
                   "cd": {"disc"}, "sinkbasin": {"sink"}, "bathtubbasin": {"bathtub", "tub"}}


#: Words that make a ``go`` a search ("There's no mug here; I'll continue searching."): a go
#: that explores need not name where it goes.
_SEARCH = frozenset("""search searching look looking check checking find finding explore exploring scan scanning
continue resume keep elsewhere try retrace""".split())


def _names_argument(tokens: list[str], noun: str) -> bool:
    """Whether ``tokens`` name the command argument ``noun`` (a kind, no number): the word itself
    or its plural, written as two words ("dining table", "coffee machine"), or a part of at least
    four letters at its start or end ("counter", "table", "lamp", "phone"), or a word of
    :data:`_ARGUMENT_WORDS`."""
    words = {act.singular(t) for t in tokens} | {t[:-3] + "f" for t in tokens if t.endswith("ves")} \
        | {a + b for a, b in zip(tokens, tokens[1:])}
    if noun in words or words & _ARGUMENT_WORDS.get(noun, set()):
        return True
    return any(len(w) >= 4 and w != noun and (noun.startswith(w) or noun.endswith(w)) for w in words)


#: "was already open", "is already closed", "already opened": a state claimed before the action
#: that makes it.
_ALREADY = re.compile(r"\b(?:(?:is|was|were|are)\s+already|already)\s+(open|closed)(?:ed)?\b|\bwas\s+(open|closed)\b",
                      re.I)


#: The think's conclusion, what it decides to do now: "so I close the fridge", "so I will take it"
#: ("so I can heat it" is a purpose, not a decision).
_CONCLUSION = re.compile(r"\bso\s+(?:now\s+)?i(?:'ll|\s+will|\s+need\s+to|\s+must|\s+should|\s+am\s+going\s+to)?"
                         r"\s+([a-z]+)\b", re.I)
#: Commands that act on a thing. A go may be decided at a go to plan what follows there, "use"
#: also means choose, and a transform may be told as putting the object in its tool.
_ON_THINGS = frozenset({"take", "put", "open", "close"})
#: A go decided at a step that acts on a thing ("so I will go to the fridge" for the put there);
#: "proceed" also means carry on.
_GO_WORDS = frozenset({"go", "head", "walk", "return"})
#: "Apples are usually in the refrigerator, so I will look at diningtable 1": a usual place, then
#: another place to go to.
_USUAL_THEN = re.compile(r"\busually\s+(?:found\s+|kept\s+|stored\s+)?(?:in|on|at)\s+(?:the\s+|a\s+)?([a-z]+)"
                         r"[^.;!?]*?\bso\s+i(?:'ll|\s+will)?\s+(?:look\s+at|go\s+to|check|search)\s+(?:the\s+)?([a-z]+)",
                         re.I)
_PLACE_WORDS = {"refrigerator": "fridge", "counter": "countertop", "sink": "sinkbasin"}


def _other_conclusion(think: str, action: str) -> str | None:
    """Why the think decides on another command than ``action`` ("The apple is now in the fridge,
    so I close the fridge" or "so I will go to the fridge to do that" for ``put apple 1 in/on
    fridge 1``), else ``None``. Not judged at a go, which may plan what follows there."""
    current = act.command_mention(action)
    if current is None or current.concept not in _ACTING or current.concept == "go":
        return None
    for m in _CONCLUSION.finditer(think or ""):
        concept = act.VERBS.get(m.group(1).lower())
        if (concept in _ON_THINGS or m.group(1).lower() in _GO_WORDS) and concept != current.concept \
                and not (concept == "put" and current.concept in ("heat", "cool", "clean")):
            return f"decides {m.group(0).strip()!r}, but this step's action is {action!r}"
    return None


def _usual_elsewhere(think: str) -> str | None:
    """Why the think sends the agent elsewhere than the place it calls usual, else ``None``."""
    for m in _USUAL_THEN.finditer(think or ""):
        usual, goes = (_PLACE_WORDS.get(w, act.singular(w)) for w in (m.group(1).lower(), m.group(2).lower()))
        if usual in act.RECEPTACLES and goes in act.RECEPTACLES and usual != goes:
            return f"says the usual place is the {usual}, then goes to the {goes}"
    return None


def _already(think: str, action: str) -> str | None:
    """Why the think contradicts the state ``action`` changes (``open X`` / ``close X``): it calls
    X already in the state the action brings about, else ``None``."""
    words = action.split()
    if len(words) < 2 or words[0].lower() not in ("open", "close"):
        return None
    made = "open" if words[0].lower() == "open" else "closed"
    for m in _ALREADY.finditer(think or ""):
        if (m.group(1) or m.group(2)).lower() == made:
            return f"calls it already {made} ({m.group(0)!r}), but this step's action is {action!r}"
    return None


def unrelated(think: str, action: str) -> str | None:
    """Why the think does not explain ``action`` at all, else ``None``: for a command of the
    ALFWorld grammar (an acting verb of :func:`pipeline.quality.actions.command_mention`), a think
    that names neither the command's verb (any form or synonym of its concept) nor any of its
    arguments (object or receptacle kind). "I need to heat the apple first. Apples are usually in
    the microwave for heating." for ``open fridge 1`` says nothing of opening nor of the fridge. A
    pronoun alone ("I check it") does not name an argument: without the verb nothing says what
    it stands for. WebShop's ``search``/``click`` and other commands are not judged."""
    current = act.command_mention(action)
    if current is None or current.concept not in _ACTING:
        return None
    tokens = act.tokenize(think)
    verb = action.split()[0].lower()
    if any(act.VERBS.get(t) == current.concept or t == verb for t in tokens):
        return None  # its concept in any form, or the command's own verb ("move" of "move cup 3 to ...")
    if current.concept == "go" and _SEARCH & set(tokens):
        return None  # "I'll keep looking elsewhere": a go that explores
    if current.concept == "go" and any(set(current.nouns) & act.TRANSFORM_TOOLS.get(act.VERBS.get(t, ""), set())
                                       for t in tokens):
        return None  # "I should wash it" before going to the sinkbasin: the purpose of the go
    if any(_names_argument(tokens, n) for n in current.nouns):
        return None
    named = " nor ".join(dict.fromkeys(current.nouns)) or "its object"
    return f"names neither '{current.concept}' nor {named}, so it does not explain {action!r}"


#: "The apple is now in the fridge": a place the object is said to be in already.
_NOW_IN = re.compile(r"\b(?:is|are)\s+now\s+(?:in|on|inside)\s+(?:the\s+)?([a-z]+)\b", re.I)


def _put_told_done(think: str, action: str) -> str | None:
    """Why the think of ``put X in/on Y`` tells the object as already in the kind of Y ("The apple
    is now in the fridge, which is where it should be", the 1.5B teacher), else ``None``. Of the
    1,176 recorded ALFWorld thoughts of the shared data one says so at its put (an after-the-fact
    thought of a two-object task)."""
    words = (action or "").lower().split()
    if len(words) < 4 or words[0] != "put" or "in/on" not in words:
        return None
    target = act.singular(words[words.index("in/on") + 1])
    hit = next((m for m in _NOW_IN.finditer(think or "") if act.singular(m.group(1).lower()) == target), None)
    return f"tells this step's own put as done ({hit.group(0)!r})" if hit else None


def narration(think: str, action: str, earlier_actions: Iterable[str] = ()) -> str | None:
    """Why the think is narration, else ``None``: a third-person actor ("the agent") as in a
    report, the game's second-person observation text ("you see a cloth 1", :data:`_GAME_TEXT`),
    a put told as done (:func:`_put_told_done`), or the step's own action told in the past tense ("I opened cabinet 2") when no
    ``earlier_actions`` (the trajectory's actions before it) did the same."""
    hit = _THIRD_PERSON.search(think or "")
    if hit:
        return f"speaks of {hit.group(0).strip()!r} in the third person"
    hit = _GAME_TEXT.search(think or "")
    if hit:
        return f"quotes the game's observation ({hit.group(0)!r}) instead of reasoning"
    hit = _SECOND_PERSON.search(think or "")
    if hit:
        return f"talks to the agent in the second person ({hit.group(0).strip(' .!?')!r}) instead of reasoning as 'I'"
    if done := _put_told_done(think, action):
        return done
    current = act.command_mention(action)
    if current is None:
        return None
    tokens = act.tokenize(think)
    earlier = [(m, entities(act.join_names(a))) for a in earlier_actions if (m := act.command_mention(a)) is not None]
    for m in act.text_mentions(think):
        # "the first card I placed" speaks of an earlier put, not of this one
        # "placed in the microwave" at a put in the fridge is another put
        elsewhere = current.concept == "put" and any(n in act.RECEPTACLES for n in m.nouns) \
            and not any(n in current.nouns for n in m.nouns if n in act.RECEPTACLES)
        if not (m.past and _claims_done(tokens, m) and act.same_event(m, current)) or elsewhere:
            continue
        # a recap of an earlier action on the same thing; "I opened drawer 2" is no recap of "open drawer 1"
        named = entities(" ".join(tokens[m.pos:m.pos + 4]))
        if not any(act.same_event(m, d) and (not named or named & done) for d, done in earlier):
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
            continue
        why = unrelated(think, actions[i])
        if why:
            out.append(Violation("think_unrelated", f"the think for step {i} {why}; say why the agent takes this "
                                                    "action now"))
    return out

"""Reading ALFWorld's text: command templates, names, and the lists in observations.

The command templates are those of ALFWorld's TextWorld grammar (``alfworld/data/alfred.twl2``,
actions ``GotoLocation``, ``OpenObject``, ``CloseObject``, ``PickupObject``, ``PutObject``,
``HeatObject``, ``CoolObject``, ``CleanObject``, ``SliceObject``, ``ToggleObject``, ``examine``,
``inventory``, ``look``, ``help``). ALFWorld 0.2 (the version of ReAct's and ETO's traces)
writes the put command ``put {o} in/on {r}``, later versions ``move {o} to {r}``; both are read.
Every game name is one lower-case word and a number (``diningtable 1``, ``soapbottle 2``): the
game generates names that way and runs a command only when it equals an applicable command.
The observation texts read here are the feedback strings of the same grammar file
(``examineReceptacle.feedback``: "On the {r}, you see ...", "The {r} is open. In it, you see
...", "The {r} is closed.").
"""
from __future__ import annotations

import re
from dataclasses import dataclass

#: One parsed command: ``verb`` (template name) and its arguments (object, receptacle...).
_TEMPLATES = (
    ("goto", re.compile(r"go to (.+)")),
    ("open", re.compile(r"open (.+)")),
    ("close", re.compile(r"close (.+)")),
    ("take", re.compile(r"take (.+?) from (.+)")),
    ("put", re.compile(r"put (.+?) in/on (.+)")),
    ("put", re.compile(r"move (.+?) to (.+)")),
    ("heat", re.compile(r"heat (.+?) with (.+)")),
    ("cool", re.compile(r"cool (.+?) with (.+)")),
    ("clean", re.compile(r"clean (.+?) with (.+)")),
    ("slice", re.compile(r"slice (.+?) with (.+)")),
    ("use", re.compile(r"use (.+)")),
    ("examine", re.compile(r"examine (.+)")),
    ("look", re.compile(r"look")),
    ("inventory", re.compile(r"inventory")),
    ("help", re.compile(r"help")),
)
#: Receptacle types each appliance command needs (``HeatObject``: MicrowaveType, ``CoolObject``:
#: FridgeType, ``CleanObject``: SinkBasinType; ALFWorld's bathrooms name it ``sinkbasin`` too,
#: and ``bathtubbasin`` is a SinkBasin-like basin in ALFRED's receptacle classes).
APPLIANCES = {"heat": ("microwave",), "cool": ("fridge",), "clean": ("sinkbasin", "bathtubbasin")}
PROPERTY = {"heat": "hot", "cool": "cool", "clean": "clean"}
LAMPS = ("desklamp", "floorlamp")

GAME_NAME = re.compile(r"[a-z]+ \d+")
NOTHING_HAPPENS = "nothing happens."
_ROOM = re.compile(r"you see ([^.]*)")
_ON = re.compile(r"on the ([^,.]+?), you see (.*?)(?:\.\s|\.$|$)", re.S)
_IN = re.compile(r"the ([^,.]+?) is open\. in it, you see (.*?)(?:\.\s|\.$|$)", re.S)
_CLOSED = re.compile(r"the ([^,.]+?) is closed\.")
_OPENED = re.compile(r"you open the ([^,.]+?)\.")
_ITEM_SPLIT = re.compile(r",\s*(?:and\s+)?|\s+and\s+")
_ARTICLE = re.compile(r"^(?:a|an|some|the)\s+")


@dataclass(frozen=True)
class Command:
    """A command matched to a template: ``verb`` and its name arguments, in template order."""
    verb: str
    args: tuple[str, ...]


def parse_command(action: str) -> Command | None:
    """The template ``action`` matches (lower-cased, whitespace collapsed), or ``None``."""
    text = " ".join(action.lower().split())
    for verb, pattern in _TEMPLATES:
        m = pattern.fullmatch(text)
        if m:
            return Command(verb, tuple(g.strip() for g in m.groups()))
    return None


def name_type(name: str) -> str:
    """``"diningtable 1"`` -> ``"diningtable"`` (the name without its number)."""
    return name.rsplit(" ", 1)[0] if " " in name else name


def squash(name: str) -> str:
    """A name without spaces, for matching a mis-spaced name to a game name."""
    return name.replace(" ", "")


def items(listing: str) -> list[str]:
    """The names of an object list ("a cup 3, an egg 1, and a fork 2" -> ["cup 3", "egg 1",
    "fork 2"]; "nothing" -> [])."""
    listing = listing.strip().rstrip(".").strip()
    if not listing or listing == "nothing":
        return []
    out = [_ARTICLE.sub("", part.strip()) for part in _ITEM_SPLIT.split(listing) if part.strip()]
    return [o for o in out if o]


def room_receptacles(observation: str) -> list[str]:
    """Receptacles of the room description ("... Looking quickly around you, you see a cabinet
    2, ..., and a toaster 1."); ``[]`` when ``observation`` is not one."""
    low = observation.lower()
    if "looking quickly around you" not in low:
        return []
    m = _ROOM.search(low.split("looking quickly around you", 1)[1])
    return items(m[1]) if m else []


def listings(observation: str) -> list[tuple[str, list[str]]]:
    """``(receptacle, objects)`` of every content list in ``observation``."""
    low = observation.lower()
    return [(m[1].strip(), items(m[2])) for rx in (_ON, _IN) for m in rx.finditer(low)]


def closed_named(observation: str) -> list[str]:
    """Receptacles the observation says are closed."""
    return [m.strip() for m in _CLOSED.findall(observation.lower())]


def rejected(observation: str) -> bool:
    """Whether the observation is the game's answer to a command it did not run."""
    return observation.strip().lower() == NOTHING_HAPPENS


_GOALS = (
    re.compile(r"(?:heat|cool|clean|find|get) (?:a|an|some|the) (?P<obj>\w+) and put it (?:in|on|in/on) (?:a |an |the )?(?P<rec>\w+)"),
    re.compile(r"(?:find )?two (?P<obj>\w+) and put them (?:in|on|in/on) (?:a |an |the )?(?P<rec>\w+)"),
    re.compile(r"put two (?P<obj>\w+) (?:in|on|in/on) (?:a |an |the )?(?P<rec>\w+)"),
    re.compile(r"put (?:a|an|some|the) (?:(?:clean|hot|cool|cold) )?(?P<obj>\w+) (?:in|on|in/on) (?:a |an |the )?(?P<rec>\w+)"),
    re.compile(r"(?:look at|examine) (?:(?:a|an|the|some) )?(?P<obj>\w+) (?:under|with|in the light of) (?:a |an |the )?(?P<rec>\w+)"),
)


def goal_names(task: str) -> tuple[str, str] | None:
    """``(object type, receptacle or lamp type)`` of an ALFWorld goal sentence ("heat some egg and
    put it in diningtable." -> ("egg", "diningtable")), or ``None`` when no template fits."""
    text = " ".join(task.lower().split())
    for rx in _GOALS:
        m = rx.search(text)
        if m:
            return m["obj"], m["rec"]
    return None

"""Rules of skills and mistakes an agent cannot use (checks: :mod:`pipeline.quality.bankrules`)."""
from __future__ import annotations

from pipeline.quality.catalog.shapes import COOL_CUP, TEACHER, mistake, skill
from pipeline.quality.registry import Rule, passes, rejects

_CAUSE = "The agent did not remember where the mug is located in the kitchen."
_BOOK = ["look at book under the desklamp", "The agent looked for a book to examine under the desklamp."]

RULES = (
    Rule("restated_action", "a skill's principle is one command in other words (one action verb, no order, "
                            "condition or reason)", (
        rejects("bank_item", skill("Go To Cabinet", "Navigate to the specified cabinet by following the sequence of "
                                                    "steps."), seen=TEACHER),
        passes("bank_item", skill("Search Unvisited Cabinets", "Go to each cabinet not yet opened before "
                                                               "revisiting any.")))),
    Rule("contradicts_success", "a skill or mistake prescribes an order of actions (or an appliance) that every "
                                "successful train episode of its kind contradicts, or, when none can tell, the order "
                                "ALFWorld's rules force (take before heat/cool/clean/use the lamp, transform before "
                                "put)", (
        rejects("bank_item", skill("Cool The Vase", "Go to the fridge before taking the vase."), kind="task_specific",
                category="cool", successes=[COOL_CUP["actions"]], seen=TEACHER),
        rejects("bank_item", skill("Heat Mug", "First locate the stoveburner, then heat the mug there."),
                kind="task_specific", category="heat",
                successes=[["go to countertop 1", "take mug 1 from countertop 1", "go to microwave 1",
                            "heat mug 1 with microwave 1"]], seen=TEACHER),
        passes("bank_item", skill("Cool Before Placing", "Take the cup first, then cool it in the fridge before "
                                                         "placing it."), kind="task_specific", category="cool",
               successes=[COOL_CUP["actions"]]))),
    Rule("duplicate_mistake", "a common mistake whose cause or fix is near-identical to an earlier one's (verbs "
                              "compared as actions: select = click)", (
        rejects("bank_answer", [mistake("Forgot the mug.", _CAUSE, "Note where each object is seen."),
                                mistake("Forgot the cup.", _CAUSE.replace("mug", "cup"), "Look in every cabinet once.")],
                kind="mistake", seen=TEACHER),
        passes("bank_answer", [mistake("Forgot the mug.", _CAUSE, "Note where each object is seen."),
                               mistake("Bought the wrong size.", "The agent did not check if it matches the "
                                                                 "description.", "Compare the size with the goal.")],
               kind="mistake"))),
    Rule("episode_specific", "an ALFWorld common mistake names the goal object and a receptacle of one of its source "
                             "tasks (\"The book is not moved from shelf to dining table\"): one episode retold; a "
                             "TextWorld skill or fix prescribes a compass direction (\"try moving east first\"): each "
                             "game has its own map", (
        rejects("bank_item", mistake("The book is not moved from shelf to dining table.", "The agent stopped early.",
                                     "Look for the object in all the drawers before moving it."), kind="mistake",
                sources=_BOOK, seen=TEACHER),
        rejects("bank_item", skill("Explore East", "When the coin is not in view, try moving east first."),
                env="textworld", seen="the embedded teacher's skill banks of TextWorld Express coin games"),
        passes("bank_item", mistake("The goal object is left behind.", "The agent stopped early.",
                                    "Search every receptacle of the room before giving up."), kind="mistake",
               sources=_BOOK))),
)

"""Rules of text that repeats its input or says nothing it could act on (checks:
:mod:`pipeline.quality.echo`, :mod:`pipeline.quality.topic`, :mod:`pipeline.quality.vague`)."""
from __future__ import annotations

from pipeline.quality.catalog.shapes import COIN, COOL_CUP, OUTCOME, SMALL, TEACHER, mistake, skill
from pipeline.quality.registry import Rule, passes, rejects

_SPRAY = {"task": "put some spraybottle on toilet.", "category": "pick_and_place",
          "actions": ["go to cabinet 2", "take spraybottle 2 from cabinet 2", "go to toilet 2",
                      "put spraybottle 2 in/on toilet 2"]}
_SKILLS_PROMPT = ("Mistakes seen in failed episodes. Learn from what worked and what failed. "
                  "When to apply this skill: the condition.")
_DIET = {"contextual_description": "Cooling a vase failed: the agent never used the fridge.",
         "mistakes_to_avoid": [{"trigger_condition": "eating as a child", "bad_action": "a childhood diet with too "
                                                                                      "much sugar"}]}
_VASE = {"task": "cool some vase and put it in fridge.", "category": "cool",
         "actions": ["go to shelf 1", "take vase 1 from shelf 1", "go to desk 1", "examine desk 1"]}

RULES = (
    Rule("off_topic", "embedding similarity to the source is below quality.off_topic_threshold", (
        rejects("memory", _DIET, kind="failure", **_VASE),
        passes("memory", dict(_DIET, mistakes_to_avoid=[{"trigger_condition": "holding the vase that must be cooled",
                                                         "bad_action": "examined the desk instead of cooling the vase "
                                                                       "in the fridge"}]), kind="failure", **_VASE))),
    Rule("think_is_action", "a think only restates an action string (the step's, an admissible one or one of the "
                            "trajectory: no content word of its own, at most one missing) or is a bare "
                            "action-shaped command", (
        rejects("think", "put spraybottle on toilet 2", seen=SMALL, **_SPRAY),
        rejects("pair", "go to cabinet 2", actions=["go to cabinet 2", "open cabinet 2"], seen=SMALL),
        passes("think", "The spraybottle is in my hand and the toilet is the goal, so I put it there.", **_SPRAY),
        passes("pair", "Cabinet 2 is closed; the spraybottle may be inside, so I open it.",
               actions=["go to cabinet 2", "open cabinet 2"]))),
    Rule("echo_prompt", "a skill or mistake field, or a think, is >= 80% words of the prompt template's fixed text", (
        rejects("bank_item", skill("Mistakes Seen In Failed Episodes", "Learn from what worked and failed to fail.",
                                   "When to apply this skill."), prompt=_SKILLS_PROMPT, seen=SMALL),
        rejects("memory", dict(_DIET, contextual_description="The agent looked for the cup on the countertop and "
                                                             "took it to the fridge to cool it."),
                kind="failure", examples=["The agent looked for the cup on the countertop and took it to the fridge "
                                          "to cool it."], **_VASE),
        passes("bank_item", skill("Confirm All Then Commit", "Check every attribute on the product page before "
                                                             "clicking Buy Now."), env="webshop",
               prompt=_SKILLS_PROMPT))),
    Rule("not_actionable", "a skill title of one word, or a principle or how-to-avoid with < 2 content words or that "
                           "states a fact instead of an instruction", (
        rejects("bank_item", skill("Morning Routine", "In the morning."), seen="a principle of the sample run's bank"),
        rejects("bank_item", skill("Use Desklamp Effectively", "The desklamp illuminates the object and makes it "
                                                               "easier to see its contents."), seen=TEACHER),
        passes("bank_item", skill("Track Visited Places", "Keep a list of the places already searched and go to an "
                                                          "unvisited one next.")))),
    Rule("lists_observation", "a think lists more than 3 things of the observations so far in one run (\"I see a "
                              "stove, an oven, a fridge, a counter, ...\"): an inventory, not a reason", (
        rejects("think", "I see a stove, an oven, a fridge, a counter and a kitchen cupboard, so I move west.",
                env="textworld", seen=OUTCOME, **COIN),
        passes("think", "The coin is not in the kitchen, and the closed door to the west leads on, so I move west.",
               env="textworld", **COIN))),
    Rule("vague_instruction", "a skill's principle or a fix stops at a placeholder (\"the correct location\", \"the "
                              "tool\", \"more information\", \"a specific purpose\", \"realistic\", \"a location "
                              "where\") instead of naming the thing", (
        rejects("bank_item", skill("Store Objects", "Move it to the correct location for use or storage."),
                seen=TEACHER),
        rejects("bank_item", mistake("Examined objects without a goal.", "The agent did not know what to look for.",
                                     "Examine the object to get more information about it."), kind="mistake",
                seen=TEACHER),
        passes("bank_item", skill("Cool Before Placing", "Take the object to the fridge and cool it there before "
                                                         "putting it on the target."), **COOL_CUP))),
)

"""Rules of thinks that speak of another step, explain nothing of their own, or narrate (checks:
:mod:`pipeline.quality.alignment`; a skill's narrated condition: :mod:`pipeline.quality.bankrules`)."""
from __future__ import annotations

from pipeline.quality.catalog.shapes import COOL_CUP, HOT_APPLE, TEACHER, skill
from pipeline.quality.registry import Rule, passes, rejects

RULES = (
    Rule("think_misaligned", "a think speaks of another step: an action on an entity or object other than its own "
                             "action's and the goal's, another action done now (the previous one told in the "
                             "present, not as a recap), an event that has not happened yet, the agent placed where it "
                             "does not stand, the opposite transformation of the goal (cooling in a heat task) as its "
                             "purpose, the receptacle its open (close) calls already open (closed), a decision on "
                             "another command (\"so I close the fridge\" for a put), or a usual place it then does not "
                             "go to; in TextWorld, a move, look, take or inventory other than its own, or a room no "
                             "observation so far has named", (
        rejects("think", "After cooling the cup, I move it to the diningtable.", step=1,
                seen=TEACHER + " (in the third person: the agent moves it)", **COOL_CUP),
        rejects("think", "The fridge is open. I put the hot apple in the fridge for cooling.", seen=TEACHER,
                **HOT_APPLE),
        passes("think", "Cup 3 is here. I take it so that I can cool it in the fridge next.", step=1, **COOL_CUP))),
    Rule("think_unrelated", "a think names neither its command's verb nor any of its arguments (object, receptacle): "
                            "it does not explain the action (ALFWorld-grammar commands; a go may be a search "
                            "instead)", (
        rejects("think", "I need to heat the apple first. Apples are usually in the microwave for heating.",
                step=1, seen=TEACHER, task="put a hot apple in fridge.", category="heat",
                actions=["go to fridge 1", "open fridge 1", "take apple 1 from fridge 1"]),
        passes("think", "The apple may be in the fridge, so I open it.", step=1, task="put a hot apple in fridge.",
               category="heat", actions=["go to fridge 1", "open fridge 1", "take apple 1 from fridge 1"]))),
    Rule("narration", "a think narrates in the third person (\"the agent saw ...\"), quotes the game's second-person "
                      "text (\"you see a cloth 1\", \"the product you selected\") or tells its own action as done; "
                      "talks to \"you\" (\"You are in the kitchen. You can explore ...\"); a skill's when-to-apply "
                      "tells an episode (\"When the agent did not select ...\")", (
        rejects("think", "The agent saw that the countertop 1 had an apple. The agent decided to take it.", step=1,
                seen=TEACHER + " (of cabinet 2: the agent saw that the cabinet 2 was closed)", **HOT_APPLE),
        rejects("bank_item", skill("Check Options", "Check every option before buying.",
                                   "When The agent did not select a natural-looking product: Clicked Buy Now."),
                env="webshop", seen=TEACHER),
        passes("think", "The apple is on countertop 1, so I take it to heat it next.", step=1, **HOT_APPLE),
        passes("bank_item", skill("Check Options", "Check every option before buying.",
                                  "When the product page lists options."), env="webshop"))),
)

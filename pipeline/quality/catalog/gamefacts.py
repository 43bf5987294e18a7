"""Rules of skills, fixes and thinks that say what the game does not have (checks:
:mod:`pipeline.quality.gamefacts`)."""
from __future__ import annotations

from pipeline.quality.catalog.shapes import PEN, SKILLRL, TEACHER, mistake, skill
from pipeline.quality.registry import Rule, passes, rejects

RULES = (
    Rule("self_target", "a skill or a mistake's fix puts the goal object in or on an object of its own kind (\"cool "
                        "the vase ... before putting it in the vase\")", (
        rejects("bank_item", skill("Cool Vase", "When the goal asks for a cool vase, take it first, carry it to the "
                                                "fridge and cool it there before putting it in the vase."),
                seen=TEACHER),
        passes("bank_item", skill("Pencil In Mug", "Take the pencil first, then put it in the mug.")))),
    Rule("missing_control", "a WebShop skill or fix tells the agent to use a page element WebShop does not have "
                            "(drop-down, filter, sort, slider, checkbox, cart, checkout, login, tabs)", (
        rejects("bank_item", skill("Filter by Price", "After searching for products, select the price range from the "
                                                      "drop-down menu to narrow down your results."), env="webshop",
                seen=TEACHER),
        passes("bank_item", skill("Choose Options", "Choose the size from the drop-down before clicking Buy Now."),
               env="webshop", seen=SKILLRL))),
    Rule("feeling_reason", "a skill or fix gives the agent's feelings (frustration, confusion, boredom) as the reason "
                           "for what it prescribes", (
        rejects("bank_item", skill("Skip Empty Places", "Do not revisit a place that is empty, as this may lead to "
                                                        "confusion or frustration."), seen=TEACHER),
        passes("bank_item", skill("Reread The Goal", "When confused, re-read the goal before acting.")))),
    Rule("wrong_category", "an ALFWorld task-specific skill prescribes a step no successful episode of its category "
                           "takes (a transform in pick-and-place, a put in look-at-in-light, another category's "
                           "transform)", (
        rejects("bank_item", skill("Move Object To Target", "When the goal requires moving an object, take the "
                                                            "object, then go to the target receptacle and place it "
                                                            "there."),
                kind="task_specific", category="look_at_obj_in_light", seen=TEACHER),
        passes("bank_item", skill("Light Then Examine", "Take the object first, then go to the desklamp and turn it "
                                                        "on while holding it."),
               kind="task_specific", category="look_at_obj_in_light"))),
    Rule("not_portable", "an ALFWorld skill or fix has the agent pick up a lamp, appliance or receptacle, or use "
                         "something from its inventory (\"use the desklamp from your inventory\"): the game never "
                         "allows it", (
        rejects("bank_item", skill("Use Desklamp", "When the goal asks for a desklamp, use the desklamp from your "
                                                   "inventory."), seen=TEACHER),
        passes("bank_item", skill("Hold Then Light", "Keep the object in your inventory and go to the desklamp to "
                                                     "turn it on.")))),
    Rule("false_game_fact", "an ALFWorld think, skill or fix keeps a lamp inside a container or on a drawer, has a "
                            "receptacle found somewhere (\"drawers are usually on the shelves\"), has a lamp show "
                            "contents or help a search, sends the agent to another room, or gives a lamp or appliance "
                            "a transform it does not do (\"desklamps are usually used to clean pens\"); a TextWorld "
                            "skill or fix that prescribes look around to find or check something (a room's "
                            "description is shown whole on entering it)", (
        rejects("think", "Desklamps are usually used to clean pens.", seen=TEACHER, **PEN),
        rejects("bank_item", skill("Scan The Room", "Look around to find objects or clues before moving."),
                env="textworld", seen="the embedded teacher's skill banks of TextWorld Express coin games"),
        passes("think", "The pen is not in drawer 1, so I go to drawer 2 to look for it.", **PEN),
        passes("bank_item", skill("Open Doors", "When a closed door blocks the way, open it before moving."),
               env="textworld"))),
    Rule("instance_number", "an ALFWorld skill or fix names a numbered instance (\"the cabinet 3\"), which differs "
                            "in every episode", (
        rejects("bank_item", mistake("The egg is left on the counter.", "The agent did not finish the move.",
                                     "Move the egg from the encil 1 to the cabinet 3 before placing it on the dining "
                                     "table."), kind="mistake", seen=TEACHER),
        passes("bank_item", mistake("The egg is left on the counter.", "The agent did not finish the move.",
                                    "Take the egg to the goal receptacle before anything else."), kind="mistake"))),
)

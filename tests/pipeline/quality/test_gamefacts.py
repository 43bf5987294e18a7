"""Rules that check a skill-bank item against facts of the game (pipeline.quality.gamefacts).

Bad data: items of the bank the 1.5B teacher built from the shipped sample
(tests/fixtures/quality/teacher_bank_*.json). Good data: SkillRL's released ALFWorld, WebShop
and Search banks (55, 66 and 41 items), where only ``missing_control`` fires, on six WebShop
items that tell the agent to use a filter, sort, slider, cart, checkout or tabs WebShop lacks."""
from __future__ import annotations

import json
import os

import pytest

from pipeline.bank.judge import ItemJudge
from pipeline.core.config import QualityConfig
from pipeline.quality import gamefacts
from tests.helpers.paths import FIXTURES

SKILLRL = {"alfworld": os.path.join(FIXTURES, "skillrl-memory", "alfworld", "claude_style_skills.json"),
           "webshop": os.path.join(FIXTURES, "skillrl-memory", "webshop", "claude_style_skills.json"),
           "search": os.path.join(FIXTURES, "formats", "real", "claude_style_skills_search.json")}


def teacher_item(env: str, title: str) -> dict:
    with open(os.path.join(FIXTURES, "quality", f"teacher_bank_{env}.json"), encoding="utf-8") as f:
        bank = json.load(f)
    items = bank["general_skills"] + [s for v in bank["task_specific_skills"].values() for s in v]
    return next(s for s in items if s["title"] == title)


def bank_items(env: str) -> list[tuple[str, str, dict]]:
    """``(kind, name, item)`` of every skill and mistake of a SkillRL bank."""
    with open(SKILLRL[env], encoding="utf-8") as f:
        bank = json.load(f)
    groups = bank.get("task_specific_skills") or bank.get("query_type_skills")
    skills = bank["general_skills"] + [s for v in groups.values() for s in v]
    return ([("skill", s["title"], s) for s in skills]
            + [("mistake", m["description"], m) for m in bank["common_mistakes"]])


#: The rules of pipeline.quality.gamefacts that judge a skill or fix (the others need a category or games).
GAME_FACTS = {"self_target", "missing_control", "not_portable", "false_game_fact", "instance_number", "feeling_reason"}


def verdicts(env: str, kind: str, item: dict) -> list:
    """Those rules' violations of one item, as the skills stage judges it (pipeline.bank.judge.ItemJudge)."""
    judge = ItemJudge("mistake" if kind == "mistake" else "general", QualityConfig(off_topic_threshold=-1), env=env)
    return [v for v in judge.judge([item])[0] if v.reason in GAME_FACTS]


def test_the_goal_object_put_in_itself():
    cool_vase = teacher_item("alfworld", "Cool Vase")["principle"]
    assert cool_vase == ("When the goal asks for a cool vase, take it first, carry it to the fridge and cool it there "
                         "before putting it in the vase.")
    assert gamefacts.self_target(cool_vase, "Cool Vase") == "vase"
    [v] = gamefacts.self_target_violations("skills[0].principle", cool_vase)
    assert v.reason == "self_target" and v.detail.startswith("skills[0].principle puts the vase in or on a vase")
    # the same teacher's "Cool Cup" (quarantined then for its sinkbasin): "it" is the cup
    assert gamefacts.self_target("When the goal asks for a cool cup, take it first, carry it to the sinkbasin and "
                                 "cool it there before putting it in the cup.") == "cup"
    # "it" with no object named before it refers to the title's object
    assert gamefacts.self_target("Take it and put it on the plate.", "Chill Plate") == "plate"
    assert gamefacts.self_target("Take the pencil and put it in the mug.", "Pencil In Mug") is None
    assert gamefacts.self_target("Cool the apple, then place it on the plate.") is None
    assert gamefacts.self_target("Put the vase in the cabinet, not on the shelf.") is None


def test_a_webshop_control_that_does_not_exist():
    price = teacher_item("webshop", "Filter by Price")["principle"]
    assert price == ("After searching for products, select the price range from the drop-down menu to narrow down "
                     "your results.")
    assert gamefacts.missing_controls(price) == ["drop-down", "menu", "price control"]
    [v] = gamefacts.control_violations("skills[1].principle", price)
    assert v.reason == "missing_control" and v.detail.endswith(
        "search[...] and click[...] on a product id, an option or Search, Back to Search, < Prev, Next >, "
        "Description, Features, Reviews, Buy Now")
    assert gamefacts.missing_controls("Sort the results by price and open the cheapest.") == ["sort"]
    assert gamefacts.missing_controls("Add the item to the cart, then log in to your account.") == ["cart", "login"]
    # WebShop's options read as a drop-down or a filter: the click exists
    assert gamefacts.missing_controls("Choose the size from the drop-down menu before Buy Now.") == []
    assert gamefacts.missing_controls("Use the size filter on the product page.") == []
    # a price filter stays one when the same clause also names an option (the teacher's bank, run of the sample)
    assert gamefacts.missing_controls(
        "On a product page, click on the price range filter to select the desired price range, then click on the "
        "size filter to select the desired size.") == ["filter", "price control"]
    assert gamefacts.missing_controls("On a product page, click the filter button to select the desired price range "
                                      "and size constraints before clicking Buy Now.") == ["filter", "price control"]
    # a price to click, wherever it is (the teacher's bank, run of the sample); a price in the query is no control
    assert gamefacts.missing_controls("Before clicking 'Buy Now', select a price constraint that matches the budget "
                                      "you have.") == ["price control"]
    assert gamefacts.missing_controls("Before clicking 'Buy Now', select the size that matches the budget you "
                                      "have.") == ["price control"]
    assert gamefacts.missing_controls("Select the size that matches the task, then check the price.") == []
    assert gamefacts.missing_controls("Specify a price range in your search query. After adding attributes, set a "
                                      "price constraint.") == []
    # text pages show no picture (same bank); "titles and thumbnails" as a list to read passes (SkillRL's bank)
    assert gamefacts.missing_controls("On a product page, look at the product image to determine if it meets the "
                                      "natural looking requirement.") == ["image"]
    assert gamefacts.missing_controls("Do not rely on photos; read the Features.") == []
    # advice against an element, and a negation too far back to reach it
    assert gamefacts.missing_controls("Do not re-apply the same filters on one product.") == []
    assert gamefacts.missing_controls("Do not guess. Apply the price filter after searching.") == ["filter"]
    # the project's real pages: the buttons the rule names as what WebShop has
    assert gamefacts.missing_controls("Click [Features] and [Reviews], then [Back to Search] or [Next >].") == []


def test_a_lamp_or_tool_the_game_never_lets_the_agent_carry():
    """Two general skills of the 1.5B teacher's bank on the sample (run with llama-server): the
    lamp and "the appropriate tool" used from the inventory; carrying the goal object is fine."""
    assert gamefacts.fixed_things("When the goal asks for a desklamp, use the desklamp from your inventory.") \
        == ["use the desklamp from your inventory"]
    [v] = gamefacts.fixed_violations("skills[0].principle",
                                     "When the goal requires a tool, use the appropriate tool from your inventory.")
    assert v.reason == "not_portable" and "(use the appropriate tool from your inventory)" in v.detail
    assert gamefacts.fixed_things("Pick up the desk lamp and carry it to the bed.") == ["desklamp"]
    assert gamefacts.fixed_things("Take it from the desk, then go to the desklamp and use it.") == []
    assert gamefacts.fixed_things("Take the mug from the cabinet; the mug is now in your inventory.") == []
    # SkillRL's "Target object is in inventory" (a when-to-apply) names no use
    assert gamefacts.fixed_things("Target object is in inventory and at least one desklamp location is known") == []


def test_a_lamp_in_a_drawer_or_a_tool_that_does_another_transform():
    """Thinks of the 1.5B teacher for "examine the pen with the desklamp" (distill, source thoughts
    ignored, on the shipped sample); denied or rightly placed tools pass."""
    assert gamefacts.false_facts("I need a desklamp first. Desklamps are usually in drawers, so I will look at "
                                 "drawer 2.") == ["a lamp kept in drawers"]
    assert gamefacts.false_facts("Desklamps are usually used to clean pens, so I will look at the drawer 3.") \
        == ["the desklamp to clean"]
    assert gamefacts.false_facts("The pen needs to be examined, but I need to first get the desklamp out of the "
                                 "drawer.") == ["a lamp kept in drawer"]
    assert gamefacts.false_facts("I use the desklamp to examine the pen I took out of the drawer.") == []
    [v] = gamefacts.false_fact_violations("think for step 1", "Desklamps are used for cleaning and inspecting objects.")
    assert v.reason == "false_game_fact" and "(the desklamp for cleaning)" in v.detail
    assert gamefacts.false_facts("I go to the fridge to heat the apple.") == ["the fridge to heat"]
    # a sampled think of the teacher: the fridge ends its clause, the heat is another one
    assert gamefacts.false_facts("The goal asks for the apple to be hot, so before putting it in the fridge, I need "
                                 "to heat it first.") == []
    # the teacher's cool skill, and a ReAct failure thought: the game's cool acts at once
    assert gamefacts.false_facts("When you need to cool an object, take it to the fridge and wait until it is "
                                 "cold.") == ["a wait for a transform"]
    assert gamefacts.false_facts("I can place the pan inside to let it cool down.") == ["a wait for a transform"]
    assert gamefacts.false_facts("This can be done by waiting for 10-20 minutes or using a cooling device.") \
        == ["a wait for a transform"]
    assert gamefacts.false_facts("I cool the pan with the fridge, then wait for nothing and go on.") == []
    # ETO's agent, rightly: a denial, and a clause that names the right tool too
    assert gamefacts.false_facts("The microwave is empty and not suitable for cooling the tomato.") == []
    assert gamefacts.false_facts("I take the mug from the fridge to heat it in the microwave.") == []
    assert gamefacts.false_facts("The desklamp is on the desk 1, so I go there to look at the pen.") == []
    assert gamefacts.false_facts("I go to the sinkbasin to clean the mug, then to the fridge to cool it.") == []
    # the teacher's bank with narrow worked examples: a heated fridge, a used toilet
    assert gamefacts.false_facts("To heat the fridge, locate the fridge and then heat it using the microwave.") \
        == ["heat the fridge"]
    assert gamefacts.false_facts("Use the toilet after using a bathroom or shower.") == ["use the toilet"]
    assert gamefacts.false_facts("Use the desklamp to look at the pen, and use the microwave to heat the potato.") == []


def test_a_place_found_somewhere_or_a_lamp_on_a_drawer():
    """The 1.5B teacher's sampled thinks that copy the worked example's "<object>s are usually in
    <place>" with a place or a lamp as the object; objects found in places pass."""
    assert gamefacts.false_facts("The pen needs to be examined first. Drawers are usually on the shelves, so I will "
                                 "look at drawer 3.") == ["a drawer found somewhere"]
    assert gamefacts.false_facts("Fridges are usually on countertops, so I will look at countertop 1.") \
        == ["a fridge found somewhere"]
    assert gamefacts.false_facts("Desklamps are usually on drawers, so I will look at drawer 3.") \
        == ["a lamp kept in drawers"]
    assert gamefacts.false_facts("Pens are usually in drawers, so I will look at drawer 4.") == []
    assert gamefacts.false_facts("A desklamp is usually on a desk or a sidetable.") == []


def test_a_lamp_that_shows_contents_or_helps_a_search():
    """The 1.5B teacher's look-in-light skills (bank of the shipped sample): the lamp lights the
    object in hand; what a receptacle holds is seen by going there or opening it. ReAct's plan
    "find and take a bowl, then find and use a desklamp" (recorded, right) passes."""
    assert gamefacts.false_facts("When looking for an object, use a desklamp to illuminate it and observe its "
                                 "contents.") == ["a lamp that shows contents", "a lamp used to search"]
    assert gamefacts.false_facts("The desklamp illuminates the object and makes it easier to see its contents.") \
        == ["a lamp that shows contents"]
    assert gamefacts.false_facts("Use the desklamp to find the pen.") == ["a lamp used to search"]
    assert gamefacts.false_facts("To solve the task, I need to find and take a bowl, then find and use a desklamp.") == []
    assert gamefacts.false_facts("Look for the desklamp while searching the room, then use it.") == []


def test_a_numbered_instance_in_a_bank_item():
    """A fix of the 1.5B teacher's ALFWorld mistakes (the sample, narrow worked examples)."""
    fix = "Move the egg from the encil 1 to the cabinet 3 before placing it on the dining table."
    assert gamefacts.numbered_instances(fix) == ["cabinet 3"]  # "encil" is no kind the game has
    [v] = gamefacts.instance_violations("mistakes[0].how_to_avoid", fix)
    assert v.reason == "instance_number" and v.detail.startswith("mistakes[0].how_to_avoid names cabinet 3:")
    assert gamefacts.numbered_instances("Put the pen on dining table 1, then open drawer 2.") == ["diningtable 1",
                                                                                               "drawer 2"]
    assert gamefacts.numbered_instances("Open each cabinet once; at most 2 visits per place.") == []


def test_a_feeling_given_as_the_reason():
    revisit = teacher_item("alfworld", "Avoid Revisiting Empty Places")["principle"]
    assert revisit == "Do not revisit a place that is empty, as this may lead to confusion or frustration."
    assert gamefacts.feeling_words(revisit) == ["confusion", "frustration"]
    [v] = gamefacts.feeling_violations("skills[2].principle", revisit)
    assert v.reason == "feeling_reason" and "(confusion, frustration) as a reason" in v.detail
    assert gamefacts.feeling_words("Keep moving to avoid boredom.") == ["boredom"]
    # a state the rule applies in, a mix-up of two things, and a verb are no reasons
    assert gamefacts.feeling_words("When confused, re-read the goal before acting.") == []
    assert gamefacts.feeling_words("Avoid confusing the 5x with the 5x-large size.") == []
    assert gamefacts.feeling_words("Use metrics that discourage repeating identical actions.") == []


@pytest.mark.parametrize("env,count", [("alfworld", 55), ("webshop", 66), ("search", 41)])
def test_skillrl_banks(env, count):
    """Measured: self_target, feeling_reason, not_portable, false_game_fact and instance_number fire
    on none of SkillRL's 162 items;
    missing_control on six WebShop items, each naming an element WebShop does not have."""
    items = bank_items(env)
    assert len(items) == count
    fired = {name: sorted({v.reason for v in verdicts(env, kind, item)}) for kind, name, item in items}
    fired = {k: v for k, v in fired.items() if v}
    assert fired == ({} if env != "webshop" else {
        "Iterative Query Refinement": ["missing_control"],      # "or apply site filters"
        "Use Result Pagination": ["missing_control"],           # "adjust sorting/filters"
        "Refine If No Match": ["missing_control"],              # "add filters (e.g., synonyms, price slider)"
        "Ignoring shipping costs or add-on pricing that push the total above the user\u2019s budget.":
            ["missing_control"],                                # "after adding to cart or at checkout"
        "Skipping availability checks and attempting to purchase out-of-stock variants, leading to failure "
        "screens.": ["missing_control"],                        # "the 'Add to Cart/Buy Now' button"
        "Navigating back to the results page after configuring a product, causing loss of selected options and "
        "wasted steps.": ["missing_control"]})                  # "open new tabs/windows"


#: Task skills of the 1.5B teacher's bank from one run on the shipped sample (llama-server, greedy).
TEACHER_TASK_SKILLS = [
    ("pick_and_place", "Start by searching the most likely locations for the object. Once found, prepare it by "
                       "transforming it into a state that is suitable for the target.", ["transform"]),
    ("pick_and_place", "Take the object first, carry it to the microwave, fridge, sinkbasin, or desklamp, and "
                       "transform it there before going to the target.", ["transform"]),
    ("look_at_obj_in_light", "When the goal requires moving an object from one receptacle to another, go to the "
                             "source receptacle first, take the object, then go to the target receptacle and place "
                             "it there.", ["put"]),
    ("heat", "When the goal asks for a hot object, take it first, carry it to the microwave and heat it there before "
             "going to the target.", []),
    ("heat", "When the goal asks for a hot object, take it first, carry it to the microwave and heat it there and "
             "put it at the target.", []),
]


@pytest.mark.parametrize("category, principle, expected", TEACHER_TASK_SKILLS)
def test_a_step_the_category_never_takes(category, principle, expected):
    assert gamefacts.foreign_actions(principle, category) == expected
    got = gamefacts.category_violations("skills[0].principle", principle, category)
    assert [v.reason for v in got] == ["wrong_category"] * bool(expected)


def test_states_and_other_categories_pass():
    # past forms are the goal's state, not a step; "use" is free; unknown categories are not judged
    assert gamefacts.foreign_actions("If the goal says heated, cooled or cleaned, do that at the appliance first.",
                                     "pick_and_place") == []
    assert gamefacts.foreign_actions("Use the desklamp once the object is in hand.", "look_at_obj_in_light") == []
    assert gamefacts.foreign_actions("Put the cheapest match in the cart.", "other") == []
    assert gamefacts.foreign_actions("Cool the mug in the fridge, then put it in the cabinet.", "heat") == ["cool"]


def test_no_skillrl_task_skill_is_in_the_wrong_category():
    with open(SKILLRL["alfworld"], encoding="utf-8") as f:
        bank = json.load(f)
    items = [(c, s["principle"]) for c, v in bank["task_specific_skills"].items() for s in v]
    assert len(items) == 32
    assert [(c, p[:40]) for c, p in items if gamefacts.foreign_actions(p, c)] == []


def test_rooms_the_agent_cannot_go_to():
    """An ALFWorld episode is one room. The 1.5B teacher's skill "Look in the kitchen, living room,
    bathroom ..." led its thinks to "I will go back to the kitchen to look for it." (distill of
    "examine the pen with the desklamp"); ETO's "looking around the kitchen" it stands in is right,
    and SkillRL's unnamed "rooms/containers" pass."""
    assert gamefacts.false_facts("Look in the kitchen, living room, bathroom, and other common areas for the "
                                 "object.") == ["several rooms"]
    assert gamefacts.false_facts("I need to find a pen in one of these drawers. I will go back to the kitchen to look "
                                 "for it.") == ["a room to go to"]
    assert gamefacts.false_facts("I'll start by looking around the kitchen for them.") == []
    # a closed cabinet told as locked (the teacher's think for "open cabinet 2", every earlier action shown)
    assert gamefacts.false_facts("The cabinet 2 is closed and I can't open it without knowing the password. I need "
                                 "to go to another room to get the password.") == ["another room", "a lock"]
    assert gamefacts.false_facts("Maintain an exploration map that records which rooms/containers have been fully "
                                 "inspected.") == []


def test_a_transform_done_at_a_place_that_cannot_do_it():
    """The 1.5B teacher's "Heat Egg on Dining Table: When the observation says an egg must be heated,
    heat it on the dining table." (title and principle); the transform at its appliance, a put after
    it and a past transform pass."""
    assert gamefacts.false_facts("When the observation says an egg must be heated, heat it on the dining table.") \
        == ["heat it at the diningtable"]
    assert gamefacts.false_facts("Heat Egg on Dining Table") == ["heat it at the diningtable"]
    assert gamefacts.false_facts("Heat the mug in the microwave and put it on the diningtable.") == []
    assert gamefacts.false_facts("I need to cool the bread before putting it on the diningtable.") == []
    assert gamefacts.false_facts("I heated the egg in the microwave, now I put it on the dining table.") == []
    assert gamefacts.false_facts("Clean the mug with the sinkbasin 1.") == []


# TextWorld Express: every item of the three banks the 1.5B teacher built from coin games (the
# outcome runs), with what fires on it; the last one is vague but names no route and no look around.
TEXTWORLD_TEACHER = [
    ({"title": "Look Around", "principle": "The agent should look around the current room to find objects or clues.",
      "when_to_apply": "After exploring the current room, the agent can move north to look around."},
     {"false_game_fact", "episode_specific"}),
    ({"title": "Search Pantry", "principle": "The agent must move south to explore other parts of the pantry.",
      "when_to_apply": "When the agent is in the pantry and does not move south, it should move south to explore "
                       "other parts of the pantry."}, {"episode_specific"}),
    ({"title": "Explore Room First", "principle": "Before moving into a new room, explore it thoroughly by looking "
                                                  "around and taking any objects you see.",
      "when_to_apply": "When the agent is about to move into a new room."}, {"false_game_fact"}),
    ({"title": "Move East First", "principle": "If the goal object is not visible, try moving east first. This can "
                                               "help you find the object by exploring the kitchen and pantry areas.",
      "when_to_apply": "When the agent is in a room with no objects or the goal object is not visible."},
     {"episode_specific"}),
    # the general answer of the same run, asked again with a larger token cap
    ({"title": "Search for Objects", "principle": "When the agent is in a room with objects, search for the object they "
                                                  "want to use. If the object is not found, try looking around and "
                                                  "inventorying the room.",
      "when_to_apply": "When the agent is in a room with objects and wants to use one of them."}, {"false_game_fact"}),
    ({"title": "Inventory Room", "principle": "When the agent is in a room with objects, inventory the room to see what "
                                              "objects are available.",
      "when_to_apply": "When the agent is in a room with objects and wants to decide which object to use."},
     {"false_game_fact"}),
    # the general answer once the outlines of the successes were in the prompt
    ({"title": "Inventory Before Moving", "principle": "Before moving into a new room, inventory all the items in the "
                                                       "current room to ensure you have what you need before making "
                                                       "your move.",
      "when_to_apply": "When the agent is in a room and wants to move to another room."}, {"false_game_fact"}),
    # the GRPO skill updater after failed put-away games
    ({"title": "Quickly Identify Obstacles", "principle": "When the agent encounters an obstacle, quickly identify it by "
                                                          "looking at its color or texture.",
      "when_to_apply": "When the agent is blocked."}, {"false_game_fact"}),
    # the general answer of the fifth outcome run (the worked skill about inventory, bent)
    ({"title": "Inventory Check Before Move", "principle": "Before moving into a new room, check your inventory to "
                                                           "ensure you don't have any objects that could block your path.",
      "when_to_apply": "When the agent plans to move to a new room."}, {"false_game_fact"}),
    ({"title": "Check Every Room", "principle": "Ensure that the agent checks all rooms and objects before making any "
                                                "decisions.", "when_to_apply": "When the coin is not in sight."}, set()),
]


@pytest.mark.parametrize("item,reasons", TEXTWORLD_TEACHER)
def test_textworld_look_around_and_fixed_routes_fire(item, reasons):
    found = {v.reason for f in ("title", "principle", "when_to_apply") for v in gamefacts.textworld_violations(f, item[f])}
    assert found == reasons


@pytest.mark.parametrize("text", [
    "Read the room description once and do not look around again.",
    "Take the exit to a room not yet visited instead of looking around.",
    "Remember which exits were already taken and choose one that leads somewhere new.",
    "Check your inventory before moving into a new room.",
    "A closed door blocks your path: open it before you move through it.",
    "Nothing blocks your path, so move on to a room not yet visited.",
])
def test_textworld_advice_against_look_around_or_without_a_route_passes(text):
    assert gamefacts.textworld_violations("principle", text) == []


def test_skillrl_banks_never_prescribe_look_around_or_a_compass_route():
    """None of SkillRL's 162 items (ALFWorld, WebShop, Search) would fire the TextWorld rules."""
    items = [(env, item) for env in SKILLRL for _, _, item in bank_items(env)]
    fired = [(env, f, item[f]) for env, item in items for f in ("title", "principle", "when_to_apply", "how_to_avoid")
             if item.get(f) and gamefacts.textworld_violations(f, item[f])]
    assert len(items) == 162 and fired == []


def test_the_textworld_item_judge_quarantines_them():
    from pipeline.bank.judge import ItemJudge
    from pipeline.core.config import QualityConfig
    judge = ItemJudge("task_specific", QualityConfig(off_topic_threshold=-1), category="find_coin", env="textworld")
    verdicts = judge.judge([item for item, _ in TEXTWORLD_TEACHER])
    assert [sorted({v.reason for v in vs} & {"false_game_fact", "episode_specific"}) for vs in verdicts] == \
        [sorted(r) for _, r in TEXTWORLD_TEACHER]
    mistake = ItemJudge("mistake", QualityConfig(off_topic_threshold=-1), env="textworld")
    found = mistake.judge([{"description": "The agent does not move to the pantry",
                            "why_it_happens": "The agent did not move south or west to explore the pantry.",
                            "how_to_avoid": "Move south or west to explore the pantry."}])
    assert [v.reason for v in found[0] if v.reason == "episode_specific"] == ["episode_specific"]


def _coin_game(room: str, exits: str, admissible: list[str]):
    from pipeline.core.records import Step, Trajectory
    steps = [Step(0, None, f"You are in the {room}. In one part of the room you see a fridge that is closed. {exits}",
                  admissible), Step(1, "take coin", "You take the coin.", [], 1.0, True)]
    return Trajectory("t", "textworld", "g1", "find the coin", "find_coin", "success", 1.0, steps, "u", "fmt", 0)


NO_DOORS = _coin_game("kitchen", "To the North you see the pantry.", ["move north", "take coin", "look around"])
WITH_DOORS = _coin_game("kitchen", "Through a closed wooden door to the North you see the pantry.",
                        ["open door to north", "take coin"])
#: The 1.5B teacher's coin bank items about doors and keys (coin games without doors).
DOOR_ITEMS = [
    {"title": "Use Objects Effectively", "principle": "When using an object, make sure to use it correctly and "
     "efficiently. For example, if you have a key and a door, use the key to open the door.",
     "when_to_apply": "When the agent is using an object in a room or container."},
    {"description": "The agent tries to move north when there is a closed door blocking its exit.",
     "why_it_happens": "The agent does not open the door before moving north.",
     "how_to_avoid": "Open the door first and only then move through it; moving into a closed door wastes a step."},
]


def test_a_door_or_key_no_source_game_shows_is_a_false_game_fact():
    seen = " ".join(NO_DOORS.steps[0].admissible_actions + [NO_DOORS.steps[0].observation]).lower()
    assert gamefacts.unseen_things(DOOR_ITEMS[0]["principle"], seen) == ["door", "key"]
    assert gamefacts.unseen_things("Unlock the chest before taking the coin.", seen) == ["lock"]
    assert gamefacts.unseen_things("Open the fridge and take what it holds.", seen) == []
    assert gamefacts.unseen_violations("principle", DOOR_ITEMS[0]["principle"], "") == []  # no source game: off


@pytest.mark.parametrize("games,skill_words,mistake_words", [
    ([NO_DOORS], ["door", "key"], ["door"]),
    ([WITH_DOORS], ["key"], []),  # doors are real there; a key is not
    ([], [], []),                 # no source game: not judged
])
def test_the_textworld_judge_checks_doors_against_its_source_games(games, skill_words, mistake_words):
    from pipeline.bank.judge import ItemJudge
    from pipeline.core.config import QualityConfig
    qcfg = QualityConfig(off_topic_threshold=-1)
    skill = ItemJudge("general", qcfg, successes=games, env="textworld").judge(DOOR_ITEMS[:1])[0]
    mistake = ItemJudge("mistake", qcfg, successes=games, env="textworld").judge(DOOR_ITEMS[1:])[0]

    def words(verdict):
        return sorted({d.split(" is about a ")[1].split(",")[0] for d in (v.detail for v in verdict)
                       if " is about a " in d})
    assert (words(skill), words(mistake)) == (sorted(skill_words), mistake_words)
    assert all(v.reason == "false_game_fact" for v in skill + mistake if " is about a " in v.detail)

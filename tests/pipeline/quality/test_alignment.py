"""Think rules ``think_misaligned`` and ``narration``: the 1.5B teacher's bad thinks fire, the
recorded thoughts of real agents do not."""
from __future__ import annotations

import pytest

from pipeline.core.records import Step, Trajectory
from pipeline.quality import alignment
from tests.helpers.quality_data import parsed_sample


def trajectory(task: str, actions: list[str], category: str = "pick_and_place") -> Trajectory:
    steps = [Step(0, None, "You are in the middle of a room.")] + [Step(i, a, "ok") for i, a in enumerate(actions, 1)]
    return Trajectory("t", "alfworld", "e", task, category, "success", 1.0, steps, "u", "f", 0)


PEN = trajectory("examine the pen with the desklamp",
                 ["go to drawer 1", "open drawer 1", "close drawer 1", "go to drawer 2", "go to drawer 3", "go to drawer 4"])
CUP = trajectory("cool some cup and put it in diningtable.", ["go to countertop 2", "take cup 3 from countertop 2"], "cool")


def test_a_think_about_another_receptacle_or_an_event_not_yet_happened():
    assert alignment.misaligned("I open drawer 1 again and find the pen in it.", PEN, 5, "go to drawer 4") \
        .startswith("acts on drawer 1")
    assert alignment.misaligned("After cooling the cup, I move it to the diningtable.", CUP, 1,
                                "take cup 3 from countertop 2").startswith("says 'cooling the cup' happened")
    assert alignment.misaligned("I take the mug from the countertop.", CUP, 1, "take cup 3 from countertop 2") \
        == "takes mug, but this step's action is 'take cup 3 from countertop 2'"


def test_a_think_about_its_own_step_is_aligned():
    assert alignment.misaligned("Drawer 1 was empty, so I go to drawer 4 to look for the pen.", PEN, 5,
                                "go to drawer 4") is None
    assert alignment.misaligned("Cup 3 is here. I take it so that I can cool it in the fridge next.", CUP, 1,
                                "take cup 3 from countertop 2") is None


def test_a_webshop_think_that_searches_before_a_click():
    import dataclasses
    task = "i'm looking for a styling cream that is cruelty free and for short hair, and price lower than 40.00 dollars"
    shop = dataclasses.replace(trajectory(task, ["search[styling cream cruelty free short hair]", "click[b008hrrwhm]",
                                                 "click[8.5 ounce (pack of 1)]", "click[buy now]"]), env="webshop")
    # the 1.5B teacher's think for click[Buy Now], asked alone after its chunk was rejected
    assert alignment.misaligned("I search for a styling cream that is cruelty free and for short hair, and price lower "
                                "than 40.00 dollars.", shop, 3, "click[buy now]").startswith(
        "says the agent will now 'I search', but this step's action is 'click[buy now]'")
    # one step late: the option clicked before, told as this step's click (the teacher, recorded thoughts ignored)
    assert alignment.misaligned("I select the '8.5 ounce (pack of 1)' option before buying.", shop, 3,
                                "click[buy now]").startswith("says the agent will now 'i select the '8.5 ounce (pack of "
                                                             "1)', the previous step's click")
    assert alignment.misaligned("I selected the '8.5 ounce (pack of 1)' option, so I click buy now.", shop, 3,
                                "click[buy now]") is None
    assert alignment.misaligned("I searched for the cream; B008HRRWHM fits, so I click it.", shop, 1,
                                "click[b008hrrwhm]") is None
    assert alignment.misaligned("I search with the product type and its attributes.", shop, 0,
                                "search[styling cream cruelty free short hair]") is None


def test_a_webshop_think_that_selects_an_option_before_buying():
    """``click[Buy Now]`` explained by an option selection the think says comes first (the 1.5B
    teacher on the sample's microphone episode, which clicked no option at all)."""
    import dataclasses
    mic = dataclasses.replace(trajectory("i want a noise cancelling cosycost usb microphone, and price lower than 50.00 "
                                         "dollars", ["search[noise cancelling cosycost usb microphone]",
                                                     "click[B0972Q1T8T]", "click[Buy Now]"]), env="webshop")
    assert alignment.misaligned("I select the size option for the noise cancelling cosycost usb microphone before "
                                "buying.", mic, 2, "click[Buy Now]").startswith("says the agent will now 'i select")
    assert alignment.misaligned("Every option I need is selected and the price is under 50 dollars, so I buy it now.",
                                mic, 2, "click[Buy Now]") is None
    assert alignment.misaligned("I select the black color before buying.", mic, 1, "click[black]") is None
    # the click before told as this one, with no word of buying (the same teacher, same episode and the cream's)
    assert alignment.misaligned("The first result is a Cosycost USB Microphone, which matches my requirements. I open "
                                "it to see more details.", mic, 2, "click[Buy Now]") == (
        "says the agent will now 'i open' and never that it buys, but this step's action is 'click[Buy Now]'")
    assert alignment.misaligned("I select the '8.5 ounce' option from the product details page because it matches my "
                                "requirement.", mic, 2, "click[Buy Now]").startswith("says the agent will now 'i select'")
    assert alignment.misaligned("I checked the features; it matches, so I click Buy Now.", mic, 2, "click[Buy Now]") is None


def test_a_think_that_goes_or_looks_elsewhere():
    """The 1.5B teacher writing every think of "heat some mug and put it in coffeemachine" (recorded
    thoughts ignored): its worked example copied with one word changed, and a countertop it never
    visits; a sink for the sinkbasin and ETO's two-word names are the same place."""
    mug = trajectory("heat some mug and put it in coffeemachine.", ["go to sinkbasin 1", "take mug 1 from sinkbasin 1",
                                                                   "go to microwave 1", "heat mug 1 with microwave 1",
                                                                   "go to coffeemachine 1"], "heat")
    assert alignment.misaligned("The goal asks for a hot mug, so before the coffeemachine I go to the sinkbasin to "
                                "wash it.", mug, 2, "go to microwave 1") \
        == "goes to sinkbasin, but this step's action is 'go to microwave 1'"
    assert alignment.misaligned("Mugs are usually on countertops, so I will look at countertop 3.", mug, 0,
                                "go to sinkbasin 1") == "will look at countertop 3, which this step's action does not name"
    assert alignment.misaligned("The mug may need washing, so I'll go to the sink first.", mug, 0,
                                "go to sinkbasin 1") is None
    # after the heat: planning it again is the previous steps' reasoning, not this go's
    assert alignment.misaligned("I will heat the mug with the microwave and then place it in the coffeemachine.",
                                mug, 4, "go to coffeemachine 1") \
        == "plans 'i will heat the mug', which an earlier action already did"
    assert alignment.misaligned("Now that the mug is heated, I'll put it on the coffeemachine.", mug, 4,
                                "go to coffeemachine 1") is None
    # where it stands: after ``go to sinkbasin 1`` the mug is not "here on countertop 1" (the worked
    # example's words); one receptacle of the same kind with another number is another place
    assert alignment.misaligned("Mug 1 is here on countertop 1. I take it so I can heat it.", mug, 1,
                                "take mug 1 from sinkbasin 1") == "says the agent is at countertop 1, but it stands at sinkbasin 1"
    assert alignment.misaligned("Mug 1 is here on the sinkbasin 1. I take it so I can heat it.", mug, 1,
                                "take mug 1 from sinkbasin 1") is None
    pen = trajectory("examine the pen with the desklamp.", ["go to drawer 1", "open drawer 1", "go to drawer 2"],
                     "look_at_obj_in_light")
    assert alignment.misaligned("The goal asks for a pen, so before the desklamp I go to the drawer 1 to find it.", pen,
                                2, "go to drawer 2") == "goes to drawer 1, but this step's action is 'go to drawer 2'"
    assert alignment.misaligned("Drawer 1 held nothing, so I go to drawer 2 next.", pen, 2, "go to drawer 2") is None
    eto = trajectory("put a creditcard in dining table.", ["go to dining table 1"])
    assert alignment.misaligned("The first place to check is the dining table 1.", eto, 0,
                                "go to dining table 1") is None
    assert alignment.unrelated("I should place the tomato back on the dining table.", "go to dining table 1") is None


def test_a_receptacle_called_already_in_the_state_the_action_makes():
    """A sampled think of the 1.5B teacher for ``open drawer 2`` after "The drawer 2 is closed.";
    the state the action changes, seen rightly, passes."""
    pen = trajectory("examine the pen with the desklamp.", ["go to drawer 1", "open drawer 1", "go to drawer 2",
                                                            "open drawer 2"], "look_at_obj_in_light")
    assert alignment.misaligned("I need to look inside the drawer. Since the drawer 2 was already open when I went to "
                                "it, there should be something in it now.", pen, 3, "open drawer 2") \
        == "calls it already open ('was already open'), but this step's action is 'open drawer 2'"
    assert alignment.misaligned("The drawer 2 is closed, so I open it to look for the pen.", pen, 3,
                                "open drawer 2") is None
    assert alignment.misaligned("The drawer 2 is already closed, so I go on.", pen, 3, "go to drawer 3") is None


def test_a_decision_on_another_command_or_a_usual_place_not_gone_to():
    """Sampled retries of the 1.5B teacher for "put a hot apple in fridge"; ETO's plans at a go
    ("so I need to open it to look inside" before ``go to cabinet 2``) and a transform told as
    putting the object in its tool pass."""
    apple = trajectory("put a hot apple in fridge.", ["go to fridge 1", "open fridge 1", "go to diningtable 1",
                                                      "take apple 1 from diningtable 1", "go to microwave 1",
                                                      "heat apple 1 with microwave 1", "go to fridge 1",
                                                      "put apple 1 in/on fridge 1"], "pick_heat_then_place_in_recep")
    assert alignment.misaligned("The apple is now in the fridge, so I close the fridge to complete the task.", apple,
                                7, "put apple 1 in/on fridge 1") \
        == "decides 'so I close', but this step's action is 'put apple 1 in/on fridge 1'"
    assert alignment.misaligned("The goal asks for the apple to be put in the fridge, so I will go to the fridge to "
                                "do that.", apple, 7, "put apple 1 in/on fridge 1") \
        == "decides 'so I will go', but this step's action is 'put apple 1 in/on fridge 1'"
    assert alignment._other_conclusion("There is an apple inside, so I will proceed with putting the potato in.",
                                       "put potato 1 in/on microwave 1") is None  # ETO: proceed = carry on
    assert alignment.misaligned("I need to heat the apple first. Apples are usually in the refrigerator, so I will "
                                "look at diningtable 1.", apple, 2, "go to diningtable 1") \
        == "says the usual place is the fridge, then goes to the diningtable"
    assert alignment.misaligned("Cabinet 2 is my next place to search. It's closed, so I need to open it to look "
                                "inside.", apple, 2, "go to cabinet 2") is None
    assert alignment.misaligned("I need to heat the apple, so I'll place it inside and use the microwave.", apple, 5,
                                "heat apple 1 with microwave 1") is None
    assert alignment.misaligned("Apples are usually on the diningtable, so I will look at diningtable 1.", apple, 2,
                                "go to diningtable 1") is None


def test_narration_in_the_third_person_or_after_the_fact():
    assert alignment.narration("The agent saw that the cabinet 2 was closed. The agent decided to open cabinet 2.",
                               "open cabinet 2") == "speaks of 'The agent' in the third person"
    assert alignment.narration("Cabinet 2 was closed, so I opened it.", "open cabinet 2").startswith(
        "tells this step's own action as done")
    assert alignment.narration("Cabinet 2 is closed; I need to open it to look inside.", "open cabinet 2") is None
    # the game's own second-person text quoted as the think (the 1.5B teacher)
    assert alignment.narration("On the cabinet 1, you see a cloth 1, a soapbar 1, a soapbottle 1.", "open cabinet 2") \
        == "quotes the game's observation ('you see a') instead of reasoning"
    assert alignment.narration("Go to toilet 1. You pick up the spraybottle 2 from the cabinet 2.", "go to toilet 1") \
        == "quotes the game's observation ('You pick up the') instead of reasoning"
    assert alignment.narration("The weather is nice today and I like football, you see.", "go to desk 1") is None
    assert alignment.narration("You have clicked 8.5 ounce (pack of 1) before buying.", "click[Buy Now]") \
        == "quotes the game's observation ('You have clicked') instead of reasoning"
    assert alignment.narration("I see the product you selected is a 8.5 ounce styling cream pack of 1.",
                               "click[Buy Now]") == "quotes the game's observation ('you selected') instead of reasoning"
    # an earlier put of the same kind is a recap, not this step told as done
    two = trajectory("put two cd in safe", ["take cd 1 from desk 1", "go to safe 1", "put cd 1 in/on safe 1",
                                            "take cd 2 from desk 2", "put cd 2 in/on safe 1"])
    assert alignment.narration("With the first cd placed, I put the second one in the safe.", "put cd 2 in/on safe 1",
                               two.actions[:4]) is None


@pytest.mark.parametrize("sample, thoughts", [("eto-alfworld", 21), ("react-alfworld", 11), ("react-webshop", 7),
                                              ("reflexion-fewshot-failures", 12)])
def test_recorded_thoughts_of_the_samples_pass(sample, thoughts, tmp_path):
    """Measured on the recorded thoughts of the whole shared ETO, ReAct ALFWorld and ReAct WebShop
    sets (1,776 thoughts): 14 fire, all ETO's, each a defect of its record or a thought that does
    not explain its step (a pot called cooled before the cool action, a heated apple put in the
    fridge "to cool it down", thoughts about the coffee table while the agent opens drawers).
    The samples' thoughts: none."""
    _, trajs = parsed_sample(tmp_path, sample, sample)
    n, fired = 0, []
    for t in trajs:
        for i in range(len(t.steps) - 1):
            think, action = (t.steps[i + 1].thought or "").strip(), t.steps[i + 1].action or ""
            if think:
                n += 1
                if why := alignment.narration(think, action, t.actions[:i]) or alignment.misaligned(think, t, i, action) \
                        or alignment.unrelated(think, action):
                    fired.append((i, why))
    assert n == thoughts and fired == []


def test_a_think_that_does_another_action_now():
    """Two 1.5B thinks of the sample: 'open cabinet 2' explained by taking a soapbottle, and
    'heat apple 1 with microwave 1' by going to the diningtable. A ReAct recap of the previous
    action ("Now I take a spraybottle (2)") before going on is no other action."""
    spray = trajectory("put some spraybottle on toilet.", ["go to cabinet 1", "go to cabinet 2", "open cabinet 2",
                                                           "take spraybottle 2 from cabinet 2", "go to toilet 1"])
    assert alignment.misaligned("Soapbottle 1 is in the cabinet 1. I take it so I can use it for the toilet.",
                                spray, 2, "open cabinet 2").startswith("says the agent will now 'take it")
    # the teacher's own words also put the agent at cabinet 1, while it stands at cabinet 2
    assert alignment.misaligned("Soapbottle 1 is here in the cabinet 1. I take it so I can use it for the toilet.",
                                spray, 2, "open cabinet 2") == "says the agent is at cabinet 1, but it stands at cabinet 2"
    assert alignment.misaligned("Now I take a spraybottle (2). Next, I need to put it in/on toilet 1.", spray, 4,
                                "go to toilet 1") is None
    apple = trajectory("put a hot apple in fridge.", ["go to diningtable 1", "take apple 1 from diningtable 1",
                                                      "go to microwave 1", "heat apple 1 with microwave 1"], "heat")
    assert alignment.misaligned("The goal asks for a hot apple, so before putting it in the fridge I go to the "
                                "diningtable to place it.", apple, 3, "heat apple 1 with microwave 1") \
        .startswith("says the agent will now 'go to the diningtable'")
    assert alignment.misaligned("I use the microwave to heat the apple.", apple, 3,
                                "heat apple 1 with microwave 1") is None


#: The 1.5B teacher's run on the sample's "put a hot apple in fridge" (think i explains action i + 1).
HOT_APPLE = trajectory("put a hot apple in fridge.",
                       ["go to fridge 1", "open fridge 1", "go to diningtable 1", "take apple 1 from diningtable 1",
                        "go to microwave 1", "heat apple 1 with microwave 1", "go to fridge 1",
                        "put apple 1 in/on fridge 1"], "heat")


def think_reasons(think: str, traj: Trajectory, i: int) -> list[str]:
    return [v.reason for v in alignment.think_violations([(i, think)], traj, {i: traj.actions[i]})]


def test_the_teachers_thinks_that_do_not_explain_their_step():
    """Three thinks the older rules let through, and four of the same run that must still pass."""
    # open fridge 1: neither opening nor the fridge, and a false belief
    think = "I need to heat the apple first. Apples are usually in the microwave for heating."
    assert alignment.unrelated(think, "open fridge 1") == \
        "names neither 'open' nor fridge, so it does not explain 'open fridge 1'"
    assert think_reasons(think, HOT_APPLE, 1) == ["think_unrelated"]
    # go to diningtable 1: the previous action (open fridge 1) told as if done now
    think = "The fridge is closed. I open it to see if there's anything inside."
    assert alignment.misaligned(think, HOT_APPLE, 2, "go to diningtable 1") == \
        "says the agent will now 'open it to see', but this step's action is 'go to diningtable 1'"
    assert think_reasons(think, HOT_APPLE, 2) == ["think_misaligned"]
    # put apple 1 in/on fridge 1 in a heat task: cooling is not the purpose
    think = "The fridge is open. I put the hot apple in the fridge for cooling."
    assert alignment.misaligned(think, HOT_APPLE, 7, "put apple 1 in/on fridge 1") == \
        "gives 'for cooling' as its purpose, but the task asks to heat"
    think = ("I will heat the apple so it can be cooled down and stored safely in the fridge.")  # a sampled retry
    assert alignment.misaligned(think, HOT_APPLE, 5, "heat apple 1 with microwave 1") == \
        "gives 'be cooled' as its purpose, but the task asks to heat"
    good = {3: "Now I find an apple (1). Next, I need to take it.",
            4: "Now I take an apple (1). Next, I need to go to a microwave (1) and heat it.",
            5: "The microwave is closed. I heat the apple with the microwave before putting it in the fridge.",
            7: "The fridge is open. I put the hot apple in it, as the task asks."}
    assert {i: think_reasons(t, HOT_APPLE, i) for i, t in good.items()} == {i: [] for i in good}
    cabinet = trajectory("put some spraybottle on toilet.", ["go to cabinet 1", "go to cabinet 2", "open cabinet 2"])
    assert think_reasons("Cabinet 2 is closed. I open it to see if there's anything inside.", cabinet, 2) == []


def test_a_recap_must_open_with_now_i():
    """The same words as a ReAct recap, but told as the action being taken: not a recap."""
    assert alignment.misaligned("Now I open the fridge (1). Next, I need to find an apple.", HOT_APPLE, 2,
                                "go to diningtable 1") is None
    assert alignment.misaligned("I open the fridge (1) to find an apple.", HOT_APPLE, 2, "go to diningtable 1") \
        == "says the agent will now 'open the fridge 1', but this step's action is 'go to diningtable 1'"
    # newer ALFWorld's put is "move X to Y": the command's own verb is this step's action, not a go
    moved = trajectory("put a cup in diningtable.", ["go to diningtable 4", "move cup 3 to diningtable 4"])
    assert alignment.misaligned("I move cup 3 to diningtable 4 now.", moved, 1, "move cup 3 to diningtable 4") is None


def test_what_names_an_action():
    """The verb in any form or synonym, an argument in two words or by a part of it, a search
    for a go, or the transformation the go's target is for; a pronoun alone names nothing."""
    assert alignment.unrelated("The dining table may have the apple.", "go to diningtable 1") is None
    assert alignment.unrelated("The table may have it.", "go to diningtable 1") is None
    assert alignment.unrelated("I'll head there next.", "go to diningtable 1") is None
    assert alignment.unrelated("Back to the shelves it is.", "go to shelf 4") is None
    assert alignment.unrelated("There's no mug here. I'll keep looking.", "go to cabinet 8") is None
    assert alignment.unrelated("I have the cup; I should wash it before putting it away.", "go to sinkbasin 1") is None
    assert alignment.unrelated("I have the cup; I should wash it before putting it away.", "go to microwave 1") == \
        "names neither 'go' nor microwave, so it does not explain 'go to microwave 1'"
    assert alignment.unrelated("It is closed, so I check it.", "open drawer 3") == \
        "names neither 'open' nor drawer, so it does not explain 'open drawer 3'"
    assert alignment.unrelated("Here it is! I'll grab it.", "take apple 1 from diningtable 1") is None
    assert alignment.unrelated("I move it there now.", "move cup 3 to diningtable 4") is None
    # WebShop commands and words outside the grammar are not judged
    assert alignment.unrelated("The second item looks right.", "click[B07XYZ]") is None
    assert alignment.unrelated("Nothing fits; try again.", "search[red mug]") is None
    assert alignment.unrelated("I am done.", "done") is None


def test_the_opposite_purpose_only_as_the_agents_purpose():
    """A fridge described as for cooling, a negated purpose, a cool task's own cooling and a
    cool task given a heating purpose."""
    assert alignment.misaligned("The fridge is for cooling, so I go to the microwave to heat it.", HOT_APPLE, 4,
                                "go to microwave 1") is None
    assert alignment.misaligned("I put the apple in the fridge. I don't want to cool it.", HOT_APPLE, 7,
                                "put apple 1 in/on fridge 1") is None
    cool = trajectory("cool some bread and put it in diningtable.", ["go to fridge 1", "cool bread 1 with fridge 1"],
                      "cool")
    assert alignment.misaligned("I go to the fridge to cool the bread.", cool, 0, "go to fridge 1") is None
    assert alignment.misaligned("I go to the fridge to heat the bread.", cool, 0, "go to fridge 1") == \
        "gives 'to heat' as its purpose, but the task asks to cool"


def test_a_think_one_step_late():
    """The 1.5B teacher's thinks down a row of drawers, each the one of the step before; the
    ReAct recaps and the thinks that name their own step pass."""
    acts = ["go to drawer 1", "open drawer 1", "go to drawer 2", "open drawer 2", "go to drawer 3",
            "take pen 2 from drawer 3", "go to dresser 1"]
    pen = trajectory("examine the pen with the desklamp.", acts, "look_at_obj_in_light")
    late = {2: "The drawer 1 is closed. I need to open it first to see if there's anything inside.",
            3: "Drawer 1 is now open. I can see nothing inside. I will move on to the next drawer."}
    assert alignment.misaligned(late[2], pen, 2, acts[2]) == (
        "plans 'open it first', the previous step's action, and names nothing of this step's action 'go to drawer 2'")
    assert alignment.misaligned(late[3], pen, 3, acts[3]).startswith("plans 'move on to', the previous step's")
    assert think_reasons(late[2], pen, 2) == ["think_misaligned"]
    fine = {1: "I need to examine the pen. I will look at it in the drawer.",
            2: "Drawer 1 is closed; I will open drawer 2 after going there.",  # names its own entity
            3: "The drawer 2 is closed. I open it to look for the pen.",
            5: "Now I find a pen (2). Next, I need to take it.",
            6: "Now I take a pen (2). Next, I need to find a desklamp, starting with dresser 1."}
    assert {i: alignment.misaligned(t, pen, i, acts[i]) for i, t in fine.items()} == {i: None for i in fine}


def test_a_state_the_agent_has_not_seen_yet():
    """The 1.5B teacher's thinks in the shipped spraybottle episode: one step early (the cabinet
    "is closed" before the agent reaches it) and one step late (it "is now open" before the open);
    the thinks that read the observation before them pass."""
    acts = ["go to cabinet 1", "go to cabinet 2", "open cabinet 2", "take spraybottle 2 from cabinet 2"]
    seen = ["You are in the middle of a room.", "On the cabinet 1, you see a cloth 1, a soapbar 1.",
            "The cabinet 2 is closed.", "You open the cabinet 2. The cabinet 2 is open. In it, you see a spraybottle 2.",
            "You pick up the spraybottle 2 from the cabinet 2."]
    spray = Trajectory("t", "alfworld", "e", "put some spraybottle on toilet.", "pick_and_place", "success", 1.0,
                       [Step(i, ([None] + acts)[i], o) for i, o in enumerate(seen)], "u", "f", 0)
    early = "I need to find the spraybottle on the cabinet. The cabinet is closed, so I will open it."
    assert alignment.misaligned(early, spray, 1, acts[1]) == "says the cabinet is closed before the agent arrives at cabinet 2"
    late = "The cabinet is now open. I look inside for the spraybottle."
    assert alignment.misaligned(late, spray, 2, acts[2]) == "says cabinet 2 is open, the state this step's action makes"
    peek = "The spraybottle 1 is here on cabinet 2. I open the cabinet 2 to see if it contains any other items."
    assert alignment.misaligned(peek, spray, 2, acts[2]) == "says what is in cabinet 2, which is closed before this step's action"
    assert think_reasons(early, spray, 1) == ["think_misaligned"]
    fine = {1: "Cabinet 1 holds no spraybottle. I go to cabinet 2 and make sure the cabinet is open before I look.",
            2: "The cabinet 2 is closed. I open it to look for the spraybottle.",
            3: "The cabinet 2 is open and the spraybottle 2 is here in cabinet 2. I take it."}
    assert {i: alignment.misaligned(t, spray, i, acts[i]) for i, t in fine.items()} == {i: None for i in fine}


def test_a_transform_planned_again_as_a_purpose():
    """"I need to heat the apple first ... so I will use the microwave to heat the apple." before
    the final put, after the heat was done (the 1.5B teacher); a recap of the heat passes."""
    acts = ["go to diningtable 1", "take apple 1 from diningtable 1", "go to microwave 1", "heat apple 1 with microwave 1",
            "go to fridge 1", "put apple 1 in/on fridge 1"]
    apple = trajectory("put a hot apple in fridge.", acts, "heat")
    again = ("I need to heat the apple first before putting it in the fridge. Apples are usually heated in the "
             "microwave, so I will use the microwave to heat the apple.")
    assert alignment.misaligned(again, apple, 5, acts[5]).startswith("plans 'need to heat the apple', which an earlier")
    for fine in ("The apple is hot now. I was asked to heat it, so I put it in the fridge as the task says.",
                 "I don't need to heat it again; I put the hot apple in the fridge."):
        assert alignment.misaligned(fine, apple, 5, acts[5]) is None, fine


def test_a_put_explained_as_a_look():
    """``put spraybottle 2 in/on toilet 1`` got "... so I will look at toilet 1." (the 1.5B
    teacher, the search of an earlier step); a put that also looks passes."""
    acts = ["go to cabinet 2", "take spraybottle 2 from cabinet 2", "go to toilet 1", "put spraybottle 2 in/on toilet 1"]
    spray = trajectory("put some spraybottle on toilet.", acts)
    look = "The goal asks for a spraybottle on the toilet. Spraybottles are usually in toilets, so I will look at toilet 1."
    assert alignment.misaligned(look, spray, 3, acts[3]) == (
        "says the agent will look at toilet 1, but this step's action is 'put spraybottle 2 in/on toilet 1'")
    assert alignment.misaligned("I need to find the spraybottle on the toilet. I will look at the cabinet where the "
                                "toilet is located.", spray, 3, acts[3]).startswith("says the agent will look at the cabinet,")
    assert alignment.misaligned("I will check toilet 1 once more and put the spraybottle there.", spray, 3, acts[3]) is None
    assert alignment.misaligned("Cabinets hold spraybottles, so I will look at cabinet 2.", spray, 0, acts[0]) is None


def test_the_teachers_thinks_that_contradict_a_step_the_demonstration_took():
    """Four thinks of the 1.5B teacher that the rules before let through (the default run on the
    shipped sample, every earlier action shown), and the right thinks of the same steps."""
    spray = trajectory("put some spraybottle on toilet.",
                       ["go to cabinet 1", "go to cabinet 2", "open cabinet 2", "take spraybottle 2 from cabinet 2",
                        "go to toilet 1", "put spraybottle 2 in/on toilet 1"])
    # the open succeeded in the demonstration; nothing in the game is locked
    think = ("The cabinet 2 is closed and I can't open it without knowing the password. I need to go to another "
             "room to get the password.")
    assert alignment.misaligned(think, spray, 2, "open cabinet 2") == \
        "says 'can't open', but this step's action is 'open cabinet 2'"
    assert think_reasons(think, spray, 2) == ["think_misaligned"]
    # a plain put, with a cleaning the task never asks for
    think = ("The goal is to put some spraybottle on the toilet. Before putting it there, I need to make sure the "
             "bottle is clean and accessible.")
    assert alignment.misaligned(think, spray, 5, "put spraybottle 2 in/on toilet 1") == \
        "requires 'make sure the bottle is clean', which the task does not ask"
    clean = trajectory("put a clean cloth in cabinet.", ["go to sinkbasin 1"], "clean")
    assert alignment._adds_a_condition("I make sure the cloth is clean before the cabinet.", clean.task) is None
    assert think_reasons("I hold spraybottle 2 at the toilet, so I put it there to finish the task.", spray, 5) == []
    assert think_reasons("Cabinet 2 is closed, so I open it to look for a spraybottle.", spray, 2) == []
    # the put told as done before it happens
    think = "The apple is now in the fridge, which is where it should be for a hot apple."
    assert alignment.narration(think, "put apple 1 in/on fridge 1") == \
        "tells this step's own put as done ('is now in the fridge')"
    assert think_reasons(think, HOT_APPLE, 7) == ["narration"]
    assert alignment.narration("The apple is now hot, so I put it in the fridge.", "put apple 1 in/on fridge 1") is None
    # an earlier put into another receptacle (the heat told as one) is no put told as done
    think = ("The previous actions show that the apple has already been taken from the diningtable and placed in "
             "the microwave. To complete the task, I will now move the apple into the fridge.")
    assert alignment.narration(think, "put apple 1 in/on fridge 1", HOT_APPLE.actions[:7]) is None
    assert alignment.narration("I have placed the apple in the fridge.", "put apple 1 in/on fridge 1",
                               HOT_APPLE.actions[:7]) == "tells this step's own action as done ('have placed the apple')"


def test_a_go_planned_to_the_place_the_agent_already_reached():
    """The open of drawer 4 right after going there, explained as the go (the 1.5B teacher's pen
    search, one step late); a plan to go on to the next drawer, or the go's own think, passes."""
    pen = trajectory("examine the pen with the desklamp.",
                     ["go to drawer 3", "open drawer 3", "go to drawer 4", "open drawer 4", "take pen 2 from drawer 4"])
    think = "I need to examine the pen with the desklamp. I will go to the drawer 4."
    assert alignment.misaligned(think, pen, 3, "open drawer 4") == (
        "plans 'i will go to the drawer 4', where the previous action already went, but this step's action is "
        "'open drawer 4'")
    assert think_reasons(think, pen, 3) == ["think_misaligned"]
    assert think_reasons("Drawer 4 is closed, so I open it to look for the pen.", pen, 3) == []
    assert alignment._goes_where_it_is("No pen here, so I will go to drawer 4 next.", "open drawer 3",
                                       "go to drawer 3") is None
    assert alignment._goes_where_it_is(think, "go to drawer 4", "open drawer 3") is None
    # a look at the place is the open's own purpose, not the heat's
    assert alignment._goes_where_it_is("Pens are usually in drawers, so I will look at drawer 4.", "open drawer 4",
                                       "go to drawer 4") is None
    think = "I need to heat the apple first. Apples are usually in the microwave, so I will look at the microwave 1."
    assert think_reasons(think, HOT_APPLE, 5) == ["think_misaligned"]
    assert alignment._goes_where_it_is(think, "heat apple 1 with microwave 1", "go to microwave 1").startswith(
        "plans 'i will look at the microwave 1', where the previous action already went")


def test_a_buy_argued_against_or_a_search_planned_instead():
    import dataclasses
    task = "i'm looking for a styling cream that is cruelty free and for short hair, and price lower than 40.00 dollars"
    shop = dataclasses.replace(trajectory(task, ["search[styling cream cruelty free short hair]", "click[b008hrrwhm]",
                                                 "click[8.5 ounce (pack of 1)]", "click[Buy Now]"]), env="webshop")
    think = ("I need to find a styling cream that is cruelty free and for short hair, and price lower than 40.00 "
             "dollars. I already have an option with a name that matches 'styling cream', but the price is higher "
             "than 40.00. I need to search again for a more suitable product.")
    assert alignment.misaligned(think, shop, 3, "click[Buy Now]").startswith(
        "says the agent will now 'I need to search', but this step's action is 'click[Buy Now]'")
    assert alignment._buys_over_budget(think, "click[Buy Now]").startswith(
        "calls the price too high ('price is higher than')")
    # recorded thoughts: too expensive said of another product before clicking the next one
    assert alignment.misaligned("B08YDJ5ZFP is too expensive. I can check B09GN2YW11.", shop, 1,
                                "click[b008hrrwhm]") is None
    assert alignment.misaligned("The item is what I need and under 40 dollars, so I buy it.", shop, 3,
                                "click[Buy Now]") is None


def test_the_teachers_thinks_that_name_the_effect_of_another_step():
    """Thinks of the 1.5B teacher that passed every other rule once each step said what its
    action does: an examine told for a go (the worked example's "I take it so I can clean it",
    copied), a buy told as the search it made, a heat planned again at the put."""
    import dataclasses
    pen = trajectory("examine the pen with the desklamp.", ["go to drawer 1", "open drawer 1", "go to drawer 2",
                                                            "open drawer 2", "go to drawer 3"], "look_at_obj_in_light")
    think = "Pen is here on drawer 1. I examine it to see if it needs cleaning."
    # examine is an ALFWorld command even though this episode never used it
    assert alignment.misaligned(think, pen, 2, "go to drawer 2") == (
        "says the agent will now 'examine it to see', but this step's action is 'go to drawer 2'")
    assert think_reasons("The drawer 1 is empty, so I go to drawer 2 and look for the pen there.", pen, 2) == []
    # a time clause is no move now (a recorded ReAct thought)
    assert alignment.misaligned("Before I use the microwave, I should check inside to ensure it's empty.",
                                trajectory("heat some egg and put it in countertop.",
                                           ["go to microwave 1", "open microwave 1"], "heat"), 1,
                                "open microwave 1") is None
    task = "i'm looking for a styling cream that is cruelty free and for short hair, and price lower than 40.00 dollars"
    shop = dataclasses.replace(trajectory(task, ["search[styling cream cruelty free short hair]", "click[b008hrrwhm]",
                                                 "click[8.5 ounce (pack of 1)]", "click[Buy Now]"]), env="webshop")
    think = ("I searched for styling cream that is cruelty free and for short hair, specifying price lower than "
             "40.00 dollars in the search bar.")
    assert alignment.misaligned(think, shop, 3, "click[Buy Now]") == (
        "tells the search the agent made ('i searched') and never that it buys, but this step's action is "
        "'click[Buy Now]'")
    assert alignment.misaligned("I searched well: this cream fits, so I buy it now.", shop, 3, "click[Buy Now]") is None
    think = ("The goal specifies that we need to put the hot apple in the fridge. Before doing this, I should heat "
             "the apple first.")
    assert alignment.misaligned(think, HOT_APPLE, 7, "put apple 1 in/on fridge 1") == (
        "plans 'i should heat the apple', which an earlier action already did")


def test_an_open_told_as_done_after_i_is_narration():
    """The 1.5B teacher's greedy retries without the worked examples ("I opened cabinet 2 because
    ..."): after "I" a past form is the verb, not an adjective of the next word."""
    assert alignment.narration("I opened cabinet 2 because I need to put some spraybottle on toilet.",
                               "open cabinet 2") == "tells this step's own action as done ('i opened cabinet 2')"
    # the pen search opened drawer 1 before: no recap of an open of drawer 2
    assert alignment.narration("I opened drawer 2 because I was already there and wanted to examine its contents.",
                               "open drawer 2", ["go to drawer 1", "open drawer 1", "go to drawer 2"]) == \
        "tells this step's own action as done ('i opened drawer 2')"
    # a state adjective before a noun is none; the same open done earlier is a recap
    assert alignment.narration("The closed drawer 2 may hold it, so I open it.", "open drawer 2") is None
    assert alignment.narration("I opened drawer 2 before and saw a pen, so I open it again.", "open drawer 2",
                               ["go to drawer 2", "open drawer 2", "close drawer 2", "go to drawer 2"]) is None


def test_a_receptacle_currently_open_before_its_open():
    """A greedy retry of the 1.5B teacher without the worked examples, for ``open drawer 2`` right
    after "The drawer 2 is closed.": "currently open" is the state this step makes."""
    import dataclasses
    pen = trajectory("examine the pen with the desklamp.", ["go to drawer 1", "open drawer 1", "go to drawer 2",
                                                            "open drawer 2"], "look_at_obj_in_light")
    steps = list(pen.steps)
    steps[3] = dataclasses.replace(steps[3], observation="The drawer 2 is closed.")
    pen = dataclasses.replace(pen, steps=steps)
    think = "I need to look at the pen in the drawer. The drawer 2 is currently open, so I will examine its contents."
    assert alignment.misaligned(think, pen, 3, "open drawer 2") == \
        "says drawer 2 is open, the state this step's action makes"
    assert alignment.misaligned("The drawer 2 is currently closed, so I open it to look for the pen.", pen, 3,
                                "open drawer 2") is None


def test_the_held_object_placed_in_a_receptacle_or_the_agent_at_another_appliance():
    """Two 1.5B thinks of the sample's puts, the worked example's sentence filled in wrongly: the
    spraybottle in hand said to be in the cabinet, and the apple put in the fridge from "the
    microwave". A place named without its number is compared by kind ("the sink" is the
    sinkbasin; a lamp is no place)."""
    spray = trajectory("put some spraybottle on toilet.", ["go to cabinet 2", "open cabinet 2",
                                                           "take spraybottle 2 from cabinet 2", "go to toilet 1",
                                                           "put spraybottle 2 in/on toilet 1"])
    assert alignment.misaligned("The spraybottle is in cabinet 2 and I am at the toilet, so I put the spraybottle "
                                "on the toilet to finish the task.", spray, 4, "put spraybottle 2 in/on toilet 1") == \
        "says the spraybottle is in or on the cabinet, but the agent holds it"
    assert alignment.misaligned("I hold the spraybottle and I am at the toilet, so I put it on the toilet.",
                                spray, 4, "put spraybottle 2 in/on toilet 1") is None
    # before the take, the spraybottle does lie in the cabinet
    assert alignment.misaligned("The spraybottle is in cabinet 2, so I take it.", spray, 2,
                                "take spraybottle 2 from cabinet 2") is None
    apple = trajectory("put a hot apple in fridge.", ["go to diningtable 1", "take apple 1 from diningtable 1",
                                                      "go to microwave 1", "heat apple 1 with microwave 1",
                                                      "go to fridge 1", "put apple 1 in/on fridge 1"], "heat")
    assert alignment.misaligned("The apple is hot and I am at the microwave, so I put the apple in it to finish "
                                "the task.", apple, 5, "put apple 1 in/on fridge 1") == \
        "says the agent is at microwave, but it stands at fridge 1"
    assert alignment.misaligned("The apple is hot and I am at the fridge, so I put it in to finish the task.",
                                apple, 5, "put apple 1 in/on fridge 1") is None
    assert alignment.misaligned("I need to put the hot apple in the fridge. I am currently holding the apple on the "
                                "diningtable.", apple, 5, "put apple 1 in/on fridge 1") == \
        "says the agent is at diningtable, but it stands at fridge 1"
    assert alignment.misaligned("I am holding the apple at the fridge, so I put it in.", apple, 5,
                                "put apple 1 in/on fridge 1") is None
    # a search planned for the kind of object in hand; ReAct's recap "Now I find ..." is no plan
    assert alignment.misaligned("The goal asks for a spraybottle on the toilet, so I need to find one and put it "
                                "there.", spray, 4, "put spraybottle 2 in/on toilet 1") == \
        "plans to find a spraybottle, but the agent already holds one"
    assert alignment.misaligned("Now I find a spraybottle (2). Next, I need to put it in/on toilet 1.", spray, 3,
                                "go to toilet 1") is None
    assert alignment.misaligned("I need to find a spraybottle first, so I go to cabinet 2.", spray, 0,
                                "go to cabinet 2") is None
    clean = trajectory("put a clean cup in cabinet.", ["go to countertop 1", "take cup 1 from countertop 1",
                                                       "go to sinkbasin 1", "clean cup 1 with sinkbasin 1"], "clean")
    assert alignment.misaligned("I'm at the sink, so I wash the cup here.", clean, 3, "clean cup 1 with sinkbasin 1") is None


COIN = Trajectory("c", "textworld", "e", "find the coin", "find_coin", "success", 1.0,
                  [Step(0, None, "You are in the kitchen.")] + [Step(i, a, "ok") for i, a in
                                                               enumerate(["look around", "move south", "take coin"], 1)],
                  "u", "f", 0)


@pytest.mark.parametrize("think, i, action, why", [
    # written by the 1.5B teacher on coin, with a "Look Around" skill in the prompt
    ("I am now in the pantry and I need to find the coin. I should look around to see if there are any objects.", 1,
     "move south", "says the agent will look around, but this step's action is 'move south'"),
    ("To find the coin, I need to move into another room. Moving south seems like a good direction.", 2, "take coin",
     "says the agent will move to another room, but this step's action is 'take coin'"),
    ("I should move north, then I will look around.", 1, "move south",
     "says the agent will move north, but this step's action is 'move south'"),
    ("I will look around the kitchen first to see if there is anything interesting.", 1, "move south",
     "says the agent will look around, but this step's action is 'move south'"),
])
def test_a_textworld_think_that_does_something_else(think, i, action, why):
    assert alignment.misaligned(think, COIN, i, action) == why


@pytest.mark.parametrize("think, i, action", [
    ("I have not looked around yet, but the kitchen has no coin. I should move south to explore.", 1, "move south"),
    ("The coin is not here, so I need to move to another room.", 1, "move south"),
    ("I look around the kitchen to find the coin.", 0, "look around"),
    ("The coin is right here. I take it, then I will move north to leave.", 2, "take coin"),
    ("I am in the kitchen and I need to find the coin.", 0, "look around"),  # no intent: not judged
    ("I should move north next.", 0, "open door to north"),  # a command the rule does not know
])
def test_a_textworld_think_about_its_own_step_passes(think, i, action):
    assert alignment.misaligned(think, COIN, i, action) is None


@pytest.mark.parametrize("think, i, action, why", [
    # the 1.5B teacher pasting the worked example's thinks onto the coin steps by position
    ("There is no coin in the kitchen. Two exits lead to rooms I have not seen, so I try the pantry to the east first.",
     1, "look around", "says the agent will move east, but this step's action is 'look around'"),
    ("The pantry holds no coin and its only exit leads back west, so I return west.", 3, "take coin",
     "says the agent will move west, but this step's action is 'take coin'"),
    ("No coin here, so I try the pantry first.", 1, "look around",
     "says the agent will move to another room, but this step's action is 'look around'"),
    ("The kitchen north of the living room is still unsearched, so I go north.", 2, "move north",
     "speaks of the living room, which no observation so far has named"),
])
def test_a_textworld_think_pasted_from_another_step_or_map(think, i, action, why):
    assert alignment.misaligned(think, COIN, i, action) == why


def test_a_textworld_room_named_in_an_exit_is_seen():
    t = Trajectory("c", "textworld", "e", "find the coin", "find_coin", "success", 1.0,
                   [Step(0, None, "You are in the kitchen. To the North you see the living room.")]
                   + [Step(1, "move north", "You are in the living room.")], "u", "f", 0)
    assert alignment.misaligned("The living room to the north is unexplored, so I go north.", t, 0, "move north") is None


@pytest.mark.parametrize("think, second", [
    ("You are in the kitchen and have not found the coin yet. You can explore the room by looking around.", True),
    ("The kitchen has a coin on it. You need to take it now.", True),
    ("The coin is listed here, as you can see, so I take it.", False),
    ("I am in the kitchen and no coin is here, so I go north.", False),
])
def test_a_think_that_talks_to_you_is_narration(think, second):
    why = alignment.narration(think, "move north")
    assert (why is not None and "second person" in why) == second

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


def test_narration_in_the_third_person_or_after_the_fact():
    assert alignment.narration("The agent saw that the cabinet 2 was closed. The agent decided to open cabinet 2.",
                               "open cabinet 2") == "speaks of 'The agent' in the third person"
    assert alignment.narration("Cabinet 2 was closed, so I opened it.", "open cabinet 2").startswith(
        "tells this step's own action as done")
    assert alignment.narration("Cabinet 2 is closed; I need to open it to look inside.", "open cabinet 2") is None
    # an earlier put of the same kind is a recap, not this step told as done
    two = trajectory("put two cd in safe", ["take cd 1 from desk 1", "go to safe 1", "put cd 1 in/on safe 1",
                                            "take cd 2 from desk 2", "put cd 2 in/on safe 1"])
    assert alignment.narration("With the first cd placed, I put the second one in the safe.", "put cd 2 in/on safe 1",
                               two.actions[:4]) is None


@pytest.mark.parametrize("sample", ["eto-alfworld", "react-alfworld", "react-webshop"])
def test_recorded_thoughts_of_the_samples_pass(sample, tmp_path):
    """Measured on the recorded thoughts of the whole shared ETO, ReAct ALFWorld and ReAct WebShop
    sets (1,776 thoughts): 4 fire, each a real defect of its record (a pot "cooled" that was
    never cooled, a thought that says the pot is cooled before the cool action). The samples'
    thoughts: none."""
    _, trajs = parsed_sample(tmp_path, sample, sample)
    n, fired = 0, []
    for t in trajs:
        for i in range(len(t.steps) - 1):
            think, action = (t.steps[i + 1].thought or "").strip(), t.steps[i + 1].action or ""
            if think:
                n += 1
                if why := alignment.narration(think, action, t.actions[:i]) or alignment.misaligned(think, t, i, action):
                    fired.append((i, why))
    assert n >= 5 and fired == []


def test_a_think_that_does_another_action_now():
    """Two 1.5B thinks of the sample: 'open cabinet 2' explained by taking a soapbottle, and
    'heat apple 1 with microwave 1' by going to the diningtable. A ReAct recap of the previous
    action ("Now I take a spraybottle (2)") before going on is no other action."""
    spray = trajectory("put some spraybottle on toilet.", ["go to cabinet 1", "go to cabinet 2", "open cabinet 2",
                                                           "take spraybottle 2 from cabinet 2", "go to toilet 1"])
    assert alignment.misaligned("Soapbottle 1 is here in the cabinet 1. I take it so I can use it for the toilet.",
                                spray, 2, "open cabinet 2").startswith("says the agent will now 'take it")
    assert alignment.misaligned("Now I take a spraybottle (2). Next, I need to put it in/on toilet 1.", spray, 4,
                                "go to toilet 1") is None
    apple = trajectory("put a hot apple in fridge.", ["go to diningtable 1", "take apple 1 from diningtable 1",
                                                      "go to microwave 1", "heat apple 1 with microwave 1"], "heat")
    assert alignment.misaligned("The goal asks for a hot apple, so before putting it in the fridge I go to the "
                                "diningtable to place it.", apple, 3, "heat apple 1 with microwave 1") \
        .startswith("says the agent will now 'go to the diningtable'")
    assert alignment.misaligned("I use the microwave to heat the apple.", apple, 3,
                                "heat apple 1 with microwave 1") is None

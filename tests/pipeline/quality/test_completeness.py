"""Rules for answers that leave something out: ``missing_key_step`` (a success memory without the
step the task needs) and ``cut_off`` (a field stopped by the grammar at its length bound)."""
from __future__ import annotations

from pipeline.core.records import Step, Trajectory
from pipeline.quality import grounding, text

HOT_APPLE = Trajectory("t", "alfworld", "e", "put a hot apple in fridge.", "heat", "success", 1.0,
                       [Step(0, None, "room")] + [Step(i, a, "ok") for i, a in enumerate(
                           ["go to countertop 1", "take apple 1 from countertop 1", "go to microwave 1",
                            "heat apple 1 with microwave 1", "go to fridge 1", "put apple 1 in/on fridge 1"], 1)],
                       "u", "f", 0)


def step(k: int, action: str) -> dict:
    return {"step_index": k, "action": action, "critical_observation": "x", "reasoning": "y"}


def test_a_heat_memory_without_its_heat_step():
    """The 1.5B memory of the ReAct "put a hot apple in fridge" episode: take and put, no heat."""
    got = grounding.missing_key_step([step(2, "take apple 1 from countertop 1"), step(6, "put apple 1 in/on fridge 1")],
                                     HOT_APPLE)
    assert [v.reason for v in got] == ["missing_key_step"]
    assert "step 4 ('heat apple 1 with microwave 1')" in got[0].detail
    assert grounding.missing_key_step([step(4, "heat apple 1 with microwave 1")], HOT_APPLE) == []


def test_categories_without_a_key_verb_and_webshop_purchases():
    plain = Trajectory("t", "alfworld", "e", "put a mug in cabinet.", "pick_and_place", "success", 1.0,
                       HOT_APPLE.steps, "u", "f", 0)
    assert grounding.missing_key_step([], plain) == []
    shop = Trajectory("w", "webshop", "e", "i want a mug", "other", "success", 1.0,
                      [Step(0, None, "WebShop"), Step(1, "search[mug]", "r"), Step(2, "click[B0ABCDEFGH]", "p"),
                       Step(3, "click[Buy Now]", "done")], "u", "f", 0)
    assert [v.reason for v in grounding.missing_key_step([step(1, "search[mug]")], shop)] == ["missing_key_step"]
    assert grounding.missing_key_step([step(3, "click[Buy Now]")], shop) == []


def test_cut_off_at_the_bound():
    cut = "Apply when the mug is in the micro"  # 34 characters, bound 35
    assert [v.reason for v in text.cut_off("skills[0].when_to_apply", cut, 35)] == ["cut_off"]
    assert text.cut_off("f", "Apply when the mug is hot, ok.", 31) == []  # a sentence that ends at the bound
    assert text.cut_off("f", "Short and complete", 200) == []
    assert [v.reason for v in text.cut_off("skills[0].title", "Heat The Mug Before Putting It In", 33,
                                           sentence=False)] == ["cut_off"]


def test_refined_steps_are_regrounded_from_the_record():
    """The 1.5B teacher's toiletpaper memory cites step 4 for the put recorded at step 6, and its
    heat-mug memory paraphrases an observation: both are fixed from the record, and counted."""
    import dataclasses
    traj = dataclasses.replace(HOT_APPLE, steps=[dataclasses.replace(s) for s in HOT_APPLE.steps])
    traj.steps[2].observation = "You pick up the apple 1 from the countertop 1."
    traj.steps[4].observation = "You heat the apple 1 using the microwave 1."
    traj.steps[6].observation = "You put the apple 1 in/on the fridge 1. The fridge 1 is open."
    steps = [dict(step(2, "take apple 1 from countertop 1"), critical_observation="You pick up the apple 1"),
             dict(step(5, "heat apple 1 with microwave 1"), critical_observation="You heat the apple 1"),  # at 4
             dict(step(6, "put apple 1 in/on fridge 1"), critical_observation="Apple stored successfully.")]
    fixed = grounding.reground_steps(steps, traj, 0.6, max_chars=40)
    assert [s["step_index"] for s in steps] == [2, 4, 6]
    assert [s["critical_observation"] for s in steps] == [
        "You pick up the apple 1", "You heat the apple 1", "You put the apple 1 in/on the fridge 1."]
    assert fixed == {"step_index": 1, "critical_observation": 1}
    assert grounding.memory_step_violations(steps, traj, 0.6) == []


def test_a_made_up_quote_of_an_unrecorded_last_observation_becomes_the_one_before():
    """ETO's toiletpaper episode records no observation after its final put; the teacher quoted
    "You put the toiletpaper 1 on the toiletpaperhanger 1." there, which the record never says."""
    traj = Trajectory("t", "alfworld", "e", "put a toiletpaper in toiletpaperhanger.", "pick_and_place", "success",
                      1.0, [Step(0, None, "room"), Step(1, "take toiletpaper 1 from toilet 1",
                                                           "You pick up the toiletpaper 1 from the toilet 1."),
                            Step(2, "go to toiletpaperhanger 1", "On the toiletpaperhanger 1, you see nothing."),
                            Step(3, "put toiletpaper 1 in/on toiletpaperhanger 1", "")], "u", "f", 0)
    steps = [dict(step(3, "put toiletpaper 1 in/on toiletpaperhanger 1"),
                  critical_observation="You put the toiletpaper 1 on the toiletpaperhanger 1.")]
    assert [v.reason for v in grounding.memory_step_violations(steps, traj, 0.6)] == ["ungrounded_observation"]
    assert grounding.reground_steps(steps, traj, 0.6) == {"step_index": 0, "critical_observation": 1}
    assert steps[0]["critical_observation"] == "On the toiletpaperhanger 1, you see nothing."
    assert grounding.memory_step_violations(steps, traj, 0.6) == []


def test_an_action_recorded_nowhere_is_left_for_the_rule():
    steps = [step(3, "take toiletpaper 1 from toilet 1")]
    assert grounding.reground_steps(steps, HOT_APPLE, 0.6) == {"step_index": 0, "critical_observation": 0}
    assert [v.reason for v in grounding.memory_step_violations(steps, HOT_APPLE, 0.6)] == ["ungrounded_step"]

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

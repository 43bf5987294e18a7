"""Shapes and contexts the rule examples share: a skill and a mistake as the skills answer holds
them, and the trajectories of the sample episodes the examples were seen in."""
from __future__ import annotations

from typing import Any

#: Where the examples were seen: the teacher and the student of the shipped pipeline.
TEACHER = "Qwen2.5-Coder-1.5B-Instruct (the embedded teacher) on data/samples"
SMALL = "SmolLM2-135M-Instruct (the embedded test model) on data/samples"
SKILLRL = "SkillRL's released banks (tests/fixtures/skillrl-memory)"
OUTCOME = "the embedded teacher's thinks of the TextWorld Express outcome run (bench/outcome.py)"


def skill(title: str, principle: str, when: str = "When the goal names the object.") -> dict[str, str]:
    """A skill as a skills answer holds it."""
    return {"title": title, "principle": principle, "when_to_apply": when}


def mistake(description: str, why: str, how: str) -> dict[str, str]:
    """A common mistake as a skills answer holds it."""
    return {"description": description, "why_it_happens": why, "how_to_avoid": how}


#: ALFWorld "put a hot apple in fridge." (the ReAct sample), as a success's context.
HOT_APPLE: dict[str, Any] = {
    "task": "put a hot apple in fridge.", "category": "heat",
    "actions": ["go to countertop 1", "take apple 1 from countertop 1", "go to microwave 1",
                "heat apple 1 with microwave 1", "go to fridge 1", "put apple 1 in/on fridge 1"],
    "observations": ["You are in the middle of a room.", "On the countertop 1, you see a apple 1.",
                     "You pick up the apple 1 from the countertop 1.", "The microwave 1 is closed.",
                     "You heat the apple 1 using the microwave 1.", "The fridge 1 is closed.",
                     "You put the apple 1 in/on the fridge 1."]}
#: ALFWorld "examine the pen with the desklamp": the search of the drawers.
PEN: dict[str, Any] = {
    "task": "examine the pen with the desklamp", "category": "look_at_obj_in_light",
    "actions": ["go to drawer 1", "open drawer 1", "close drawer 1", "go to drawer 2"],
    "observations": ["You are in the middle of a room. Looking quickly around you, you see a desk 1, a drawer 1, "
                     "a drawer 2, a drawer 3, and a shelf 1.", "The drawer 1 is closed.",
                     "You open the drawer 1. The drawer 1 is open. In it, you see nothing.",
                     "You close the drawer 1.", "The drawer 2 is closed."]}
#: WebShop: a search, a product, the purchase.
SHOP: dict[str, Any] = {
    "task": "i want a noise cancelling usb microphone, and price lower than 50.00 dollars",
    "actions": ["search[noise cancelling usb microphone]", "click[B07HRFJWP8]", "click[Buy Now]"],
    "observations": ["WebShop [SEP] Instruction: [SEP] i want a noise cancelling usb microphone [SEP] Search",
                     "[SEP] Next > [SEP] B07HRFJWP8 [SEP] Cosycost USB Microphone [SEP] $32.99",
                     "[SEP] Cosycost USB Microphone, noise cancelling [SEP] Price: $32.99 [SEP] Buy Now",
                     "Thank you for shopping with us!"]}
#: TextWorld Express coin: a kitchen with a closed door to the west.
COIN: dict[str, Any] = {
    "task": "Your task is to find the coin.", "category": "coin",
    "actions": ["look around", "move west"],
    "observations": ["You are in the kitchen. In one part of the room you see a stove, an oven, a fridge, a "
                     "counter and a kitchen cupboard. To the West you see a closed door.",
                     "You are in the kitchen. In one part of the room you see a stove, an oven, a fridge, a "
                     "counter and a kitchen cupboard. To the West you see a closed door.",
                     "You are in the pantry. You see a coin."]}
#: A memory answer of a successful cool episode ("cool some cup and put it in diningtable").
COOL_CUP: dict[str, Any] = {
    "task": "cool some cup and put it in diningtable.", "category": "cool",
    "actions": ["go to countertop 2", "take cup 3 from countertop 2", "go to fridge 1", "cool cup 3 with fridge 1",
                "go to diningtable 1", "put cup 3 in/on diningtable 1"],
    "observations": ["You are in the middle of a room.", "On the countertop 2, you see a cup 3.",
                     "You pick up the cup 3 from the countertop 2.", "The fridge 1 is closed.",
                     "You cool the cup 3 using the fridge 1.", "On the diningtable 1, you see a bowl 1.",
                     "You put the cup 3 in/on the diningtable 1."]}


def cup_memory(**over: Any) -> dict[str, Any]:
    """A grounded success memory of :data:`COOL_CUP`, with fields replaced by ``over``."""
    base = {"contextual_description": "Cool a cup: found it on the countertop, cooled it in the fridge and put it "
                                      "on the dining table.",
            "refined_trajectory": [{"step_index": 2, "action": "take cup 3 from countertop 2",
                                    "critical_observation": "You pick up the cup 3 from the countertop 2.",
                                    "reasoning": "the cup is the object of the task"},
                                   {"step_index": 4, "action": "cool cup 3 with fridge 1",
                                    "critical_observation": "You cool the cup 3 using the fridge 1.",
                                    "reasoning": "the task asks for a cool cup"}],
            "planning_pattern": "Find [Object] -> Take [Object] -> Cool it in [Fridge] -> Place it on [Target]"}
    return {**base, **over}

"""Rules of facts checked against the recorded trajectory or the memory artifact (checks:
:mod:`pipeline.quality.grounding`)."""
from __future__ import annotations

from pipeline.quality.catalog.shapes import COOL_CUP, HOT_APPLE, SHOP, SMALL, TEACHER, cup_memory
from pipeline.quality.registry import Rule, passes, rejects

_TAKE = {"step_index": 2, "action": "take cup 3 from countertop 2",
         "critical_observation": "You pick up the cup 3 from the countertop 2.", "reasoning": "the cup is the object"}
_MEMORIES = [{"memory_id": "m1", "category": "cool"}, {"memory_id": "m2", "category": "cool"}]

RULES = (
    Rule("ungrounded_step", "a refined step cites a step index without that recorded action", (
        rejects("memory", cup_memory(refined_trajectory=[dict(_TAKE, action="take toiletpaper 1 from toilet 1")]),
                kind="success", seen=SMALL + " (its action: take toiletpaper 1 from toilet 1's trash can)", **COOL_CUP),
        passes("memory", cup_memory(refined_trajectory=[dict(_TAKE, action="take cup from countertop")]),
               kind="success", **COOL_CUP))),
    Rule("ungrounded_observation", "a critical observation is not a (near-)span of that step's observation", (
        rejects("memory", cup_memory(refined_trajectory=[dict(_TAKE, critical_observation="The cup was frozen.")]),
                kind="success", **COOL_CUP),
        passes("memory", cup_memory(refined_trajectory=[dict(_TAKE, critical_observation="You pick up the cup 3")]),
               kind="success", **COOL_CUP))),
    Rule("future_leak", "a think names an entity that first appears in an observation after its step", (
        rejects("think", "I go to countertop 1 to take the apple 1.", step=0, **HOT_APPLE),
        passes("think", "An apple may lie on a countertop, so I go to countertop 1 to look.", step=0, **HOT_APPLE))),
    Rule("ungrounded_think", "a think has no content word of the task, the observations so far, the action taken or "
                             "the admissible actions shown (it would fit any step)", (
        rejects("think", "Let me think about it.", step=0, **HOT_APPLE),
        passes("think", "An apple may lie on a countertop, so I go to countertop 1 to look.", step=0, **HOT_APPLE))),
    Rule("missing_key_step", "a success memory's refined steps leave out the step the task cannot succeed without "
                             "(heat/cool/clean/use, a WebShop purchase) that the trajectory took", (
        rejects("memory", cup_memory(refined_trajectory=[_TAKE]), kind="success",
                seen=TEACHER + " (its memory of put a hot apple in fridge: take and put, no heat)", **COOL_CUP),
        passes("memory", cup_memory(), kind="success", **COOL_CUP))),
    Rule("false_comparison", "a think says one price is above (or below) another and the numbers say the opposite "
                             "(\"$32.99, which exceeds ... 50.00 dollars\")", (
        rejects("think", "The price of this product is $32.99, which exceeds the instruction's constraint of 'price "
                         "lower than 50.00 dollars', so I buy it anyway.", env="webshop", seen=TEACHER, **SHOP),
        passes("think", "The price of this product is $32.99, which is below 50.00 dollars, so I buy it.",
               env="webshop", **SHOP))),
    Rule("unknown_source_memory", "a skill cites a source memory that is not in the memory artifact", (
        rejects("skill_row", {"skill_id": "s1", "category": "cool", "source_memory_ids": ["m9"]}, kind="task_specific",
                memories=_MEMORIES),
        passes("skill_row", {"skill_id": "s1", "category": "cool", "source_memory_ids": ["m1", "m2"]},
               kind="task_specific", memories=_MEMORIES))),
    Rule("category_mismatch", "a task-specific skill's category differs from its source memories' category", (
        rejects("skill_row", {"skill_id": "s1", "category": "heat", "source_memory_ids": ["m1"]}, kind="task_specific",
                memories=_MEMORIES),
        passes("skill_row", {"skill_id": "s1", "category": "", "source_memory_ids": ["m1"]}, kind="general",
               memories=_MEMORIES))),
)

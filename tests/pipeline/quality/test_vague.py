"""Skills and fixes that tell the agent nothing it can do (pipeline.quality.vague).

Bad data: items of the bank the 1.5B teacher built from the shipped sample (llama-server, greedy),
each of which passed every earlier rule. Good data: SkillRL's released ALFWorld, WebShop and Search
banks (162 items) and the teacher's own usable items of the same run."""
from __future__ import annotations

import pytest

from pipeline.bank.judge import ItemJudge
from pipeline.core.config import QualityConfig
from pipeline.quality import vague
from tests.pipeline.quality.test_gamefacts import bank_items

#: (principle, reasons): the teacher's items a reader rejects, with the rule that now says why.
TEACHER_VAGUE = [
    ("Use the tool to complete a task, such as cooking or cleaning.", ["vague_instruction"]),
    ("Examine the object to get more information about it.", ["vague_instruction"]),
    ("Look closely at the object's features and details to gain a better understanding of what it is.",
     ["vague_instruction"]),
    ("After finding an object, move it to the correct location for use or storage.", ["vague_instruction"]),
    ("Do not move objects without a specific purpose in mind.", ["vague_instruction"]),
    ("Ensure that the price constraints you set are realistic and do not lead to irrelevant results.",
     ["vague_instruction"]),
    ("When you need to cool an object, move it to a location where it can be cooled without interfering with "
     "other objects.", ["vague_instruction"]),
    ("Follow the instructions carefully and ensure all steps are completed before moving on to the next step.",
     ["vague_instruction"]),
    # the GRPO skill updater with the same teacher, after failed put-away games of TextWorld Express
    ("The agent should always place objects in their designated safe places, which are usually marked on the "
     "environment.", ["vague_instruction"]),
    ("The agent should use appropriate containers to store objects.", ["vague_instruction"]),
    ("When the agent observes an object, use it as a clue to determine its purpose or location.",
     ["vague_instruction"]),
    ("When the agent encounters an object, quickly assess its functionality by checking if it can be used in its "
     "intended location.", ["vague_instruction"]),
    ("The agent should use clear and concise language to communicate their intentions. This skill helps in "
     "avoiding misunderstandings and ensures that the environment is understood correctly.", ["not_actionable"]),
    ("The desklamp illuminates the object and makes it easier to see its contents.", ["not_actionable"]),
]

#: Principles of the same run that a reader would give an agent.
TEACHER_USABLE = [
    "Look in the kitchen, living room, bathroom, and other common areas for the object.",
    "When the observation says the mug must be heated, heat it in the microwave.",
    "When you need to cool an object, take it to the fridge and wait until it is cold.",
    "Start by searching for the product type in the search bar.",
    "Add attributes to your search query to narrow down the results.",
    "Specify a price range in your search query to filter out irrelevant products.",
    "Choose the best option from the product details page.",
    "When searching for a specific type of product, use the exact name of the product type in the search query.",
    "Specify all relevant attributes when searching for a product, such as size, color, or material.",
]


@pytest.mark.parametrize("principle, reasons", TEACHER_VAGUE)
def test_the_teachers_vague_items(principle, reasons):
    assert [v.reason for v in vague.vague_violations("skills[0].principle", principle)] == reasons


def test_the_detail_names_the_placeholder():
    [v] = vague.vague_violations("skills[1].principle", TEACHER_VAGUE[3][0])
    assert v.detail.startswith("skills[1].principle says 'the correct location' where it should name the thing")
    [v] = vague.vague_violations("mistakes[0].how_to_avoid", TEACHER_VAGUE[0][0])
    assert "'the tool', 'complete a task'" in v.detail


@pytest.mark.parametrize("principle", TEACHER_USABLE)
def test_the_teachers_usable_items_pass(principle):
    assert vague.vague_violations("skills[0].principle", principle) == []


def test_an_instruction_in_any_form_is_no_statement():
    assert vague.is_statement("The desklamp lights the object. It shows the contents.")
    # an obligation, an imperative after a condition, or one instructing sentence among statements
    assert not vague.is_statement("The agent should open the fridge before looking inside.")
    assert not vague.is_statement("It is best to open every drawer once.")
    assert not vague.is_statement("When the drawer is closed, open it.")
    assert not vague.is_statement("The fridge cools things. Take the object there first.")
    assert not vague.is_statement("")  # no_words judges empty text


@pytest.mark.parametrize("env,count", [("alfworld", 55), ("webshop", 66), ("search", 41)])
def test_no_skillrl_item_fires(env, count):
    """SkillRL's principles and fixes: none is a statement or stops at a placeholder. (One
    when-to-apply, "When holding the correct object ...", would; conditions are not read.)"""
    items = bank_items(env)
    fired = [name for kind, name, item in items
             if vague.vague_violations("x", item["how_to_avoid" if kind == "mistake" else "principle"])]
    assert len(items) == count and fired == []


def test_the_skills_stage_judges_them():
    """The item judge of the skills stage (and of skill evolution in GRPO) quarantines both."""
    judge = ItemJudge("general", QualityConfig(off_topic_threshold=-1), env="alfworld")
    items = [{"title": "Use Tool", "principle": TEACHER_VAGUE[0][0],
              "when_to_apply": "When you need to use a tool to help with a task."},
             {"title": "Use Desklamp Effectively", "principle": TEACHER_VAGUE[-1][0],
              "when_to_apply": "When looking at objects in light."},
             {"title": "Cool Objects in Fridge", "principle": "When you need to cool an object, take it to the "
                                                               "fridge and cool it there.",
              "when_to_apply": "When the goal says the object must be cooled."},
             # the teacher's own wording: concrete, but the game has no waiting (its cool acts at once)
             {"title": "Cool Objects in Fridge", "principle": TEACHER_USABLE[2],
              "when_to_apply": "When the goal says the object must be cooled."}]
    reasons = [sorted({v.reason for v in vs}) for vs in judge.judge(items)]
    assert reasons == [["vague_instruction"], ["false_game_fact", "not_actionable"], [], ["false_game_fact"]]

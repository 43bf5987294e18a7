"""Rule off_topic for skills and mistakes (topic.off_domain) on the real MiniLM: the junk of the
embedded model's bank on the shipped sample is caught against the memories it was made from, and
the skills of SkillRL's own ALFWorld and WebShop banks pass against real memories of their env."""
from __future__ import annotations

import json
import os

import pytest

from pipeline.quality import topic
from pipeline.stages.skills import MISTAKE_FIELDS, SKILL_FIELDS, memory_sources
from tests.helpers.paths import FIXTURES

# Two memories the embedded model wrote on the shipped sample (make run), and the skills and the
# mistake its skills call then made from them (exported in skill_bank_alfworld.json).
LAMP = {"task": "look at bowl under the desklamp.",
        "contextual_description": "The agent is looking at a bowl of food. The agent sees the bed and looks to the "
                                  "desk, which has a desk 1, a desk 2, a desk 3, a desk 4, a desk 5, a drawer 6, a "
                                  "drawer 7, a drawer 8, a drawer 9, a desk"}
VASE = {"task": "cool some vase and put it in fridge.",
        "contextual_description": "You are in the middle of a room. Looking quickly around you, you see a "
                                  "sidetable 4, a dresser 4, a countertop 2, and a fridge 1."}
LEMONADE = {"title": "Lemonade Making", "principle": "Reflect on the importance of looking at objects in light.",
            "when_to_apply": "When to apply this skill."}
LEMON = {"title": "Use a lemon for your craft.", "principle": "In the morning.",
         "when_to_apply": "In the morning, when you are ready to start your day with a lemon."}
CHILDHOOD = {"description": "When I was a child, I would always eat the same thing every day. I'd have to go to the "
                            "bathroom multiple times before I could even think about eating.",
             "why_it_happens": "I had a habit of eating when I was 10 years old and it has been with me ever since. "
                               "It's something that is very difficult for me to change, but I am a",
             "how_to_avoid": "When you are trying to avoid something, try not to do the thing yourself."}


def named(item: dict) -> list[tuple[str, str]]:
    return [(f, item[f]) for f in (SKILL_FIELDS if "title" in item else MISTAKE_FIELDS)]


def test_the_sample_junk_is_off_topic_against_its_source_memories():
    items = [LEMONADE, LEMON, CHILDHOOD]
    sources = [memory_sources([LAMP]), memory_sources([LAMP]), memory_sources([LAMP, VASE])]
    margins = topic.domain_margins([named(i) for i in items], sources)
    assert margins == pytest.approx([-0.100, -0.252, -0.135], abs=0.01)
    got = topic.off_domain([named(i) for i in items], sources)
    assert [v.reason for v in got] == ["off_topic"] * 3
    assert got[2].detail == ("description 'When I was a child, I would always eat the same thing every ' is off "
                             "topic (its fields are nearer everyday subjects than its sources: mean margin -0.14 < "
                             "-0.075); write about these episodes")


@pytest.mark.parametrize("env", ["alfworld", "webshop"])
def test_skillrl_bank_skills_are_on_topic_against_real_memories(env):
    """Every skill and mistake of SkillRL's bank against the real SkillRL memories of that env
    in the fixtures (2 ALFWorld, 1 WebShop: task + description): none is off topic; the lowest
    margins are stated in topic.DOMAIN_MARGIN's comment."""
    with open(os.path.join(FIXTURES, "skillrl-memory", env, "claude_style_skills.json"), encoding="utf-8") as f:
        bank = json.load(f)
    with open(os.path.join(FIXTURES, "formats", "real", f"memory_{env}.json"), encoding="utf-8") as f:
        sources = memory_sources([{"task": r["content"]["task_meta"]["original_goal"],
                                   "contextual_description": r["contextual_description"]} for r in json.load(f)])
    items = [named(s) for s in bank["general_skills"] + bank["common_mistakes"]
             + [s for v in bank["task_specific_skills"].values() for s in v]]
    assert len(items) == {"alfworld": 55, "webshop": 66}[env]
    margins = topic.domain_margins(items, [sources] * len(items))
    assert min(margins) == pytest.approx({"alfworld": -0.012, "webshop": -0.050}[env], abs=0.01)
    assert min(margins) > topic.DOMAIN_MARGIN
    assert topic.off_domain(items, [sources] * len(items)) == []


def test_items_without_sources_or_text_are_skipped():
    items = [[("title", "Lemonade Making")], [("title", "  ")]]
    assert topic.domain_margins(items, [[], ["look at bowl"]]) == [None, None]
    assert topic.off_domain(items, [[], ["look at bowl"]]) == []
    with pytest.raises(ValueError):
        topic.domain_margins(items, [[]])

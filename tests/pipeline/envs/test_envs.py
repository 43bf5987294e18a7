"""Category classifiers: the expected categories of the fixed rules, exactly; env detection."""
import pytest

from pipeline import envs
from pipeline.envs import alfworld
from tests.helpers.paths import FIXTURES

ALFWORLD_CASES = [
    ("put a clean plate in box.", "clean"),
    ("put a hot apple in fridge.", "heat"),
    ("cool some mug and put it in coffeemachine.", "cool"),
    ("look at bowl under the desklamp.", "look_at_obj_in_light"),
    ("examine the pen with the desklamp.", "look_at_obj_in_light"),
    ("find two pillow and put them in sofa.", "pick_two_obj_and_place"),
    ("put two cellphone in bed.", "pick_two_obj_and_place"),
    ("put some dishsponge on cart.", "pick_and_place"),
]
WEBSHOP_CASES = [
    ("i want a laptop stand that is easy to carry…", "electronics"),
    ("i need a stainless steel water bottle…", "other"),
    ("find me a bowl set that is microwave safe", "other"),
    ("i need a men's t-shirt in navy, size x-large", "apparel"),
]
SEARCH_CASES = [
    ("who is the father of the director of titanic?", "nq", "direct_retrieval"),
    ("are both bands from the same country?", "hotpotqa", "comparison"),
    ("what is the capital of france?", "popqa", "entity_attribute_lookup"),
]


@pytest.mark.parametrize("goal,want", ALFWORLD_CASES)
def test_alfworld_categories(goal, want):
    assert envs.classify("alfworld", goal) == want


@pytest.mark.parametrize("goal,want", WEBSHOP_CASES)
def test_webshop_categories(goal, want):
    assert envs.classify("webshop", goal) == want


@pytest.mark.parametrize("q,source,want", SEARCH_CASES)
def test_search_category_data_source_first(q, source, want):
    assert envs.classify("search", q, source) == want


def test_search_without_source_uses_question_rules():
    assert envs.classify("search", "who is the father of the director of titanic?") == "multi_hop_reasoning"


def test_gamefile_wins_and_unknown_env_is_other():
    gf = "json_2.1.1/train/pick_heat_then_place_in_recep-Apple-None-Fridge-1/trial_T1"
    assert envs.classify("alfworld", "put some apple in fridge.", gf) == "heat"
    assert envs.classify("minecraft", "make a meal") == "other"
    assert envs.classify("textworld", "prepare a meal following the cookbook") == "cooking"
    assert envs.classify("webshop", "red running shoes") == "footwear"  # plural of a keyword


def test_detect_env_and_constants():
    assert envs.detect_env("> go to cabinet 1\nOn the cabinet 1, you see nothing.") == "alfworld"
    assert envs.detect_env("Action: click[Buy Now]") == "webshop"
    assert envs.detect_env("Action: finish[Paris]") == "search"
    assert envs.detect_env("hello") == "other" and envs.detect_env("hello", "webshop") == "webshop"
    assert alfworld.HEADER == "You are an expert agent operating in the ALFRED Embodied Environment."


def test_alfworld_constants_match_the_rollout_tool():
    import importlib.util
    import os
    path = os.path.join(FIXTURES, "tools", "make_skillrl_rollouts.py")
    spec = importlib.util.spec_from_file_location("tool", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert (alfworld.HEADER, alfworld.TURN_INSTRUCTION) == (tool.HEADER, tool.TURN)


@pytest.mark.parametrize("env, action, effect", [
    ("alfworld", "go to drawer 4", "walks to drawer 4"),
    ("alfworld", "open drawer 4", "opens drawer 4, where the agent already is, to see what is inside"),
    ("alfworld", "take pen 1 from drawer 4", "picks up pen 1 from drawer 4"),
    ("alfworld", "put apple 1 in/on fridge 1", "puts apple 1, which the agent holds, in or on fridge 1"),
    ("alfworld", "move cup 3 to diningtable 4", "puts cup 3, which the agent holds, in or on diningtable 4"),
    ("alfworld", "heat apple 1 with microwave 1", "heats apple 1 with microwave 1"),
    ("alfworld", "use desklamp 1", "turns on desklamp 1"),
    ("alfworld", "jump around", ""),
    ("webshop", "search[styling cream cruelty free]", 'searches the shop for "styling cream cruelty free"'),
    ("webshop", "click[Buy Now]", "buys the product on this page with the options selected; the episode ends"),
    ("webshop", "click[B0972Q1T8T]", "opens product B0972Q1T8T from the results"),
    ("webshop", "click[8.5 ounce (pack of 1)]", 'selects the option "8.5 ounce (pack of 1)" on the product page'),
    ("webshop", "click[< Prev]", "shows the previous page of results"),
    ("webshop", "buy it", ""),
    ("search", "search[who wrote it]", ""),  # no effects known for that env
])
def test_action_effect_says_what_a_command_does(env, action, effect):
    assert envs.action_effect(env, action) == effect

"""Leakage masking: the answer is hidden, the reasoning stays."""
from pipeline.usefulness.mask import MASK, action_arguments, mask_think


def test_alfworld_numbered_names_and_whole_command_are_masked_but_kinds_stay():
    think = "The spraybottle goes to the toilet, so I put spraybottle 2 in/on toilet 1 now."
    out = mask_think(think, "put spraybottle 2 in/on toilet 1", "alfworld")
    assert out == f"The spraybottle goes to the toilet, so I {MASK} now."
    assert mask_think("I look at drawer 5 again.", "close drawer 5", "alfworld") == f"I look at {MASK} again."


def test_webshop_button_text_is_masked_case_insensitively():
    assert mask_think("All options match, so I click buy now.", "click[Buy Now]", "webshop") == \
        f"All options match, so I click {MASK}."
    assert action_arguments("search[red queen bedspread]", "webshop") == ["red queen bedspread"]


def test_textworld_and_search_arguments():
    assert action_arguments("open door to north", "textworld") == ["door to north", "north", "door"]
    assert mask_think("The coin is here; take the coin.", "take coin", "textworld") == \
        f"The {MASK} is here; take the {MASK}."
    assert action_arguments("<search>capital of France</search>", "search") == ["capital of France"]


def test_mask_keeps_word_bounds_and_collapses_runs():
    # "apple 1" must not eat "apple 10"; adjacent masks become one
    assert mask_think("apple 10 is not apple 1", "take apple 1 from countertop 1", "alfworld") == \
        f"apple 10 is not {MASK}"
    assert mask_think("apple 1 countertop 1", "take apple 1 from countertop 1", "alfworld") == MASK

"""Bank items checked against the environment's action set."""
from pipeline.usefulness.actionset import foreign_actions, foreign_share, instruction_verbs


def test_waiting_and_filters_are_foreign_to_their_envs():
    wait = {"title": "Wait for Food to Heat", "principle": "After putting the food in the microwave, wait long "
            "enough for it to heat."}
    assert foreign_actions(wait, "alfworld") == ["wait", "wait"]
    assert foreign_share(wait, "alfworld") == 0.4  # wait, (to) heat, put, wait, (to) heat: 2 of 5 foreign
    filt = {"title": "Filter by Price", "principle": "Filter the results by price and size before choosing."}
    assert foreign_actions(filt, "webshop") == ["filter", "filter"]


def test_env_commands_and_thinking_verbs_are_not_foreign():
    heat = {"title": "Heat then place", "principle": "Take the object first, then go to the microwave and heat "
            "it, then put it in the target."}
    assert foreign_actions(heat, "alfworld") == []
    assert instruction_verbs(heat)[:4] == ["heat", "place", "take", "go"]
    pick = {"title": "Match options", "principle": "Check the size and colour the instruction names, then click "
            "them before Buy Now."}
    assert foreign_share(pick, "webshop") == 0.0


def test_an_env_without_an_action_set_judges_nothing():
    assert foreign_actions({"principle": "Wait."}, "unknown_env") == []
    assert foreign_share({"principle": "Wait."}, "unknown_env") == 0.0

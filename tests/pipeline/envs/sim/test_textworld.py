"""TextWorld Express behind the env interface: real engine, exact values of game twc seed 0."""
import pytest

from pipeline.envs.sim.textworld import EnvTask, TextWorldExpressEnv, category, classify, make_tasks, strip_task_prefix

TWC0_GOLD = ["look around", "take clean brown shirt", "open wardrobe", "put clean brown shirt in wardrobe"]


def test_task_ids_and_categories():
    t = EnvTask("twc", 7)
    assert (t.instance, t.category) == ("twc-train-7", "put_away_objects")
    assert t.game_params() == "numLocations=1,numItemsToPutAway=1,includeDoors=0,limitInventorySize=0"
    assert category("cookingworld") == "cooking" and category("nope") == "other"
    assert classify("any text", "twc") == "put_away_objects"
    assert [x.instance for x in make_tasks(["twc", "cookingworld"], 3, "dev", 5)] == \
        ["twc-dev-5", "cookingworld-dev-6", "twc-dev-7"]
    assert strip_task_prefix("Your task is to pick up X.") == "pick up X."
    assert strip_task_prefix("You are hungry!") == "You are hungry!"


@pytest.fixture(scope="module")
def engine():
    env = TextWorldExpressEnv(step_limit=20)
    yield env
    env.close()


def test_reset_and_gold_path(engine):
    r = engine.reset(EnvTask("twc", 0))
    assert r.task == "pick up objects, then place them in their usual locations in the environment."
    assert r.observation.startswith("You are in the bedroom. In one part of the room you see a dressing table")
    assert r.observation.endswith("In another part of the room you see a clean brown shirt.")
    assert sorted(r.admissible_actions) == ["inventory", "look around", "open chest of drawers", "open wardrobe",
                                            "take clean brown shirt"]
    assert (r.category, r.instance) == ("put_away_objects", "twc-train-0")
    assert engine.gold_actions() == TWC0_GOLD
    steps = [engine.step(a) for a in TWC0_GOLD]
    assert [s.reward for s in steps] == [0.0, 0.5, 0.0, 0.5]
    assert [s.done for s in steps] == [False, False, False, True]
    assert [s.won for s in steps] == [False, False, False, True]
    assert steps[1].observation == "You take the clean brown shirt."
    assert steps[-1].score == 1.0


def test_unknown_action_is_answered_not_raised(engine):
    engine.reset(EnvTask("twc", 0))
    t = engine.step("xyzzy")
    assert t.observation == "Unknown action: I'm not sure what you mean."
    assert (t.reward, t.won, t.done) == (0.0, False, False)


def test_unknown_game_raises(engine):
    with pytest.raises(ValueError, match="unknown TextWorld Express game 'zork'"):
        engine.reset(EnvTask("zork", 0))

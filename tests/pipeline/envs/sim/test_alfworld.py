"""ALFWorld adapter: without the package and data it refuses with a message naming both."""
import pytest

from pipeline.envs.sim.alfworld import AlfTask, AlfWorldEnv, EnvUnavailable, check_available


def test_missing_package_and_data_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    with pytest.raises(EnvUnavailable) as e:
        AlfWorldEnv()
    msg = str(e.value)
    assert "alfworld-download" in msg and "json_2.1.1" in msg and "textworld" in msg
    monkeypatch.delenv("ALFWORLD_DATA")
    with pytest.raises(EnvUnavailable, match="ALFWORLD_DATA=''"):
        check_available()


def test_task_instance_and_category_from_game_file():
    t = AlfTask("/d/json_2.1.1/train/pick_heat_then_place_in_recep-Egg-None-Fridge-13/trial_T1/game.tw-pddl")
    assert t.instance == "pick_heat_then_place_in_recep-Egg-None-Fridge-13/trial_T1"
    assert t.category == "heat"

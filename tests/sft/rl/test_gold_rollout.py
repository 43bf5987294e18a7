"""`skillpipe rl rollout --policy gold [--noise RATE]`: the engine's gold plan on real TextWorld Express,
injected admissible wrong actions, and the output tree parsed back by `skillpipe run`."""
import json

import pytest
from typer.testing import CliRunner

from pipeline.core.artifacts import ArtifactStore
from pipeline.cli import app
from pipeline.core.config import PromptConfig
from pipeline.envs.sim.textworld import EnvTask, TextWorldExpressEnv
from sft.rl.rollout import GoldPolicy, run_episodes, undo_action

runner = CliRunner()


@pytest.mark.parametrize("action, undo", [("move north", "move south"), ("move west", "move east"),
                                          ("open door to east", "close door to east"),
                                          ("close fridge", "open fridge"), ("take coin", None), ("look around", None)])
def test_undo_action(action, undo):
    assert undo_action(action) == undo


def _play(tasks, policy, max_steps=40):
    # the engine's gold plan for a multi-room game differs in length between JVMs (11-22 actions
    # measured for coin seed 1), so the cap leaves room
    envs = [TextWorldExpressEnv(step_limit=80) for _ in tasks]
    try:
        return run_episodes(envs, tasks, [t.instance for t in tasks], policy, [], PromptConfig(), max_steps,
                            "textworld")
    finally:
        for e in envs:
            e.close()


def test_gold_policy_plays_the_engine_plan_and_wins():
    tasks = [EnvTask("twc", 0), EnvTask("coin", 1), EnvTask("cookingworld", 2)]
    eps = _play(tasks, GoldPolicy())
    assert [e.won for e in eps] == [True, True, True]
    # twc seed 0's gold plan, as pinned by tests/sft/rl/test_rollout.py (the engine's own sequence)
    assert [s.action for s in eps[0].trajectory.steps[1:]] == [
        "look around", "take clean brown shirt", "open wardrobe", "put clean brown shirt in wardrobe"]
    for e in eps:
        assert e.n_invalid == 0 and e.trajectory.outcome == "success"
        meta = json.loads(e.trajectory.metadata)
        assert meta["model"] == "gold" and meta["injected"] == [] and meta["recovered"] == []


def test_noise_injects_admissible_wrong_actions_seeded():
    # one-room games: their gold plan is the same in every JVM (multi-room plans are not)
    tasks = [EnvTask(g, s) for s in range(4) for g in ("twc", "cookingworld")]
    a = _play(tasks, GoldPolicy(noise=0.3, seed=7), max_steps=20)
    b = _play(tasks, GoldPolicy(noise=0.3, seed=7), max_steps=20)
    assert [[s.action for s in e.trajectory.steps] for e in a] == [[s.action for s in e.trajectory.steps] for e in b]
    injected = 0
    for e in a:
        meta = json.loads(e.trajectory.metadata)
        steps = e.trajectory.steps
        for k in meta["injected"]:
            injected += 1
            assert steps[k + 1].action in steps[k].admissible_actions  # wrong, but admissible where it was sent
        for k in meta["recovered"]:  # an undo follows an injected action directly
            assert k - 1 in meta["injected"] and steps[k + 1].action == undo_action(steps[k].action)
    assert injected >= 3
    assert any(json.loads(e.trajectory.metadata)["recovered"] and e.won for e in a)  # error, undo, then success


def test_noise_one_never_follows_the_plan():
    eps = _play([EnvTask("twc", 0)], GoldPolicy(noise=1.0, seed=0), max_steps=4)
    meta = json.loads(eps[0].trajectory.metadata)
    assert not eps[0].won and len(meta["injected"]) + len(meta["recovered"]) == 4


def test_gold_policy_rejects_bad_noise_and_envs_without_a_plan():
    with pytest.raises(ValueError, match="noise must be in"):
        GoldPolicy(noise=1.5)
    with pytest.raises(ValueError, match="gold action sequence"):
        GoldPolicy().start_episode(0, object(), EnvTask("twc", 0))


def test_rollout_cli_gold_tree_parses_back(tmp_path):
    out = tmp_path / "tree"
    r = runner.invoke(app, ["rollout", "--policy", "gold", "--noise", "0.3", "--seed", "1", "--games", "coin,twc",
                            "--tasks", "4", "--episodes-per-task", "2", "--max-steps", "12", "--out", str(out),
                            "--root", str(tmp_path), "--run-id", "gold"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    assert res["episodes"] == 8 and res["txt_files"] == 8 and 0 < res["wins"] <= 8
    rows = ArtifactStore(str(tmp_path), "gold").load("rollout").read_rows()
    assert {row["env_instance"] for row in rows} == {"coin-train-0", "twc-train-1", "coin-train-2", "twc-train-3"}
    p = runner.invoke(app, ["run", "--input", str(out), "--env", "textworld", "--stages", "parse",
                            "--root", str(tmp_path), "--run-id", "parsed"])
    assert p.exit_code == 0, p.output
    parsed = ArtifactStore(str(tmp_path), "parsed").load("parse")
    counts = parsed.manifest["counts"]
    assert counts["out"] + counts["quarantined"] == 8 and counts["out"] >= 1
    got = sorted(tuple(s["action"] for s in t["steps"][1:]) for t in parsed.read_rows())
    want = sorted(tuple(s["action"] for s in t["steps"][1:]) for t in rows)
    # exact duplicates (a noise-free replay of the same game) are quarantined by parse as duplicate_trajectory
    assert set(got) <= set(want) and len(set(got)) == len(set(want))
    assert sum(t["outcome"] == "success" for t in parsed.read_rows()) >= 1


def test_rollout_cli_noise_needs_gold(tmp_path):
    r = runner.invoke(app, ["rollout", "--policy", "embedded", "--noise", "0.2", "--out", str(tmp_path / "t"),
                            "--root", str(tmp_path)])
    assert r.exit_code != 0 and "--noise applies to --policy gold only" in r.output


def test_rollout_refuses_an_out_folder_with_a_tree(tmp_path):
    """A second, smaller run into the same folder would leave the first run's extra files behind."""
    (tmp_path / "tree" / "env007").mkdir(parents=True)
    (tmp_path / "tree" / "env007" / "test1.txt").write_text("old")
    r = runner.invoke(app, ["rollout", "--policy", "gold", "--tasks", "1", "--out", str(tmp_path / "tree"),
                            "--root", str(tmp_path)])
    flat = " ".join(r.output.replace("│", " ").split())  # rich wraps the message in a box
    assert r.exit_code == 2 and "already holds a rollout tree (1 files" in flat

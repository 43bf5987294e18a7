"""`skillpipe eval`: held-out TextWorld Express games, Wilson intervals, episode Parquet + summary."""
import json
import os

import pytest
from typer.testing import CliRunner

from pipeline.core.artifacts import ArtifactStore
from pipeline.cli import app
from pipeline.envs.sim.textworld import EnvTask
from tests.helpers.rollout_policies import ScriptedPolicy
from sft.eval import (EPISODE_SCHEMA, check_held_out, eval_config, evaluate, make_tasks, resolve_checkpoint,
                      summarize, wilson_interval)

runner = CliRunner()


@pytest.mark.parametrize("wins, n, expected", [
    (0, 10, (0.0, 0.2775)),        # Wilson (1927): upper bound z^2/(n+z^2) at 0 wins
    (5, 10, (0.2366, 0.7634)),     # symmetric around 0.5
    (10, 10, (0.7225, 1.0)),
    (3, 40, (0.0258, 0.1986)),     # by hand: centre 0.1122, half-width 0.0864
])
def test_wilson_interval_known_values(wins, n, expected):
    lo, hi = wilson_interval(wins, n)
    assert (round(lo, 4), round(hi, 4)) == expected


def test_wilson_interval_edge_cases():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(5, 3)


def _row(game, won, steps, valid, fmt, inad, score):
    return {"game": game, "won": won, "reward": 10.0 if won else 0.0, "score": score, "steps": steps,
            "valid_steps": valid, "format_errors": fmt, "inadmissible": inad}


def test_summarize_known_values():
    rows = [_row("coin", True, 2, 2, 0, 0, 1.0), _row("coin", False, 4, 1, 2, 1, 0.0),
            _row("twc", False, 4, 3, 0, 1, 0.5)]
    s = summarize(rows)
    assert (s["episodes"], s["wins"]) == (3, 1)
    assert s["success_rate"] == pytest.approx(1 / 3) and s["mean_reward"] == pytest.approx(10 / 3)
    assert s["mean_score"] == pytest.approx(0.5) and s["mean_steps"] == pytest.approx(10 / 3)
    assert s["valid_action_rate"] == pytest.approx(6 / 10) and s["format_error_rate"] == pytest.approx(2 / 10)
    assert s["inadmissible_rate"] == pytest.approx(2 / 10) and s["ci_method"] == "wilson"
    assert s["per_game"]["coin"]["wins"] == 1 and s["per_game"]["twc"]["success_rate"] == 0.0
    assert s["success_ci95"] == [round(x, 4) for x in wilson_interval(1, 3)]


def test_tasks_are_held_out_and_overlap_is_refused():
    cfg = eval_config(games="coin,twc", episodes=5, fold="test", seed0=3)
    tasks = make_tasks(cfg)
    assert [t.instance for t in tasks] == ["coin-test-3", "twc-test-3", "coin-test-4", "twc-test-4", "coin-test-5"]
    check_held_out(tasks, {"coin-train-3", "twc-dev-4"})  # other folds: fine
    with pytest.raises(ValueError, match="overlap the training data: twc-test-4"):
        check_held_out(tasks, {"twc-test-4"})
    with pytest.raises(ValueError, match="unknown TextWorld Express game"):
        eval_config(games="chess")
    with pytest.raises(ValueError, match="fold"):
        eval_config(fold="train")


def test_evaluate_gold_and_scripted_policies(tmp_path):
    """Gold wins every game with only valid steps; 'inventory' forever wins none (real engine)."""
    from sft.rl.rollout import GoldPolicy
    cfg = eval_config(games="twc,cookingworld", episodes=4, max_steps=12, batch_size=2)  # one-room games
    gold = evaluate(GoldPolicy(), cfg, str(tmp_path), "ev", "gold", progress=False)
    assert (gold["wins"], gold["episodes"], gold["valid_action_rate"], gold["format_error_rate"]) == (4, 4, 1.0, 0.0)
    assert gold["success_ci95"] == [round(x, 4) for x in wilson_interval(4, 4)] and gold["mean_reward"] == 10.0
    art = ArtifactStore(str(tmp_path), "ev").load("eval_gold")
    assert art.read_table().schema.equals(EPISODE_SCHEMA) and art.manifest["counts"]["out"] == 4
    with open(os.path.join(art.path, "summary.json")) as f:
        assert json.load(f)["success_rate"] == 1.0
    assert art.fingerprint == gold["fingerprint"]
    # with an identity, the same policy on the same games is not replayed; another config is
    again = evaluate(GoldPolicy(), cfg, str(tmp_path), "ev", "gold", identity={"policy": "gold"}, progress=False)
    assert again["skipped"] is False
    same = evaluate(GoldPolicy(), eval_config(games="twc,cookingworld", episodes=4, max_steps=12, batch_size=2,
                                              torch_threads=1), str(tmp_path), "ev", "gold", identity={"policy": "gold"},
                    progress=False)
    assert same["skipped"] is True and same["fingerprint"] == again["fingerprint"] and same["wins"] == 4
    bad = evaluate(ScriptedPolicy(["inventory"]), cfg, str(tmp_path), "ev", "inv", progress=False)
    assert (bad["wins"], bad["mean_steps"], bad["valid_action_rate"]) == (0, 12.0, 1.0)  # valid but useless
    rows = ArtifactStore(str(tmp_path), "ev").load("eval_inv").read_rows()
    assert {r["instance"] for r in rows} == {"twc-test-0", "cookingworld-test-0", "twc-test-1", "cookingworld-test-1"}
    assert all(r["actions"] == ["inventory"] * 12 for r in rows)


def test_evaluate_counts_format_errors(tmp_path):
    class NoTags:
        model_id = "no-tags"

        def generate(self, prompts):
            from sft.rl.rollout import Completion
            return [Completion("I will look around") for _ in prompts]
    cfg = eval_config(games="coin", episodes=2, max_steps=3)
    s = evaluate(NoTags(), cfg, str(tmp_path), "ev", "notags", progress=False)
    assert (s["format_error_rate"], s["valid_action_rate"], s["wins"]) == (1.0, 0.0, 0)


def test_evaluate_refuses_games_of_the_runs_training_data(tmp_path):
    from sft.rl.rollout import GoldPolicy
    r = runner.invoke(app, ["rollout", "--policy", "gold", "--games", "coin", "--tasks", "2", "--fold", "dev",
                            "--out", str(tmp_path / "tree"), "--root", str(tmp_path), "--run-id", "leak"])
    assert r.exit_code == 0, r.output
    with pytest.raises(ValueError, match="coin-dev-0, coin-dev-1"):
        evaluate(GoldPolicy(), eval_config(games="coin", fold="dev", episodes=3), str(tmp_path), "leak", "x",
                 progress=False)


def test_resolve_checkpoint(tmp_path):
    sft = tmp_path / "runs" / "r" / "sft_fit"
    export = tmp_path / "runs" / "r" / "export"
    sft.mkdir(parents=True)
    export.mkdir()
    (export / "skill_bank.json").write_text("{}")
    (sft / "skillpipe_sft_manifest.json").write_text(json.dumps({"config": {"pairs": str(export)}}))
    assert resolve_checkpoint(str(sft)) == (str(sft), str(export / "skill_bank.json"))
    ck = tmp_path / "grpo" / "checkpoints" / "step-000002"
    ck.mkdir(parents=True)
    (ck / "checkpoint.json").write_text(json.dumps({"bank_file": "skill_bank.json"}))
    (ck / "skill_bank.json").write_text("{}")
    (tmp_path / "grpo" / "grpo_manifest.json").write_text(json.dumps({"checkpoint": str(ck)}))
    assert resolve_checkpoint(str(tmp_path / "grpo")) == (str(ck), str(ck / "skill_bank.json"))
    with pytest.raises(FileNotFoundError, match="not a model folder"):
        resolve_checkpoint(str(tmp_path))


def test_eval_cli_gold_prints_metrics(tmp_path):
    r = runner.invoke(app, ["eval", "--policy", "gold", "--games", "twc", "--episodes", "3", "--root", str(tmp_path),
                            "--run-id", "cli"])
    assert r.exit_code == 0, r.output
    assert "success 3/3 = 1.000 [95% CI 0.439-1.000]" in r.output and "format errors 0.000" in r.output
    res = json.loads(r.output[r.output.index("{"):])
    assert res["rows"] == 3 and res["uri"].endswith(os.path.join("runs", "cli", "eval_gold"))


def test_eval_cli_usage_errors(tmp_path):
    r = runner.invoke(app, ["eval", "--policy", "nonsense", "--root", str(tmp_path)])
    assert r.exit_code != 0 and "not a policy name or folder" in r.output
    r = runner.invoke(app, ["eval", "--policy", "gold", "--fold", "train", "--root", str(tmp_path)])
    assert r.exit_code != 0 and "fold" in r.output


@pytest.mark.slow
def test_eval_base_model_real(tmp_path):
    """The real base model (SmolLM2-135M-Instruct via HFPolicy) on 2 held-out games, tiny budget."""
    from sft.eval import eval_for_run
    s = eval_for_run(str(tmp_path), "base", "base", eval_config(games="coin", episodes=2, max_steps=2,
                                                                  max_new_tokens=24), progress=False)
    assert s["episodes"] == 2 and s["policy"].startswith("base:") and 1 <= s["mean_steps"] <= 2
    assert 0.0 <= s["format_error_rate"] <= 1.0
    rows = ArtifactStore(str(tmp_path), "base").load("eval_base").read_rows()
    assert all(len(r["outputs"]) == r["steps"] and r["outputs"][0] for r in rows)

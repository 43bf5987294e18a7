"""bench/outcome.py: its options, the four-arm table and verdict, the result file, the data figures of an
arm, the action-only arm's data on real rollouts."""
import importlib.util
import json
import os

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.records import SFT_PAIR_SCHEMA, to_table
from sft.eval import summarize
from tests.helpers.paths import REPO
from tests.helpers.report_run import row

ROOT = REPO
spec = importlib.util.spec_from_file_location("outcome", os.path.join(ROOT, "bench", "outcome.py"))
outcome = importlib.util.module_from_spec(spec)
spec.loader.exec_module(outcome)


def _rows(wins, n):
    return [{"game": "coin", "won": i < wins, "reward": 10.0 * (i < wins), "score": float(i < wins), "steps": 2,
             "valid_steps": 2, "format_errors": 0, "inadmissible": 0} for i in range(n)]


def _summary(wins, n):
    return {**summarize(_rows(wins, n)), "policy": "p"}


def test_arms_option_and_budget_defaults():
    a = outcome.parse_args([])
    assert a.arms == ["base", "actions", "thinks", "skills"] and a.eval_episodes >= 60
    assert outcome.parse_args(["--arms", "skills, base"]).arms == ["skills", "base"]
    q = outcome.parse_args(["--quick"])
    assert (q.train_tasks, q.sft_steps, q.eval_episodes) == (4, 2, 2)
    with pytest.raises(SystemExit):
        outcome.parse_args(["--arms", "skills,cot"])


def test_history_length_reaches_every_arms_prompt_config():
    a = outcome.parse_args(["--history-length", "3"])
    cfgs = [outcome.arm_config(w, outcome.base_config(a)) for w in outcome.ARMS]
    assert {c.prompt.history_length for c in cfgs} == {3}
    assert outcome.base_config(outcome.parse_args([])).prompt.history_length == 1


def _row(name, wins, n, data=None):
    arm = outcome.arm(name)
    return {"name": name, "label": arm.label, "run_id": arm.run_id("o"), "trained": arm.trained,
            "eval": _summary(wins, n) if n else None, "why": "" if n else "no SFT pair", "data": data}


def test_arm_table_has_one_row_per_arm_with_interval_and_data_figures():
    data = {"pairs": 66, "skill_use": 0.25, "think_words": 12.5, "quarantine_distill": 0.1, "quarantine_pairs": 0.0}
    lines = outcome.arm_table([_row("base", 0, 60), _row("actions", 30, 60, {**data, "skill_use": None}),
                               _row("thinks", 0, 0, {**data, "pairs": 0}), _row("skills", 45, 60, data)])
    assert lines[0].split()[:3] == ["arm", "success", "95%"] and len(lines) == 5
    assert lines[1].split() == ["base:", "base", "model", "0/60=0.000", "0.000-0.060", "1.000", "0.000", "2.00",
                                "-", "-", "-", "-", "-"]
    assert lines[2].split()[-5:] == ["66", "-", "12.5", "0.100", "0.000"]
    assert "no SFT pair" in lines[3] and lines[3].split()[-5] == "0"
    assert lines[4].split()[-10:-5] == ["45/60=0.750", "0.628-0.842", "1.000", "0.000", "2.00"]


def test_verdict_names_the_best_arm_and_which_intervals_separate():
    evals = {"base": _summary(0, 60), "actions": _summary(40, 60), "thinks": None, "skills": _summary(52, 60)}
    lines = outcome.verdict("coin", evals)
    assert lines[0] == "outcome: coin thinks: no SFT pair survived the quality rules, nothing to train"
    # skills [0.758, 0.931] vs actions [0.541, 0.773]: the intervals overlap
    assert lines[1] == ("outcome: coin best arm skills 0.867 [0.7583, 0.9309]; its interval separates from base; "
                        "overlaps actions")
    assert lines[2].startswith("outcome: SFT on the expert actions: actions 0.667") and lines[2].endswith(
        "difference +0.667; 95% intervals separate (actions better)")
    assert lines[3].startswith("outcome: the distilled think: skills 0.867") and lines[3].endswith("overlap")
    assert len(lines) == 4  # the contrasts with the thinks arm need its eval
    tie = outcome.verdict("coin", {"actions": _summary(60, 60), "skills": _summary(60, 60)})
    assert tie[0] == "outcome: coin best arm actions = skills 1.000 [0.9398, 1.0]"
    assert "separate (base better)" in outcome.compare("x", _summary(0, 60), "base", _summary(30, 60))


def test_result_file_holds_every_arm_and_the_verdict(tmp_path):
    a = outcome.parse_args(["--root", str(tmp_path), "--run-id", "o"])
    timer = outcome.Timer()
    timer.phases.append(("4 eval base", 12.4))
    rows = [_row("base", 0, 60), _row("skills", 45, 60, {"pairs": 3})]
    path = outcome.write_result(a, rows, {"step_rate": 0.5}, ["outcome: x"], timer)
    assert path == str(tmp_path / "outcome.json")
    doc = json.loads(open(path, encoding="utf-8").read())
    assert [r["run_id"] for r in doc["arms"]] == ["o", "o"] and doc["arms"][1]["data"] == {"pairs": 3}
    assert doc["arms"][1]["eval"]["success_ci95"] == [0.6277, 0.8422] and "per_game" not in doc["arms"][1]["eval"]
    assert doc["budget"]["eval_episodes"] == 60 and doc["eval_seeds"] == [100, 159] and doc["verdict"] == ["outcome: x"]
    assert doc["wall_s"]["4 eval base"] == 12 and set(doc["wall_s"]) == {"4 eval base", "total"}
    assert doc["where_skills_used"] == {"step_rate": 0.5}
    assert "CPUs" in doc["machine"] and doc["date"][:2] == "20"


def test_quality_reads_the_export_manifest(tmp_path):
    a = outcome.parse_args(["--root", str(tmp_path), "--run-id", "q"])
    assert outcome.quality(a) == {}
    ArtifactStore(str(tmp_path), "q").write("export", to_table([], SFT_PAIR_SCHEMA), [],
                                            {"fingerprint": "f", "quality_metrics": {"skill_use_rate": 0.25,
                                                                                     "think_length": {"mean": 12}}})
    q = outcome.quality(a)
    assert q["skill_use_rate"] == 0.25 and outcome._flat(q) == [("skill_use_rate", 0.25), ("think_length.mean", 12)]
    # where export writes them: manifest["counters"]["quality_metrics"]
    ArtifactStore(str(tmp_path), "q").write("export", to_table([], SFT_PAIR_SCHEMA), [],
                                            {"fingerprint": "f", "counters": {"quality_metrics": {"pairs": 1}}})
    assert outcome.quality(a) == {"pairs": 1}


def test_data_figures_of_an_arm_run(tmp_path):
    """Pairs, skill use against the bank, think length and quarantine shares read from a run's
    artifacts (the arm's export, verify and stage manifests)."""
    from pipeline.core.records import DISTILLED_SCHEMA, Step, Trajectory, TRAJECTORY_SCHEMA
    t = Trajectory("t1", "textworld", "coin-train-0", "find the coin", "find_coin", "success", 10.0,
                   [Step(0, None, "You are in the kitchen.", ["move east"]), Step(1, "move east", "A coin.", [])],
                   "x.txt", "skillrl_txt", 0)
    store = ArtifactStore(str(tmp_path), "o")
    store.write("verify", to_table([t.to_row()], TRAJECTORY_SCHEMA), [], {"fingerprint": "v"})
    pair = dict(pair_id="p", trajectory_id="t1", step_index=1, env="textworld", category="find_coin",
                action="move east", think="Sweep each unexplored neighbour once.")
    rows = [row(SFT_PAIR_SCHEMA, **pair), row(SFT_PAIR_SCHEMA, **{**pair, "pair_id": "q", "think": ""})]
    store.write("export", to_table(rows, SFT_PAIR_SCHEMA), [],
                {"fingerprint": "e"})
    store.write("distill", to_table([], DISTILLED_SCHEMA), [],
                {"fingerprint": "d", "counts": {"in": 4, "quarantined": 1, "quarantine_reasons": {"no_words": 1}}})
    bank = [{"skill_id": "c1", "env": "textworld", "kind": "task_specific", "category": "find_coin",
             "title": "Sweep rooms", "principle": "Visit each unexplored neighbour once", "when_to_apply": ""}]
    d = outcome.data_figures(str(tmp_path), "o", bank)
    assert (d["pairs"], d["skill_use"], d["think_words"]) == (2, 1.0, 2.5)
    assert d["skill_use_detail"] == {"steps": 2, "with_think": 1, "using": 1, "rate": 1.0}
    assert (d["quarantine_distill"], d["quarantine_distill_reasons"], d["quarantine_pairs"]) == (0.25, {"no_words": 1},
                                                                                                   None)
    assert outcome.data_figures(str(tmp_path), "none", bank)["pairs"] == 0


def test_action_only_control_trains_on_every_step_without_an_llm(tmp_path):
    """Step 2b on real gold rollouts: the main run's upstream artifacts are copied, distill makes
    no call, every successful step becomes a pair with an empty think."""
    from pipeline.core.config import PipelineConfig
    from pipeline.engine.runner import run_pipeline
    from sft.rl.cli import collect_rollouts
    # two rooms: gold plans there always win within the step budget (four-room plans vary by JVM run)
    a = outcome.parse_args(["--root", str(tmp_path), "--run-id", "o", "--train-tasks", "3", "--game-params",
                            "numLocations=2,numDistractorItems=0,includeDoors=0,limitInventorySize=0"])
    collect_rollouts(str(tmp_path / "traces" / "o"), str(tmp_path), "o-traces", games=a.game, tasks=3,
                     episodes_per_task=1, fold="train", max_steps=a.rollout_max_steps, policy="gold",
                     game_params=a.game_params, noise=0.0, noise_seed=0)
    cfg = PipelineConfig()
    cfg.quality.off_topic_threshold = -1
    main = run_pipeline(str(tmp_path), "o", str(tmp_path / "traces" / "o"), cfg, env="textworld",
                        stages=("parse", "remove_loops", "verify", "split"), log=lambda m: None)
    store = ArtifactStore(str(tmp_path), "o")
    from pipeline.core.records import MEMORY_SCHEMA, SKILL_SCHEMA
    store.write("memory", to_table([], MEMORY_SCHEMA), [], {"fingerprint": "m"})
    store.write("skills", to_table([], SKILL_SCHEMA), [], {"fingerprint": "s"})
    trajs = main[-1].manifest["counts"]["out"]
    res = outcome.actions_baseline(a)
    by = {r.stage: r.manifest for r in res}
    assert by["distill"]["counts"]["out"] == trajs and by["distill"]["counters"]["calls"] == 0
    pairs = ArtifactStore(str(tmp_path), "o-actions").require("build_pairs").read_rows()
    assert outcome.exported_pairs(res) == len(pairs) > trajs
    assert {p["think"] for p in pairs} == {""} and all(p["output"].startswith("<think></think>\n<action>")
                                                       for p in pairs)
    assert all(r["model"] == "none" for r in ArtifactStore(str(tmp_path), "o-actions").require("distill").read_rows())


@pytest.mark.parametrize("jobs", [1, 2])
def test_arm_jobs_in_workers_return_each_arms_result(tmp_path, jobs):
    # an arm whose export has no pair trains nothing: the worker plumbing without a model
    a = outcome.parse_args(["--root", str(tmp_path), "--run-id", "w", "--jobs", str(jobs)])
    timer = outcome.Timer()
    evals = outcome.run_arm_jobs(a, timer, [("actions", "w-actions", 0), ("thinks", "w-noskills", 0)])
    assert evals == {"actions": None, "thinks": None}
    assert [name for name, _ in timer.phases] == ["3-4 arms (wall)"]


def test_pilot_candidates_parse_and_name_known_games():
    pilot_spec = importlib.util.spec_from_file_location("outcome_pilot", os.path.join(ROOT, "bench", "outcome_pilot.py"))
    pilot = importlib.util.module_from_spec(pilot_spec)
    pilot_spec.loader.exec_module(pilot)
    from sft.eval import eval_config
    parsed = [pilot.parse_candidate(c) for c in pilot.CANDIDATES]
    assert parsed[1] == ("coin", "numLocations=4,numDistractorItems=0,includeDoors=0,limitInventorySize=0", 8)
    for game, params, steps in parsed:  # each is a setting the evaluation accepts
        assert eval_config(games=game, game_params=params, max_steps=steps).max_steps == steps
    # the experiment's default is the setting the pilot picked
    a = outcome.parse_args([])
    assert (a.game, a.game_params, a.eval_max_steps) == parsed[1]
    for bad in ("coin", "coin:x=1", "coin:x=1:eight"):
        with pytest.raises(ValueError, match="game:params:eval_max_steps"):
            pilot.parse_candidate(bad)

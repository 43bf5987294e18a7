"""bench/outcome.py: its options and --dry-run, the arms' table, the result file, the data figures of
an arm, the stages each arm copies or reruns, the action-only arm's data on real rollouts, the
worker plumbing. (Paired statistics: test_outcome_stats.py; the plan: test_outcome_plan.py; the
steps of a unit and resuming: test_outcome_steps.py.)"""
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
    assert a.arms == ["base", "actions", "thinks", "skills", "gated"] and a.eval_episodes >= 60 and a.seeds >= 3
    assert (a.dry_run, a.budget_minutes, a.bootstrap) == (False, 150, 10_000)
    assert outcome.parse_args(["--arms", "skills, base"]).arms == ["skills", "base"]
    q = outcome.parse_args(["--quick"])
    assert (q.train_tasks, q.sft_steps, q.eval_episodes, q.seeds) == (4, 2, 2, 2)
    for bad in (["--arms", "skills,cot"], ["--seeds", "0"]):
        with pytest.raises(SystemExit):
            outcome.parse_args(bad)


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path, capsys):
    root = tmp_path / "root"
    assert outcome.main(["--dry-run", "--root", str(root), "--run-id", "o"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("outcome plan: 5 arms, 11 SFT/eval units, 60 held-out games each (dev seeds 100..159)")
    assert [ln.split()[:2] for ln in out[2:7]] == [["base", "-"], ["actions", "0,1,2"], ["thinks", "0"],
                                                   ["skills", "0,1,2"], ["gated", "0,1,2"]]
    assert out[7].startswith("estimated wall time (phase times of ") and "3-4 SFT + eval (11 units" in out[12]
    assert out[-1].split()[0] == "total" and "min; target 150 min: " in out[-1]
    assert not root.exists()  # nothing ran, nothing was written
    assert outcome.main(["--dry-run", "--seeds", "5", "--arms", "actions,gated", "--root", str(root)]) == 0
    assert capsys.readouterr().out.startswith("outcome plan: 2 arms, 10 SFT/eval units")


def test_history_length_reaches_every_arms_prompt_config():
    a = outcome.parse_args(["--history-length", "3"])
    cfgs = [outcome.arm_config(w, outcome.base_config(a)) for w in outcome.ARMS]
    assert {c.prompt.history_length for c in cfgs} == {3}
    assert outcome.base_config(outcome.parse_args([])).prompt.history_length == 1


def _row(name, wins, n, data=None):
    arm = outcome.arm(name)
    return {"name": name, "label": arm.label, "run_id": arm.run_id("o"), "trained": arm.trained,
            "seeds": arm.seeds(3), "eval": _summary(wins, n) if n else None, "why": "" if n else "no SFT pair",
            "data": data}


def test_arm_table_has_one_row_per_arm_with_seeds_interval_and_data_figures():
    data = {"pairs": 66, "skill_use": 0.25, "think_words": 12.5, "quarantine_distill": 0.1, "quarantine_pairs": 0.0}
    lines = outcome.arm_table([_row("base", 0, 60), _row("actions", 30, 60, {**data, "skill_use": None}),
                               _row("thinks", 0, 0, {**data, "pairs": 0}),
                               _row("gated", 135, 180, {**data, "quarantine_useful": 0.2, "bank_items": 5,
                                                        "bank_gated": 3})])
    assert lines[0].split()[:5] == ["arm", "seeds", "success", "95%", "CI"] and len(lines) == 5
    assert lines[0].split()[-5:] == ["pairs", "q", "useful", "bank", "gated"]
    assert lines[1].split() == ["base:", "base", "model", "-", "0/60=0.000", "0.000-0.060", "1.000", "0.000", "2.00",
                                "-", "-", "-", "-", "-", "-", "-", "-"]
    assert lines[2].split()[3:] == ["3", "30/60=0.500", "0.377-0.623", "1.000", "0.000", "2.00", "66", "-", "12.5",
                                    "0.100", "0.000", "-", "-", "-"]
    assert "no SFT pair" in lines[3] and lines[3].split()[-8] == "0"
    assert lines[4].split()[6:] == ["3", "135/180=0.750", "0.682-0.808", "1.000", "0.000", "2.00", "66", "0.250",
                                    "12.5", "0.100", "0.000", "0.200", "5", "3"]


def test_pooled_eval_takes_the_rate_and_interval_over_games():
    rows = {0: _rows(2, 4), 1: _rows(1, 4)}
    pool = {"rate": 0.375, "ci95": [0.0, 0.75], "seeds": 2}
    s = outcome.pooled_eval(rows, pool)
    assert (s["episodes"], s["wins"], s["success_rate"], s["success_ci95"], s["seeds"]) == (8, 3, 0.375, [0.0, 0.75], 2)
    assert s["valid_action_rate"] == 1.0 and s["ci_method"] == "percentile bootstrap over games, seeds pooled"


def test_result_file_holds_every_arm_its_seeds_and_the_paired_figures(tmp_path):
    a = outcome.parse_args(["--root", str(tmp_path), "--run-id", "o"])
    timer = outcome.Timer()
    timer.phases.append(("4 eval base", 12.4))
    rows = [_row("base", 0, 60), {**_row("skills", 45, 60, {"pairs": 3}), "usefulness": "off",
                                  "per_seed": {0: _summary(20, 30), 1: _summary(25, 30)}}]
    extra = {"pooled": {"skills": {"rate": 0.75}}, "paired": {"gated-skills": {"diff": 0.1}}, "plan": {"units": []}}
    path = outcome.write_result(a, rows, {"step_rate": 0.5}, ["outcome: x"], timer, extra)
    assert path == str(tmp_path / "outcome.json")
    doc = json.loads(open(path, encoding="utf-8").read())
    assert [r["run_id"] for r in doc["arms"]] == ["o", "o"] and doc["arms"][1]["data"] == {"pairs": 3}
    assert doc["arms"][1]["eval"]["success_ci95"] == [0.6277, 0.8422] and "per_game" not in doc["arms"][1]["eval"]
    assert doc["arms"][1]["seeds"] == [0, 1, 2] and doc["arms"][0]["seeds"] == []
    assert [(s["seed"], s["wins"], s["episodes"]) for s in doc["arms"][1]["per_seed"]] == [(0, 20, 30), (1, 25, 30)]
    assert doc["budget"]["eval_episodes"] == 60 and doc["budget"]["seeds"] == 3 and doc["eval_seeds"] == [100, 159]
    assert doc["verdict"] == ["outcome: x"] and doc["paired"] == {"gated-skills": {"diff": 0.1}}
    assert doc["pooled"] == {"skills": {"rate": 0.75}} and doc["plan"] == {"units": []}
    assert doc["wall_s"]["4 eval base"] == 12 and set(doc["wall_s"]) == {"4 eval base", "total"}
    assert doc["where_skills_used"] == {"step_rate": 0.5}
    assert "CPUs" in doc["machine"] and doc["date"][:2] == "20"


def test_a_quick_run_writes_no_dated_result(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLPIPE_BENCH_RESULTS", str(tmp_path / "results"))
    for flags, files in ((["--quick"], 0), ([], 1)):
        a = outcome.parse_args(["--root", str(tmp_path), *flags])
        outcome.write_result(a, [], None, [], outcome.Timer())
        written = os.listdir(tmp_path / "results") if (tmp_path / "results").exists() else []
        assert len(written) == files


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
    assert (d["quarantine_useful"], d["bank_items"], d["bank_gated"]) == (None, None, None)
    from pipeline.core.records import SKILL_SCHEMA
    store.write("usefulness", to_table(rows, SFT_PAIR_SCHEMA), [],
                {"fingerprint": "u", "counts": {"in": 4, "quarantined": 2, "quarantine_reasons": {"no_gain": 2}}})
    store.write("skills", to_table([row(SKILL_SCHEMA, **bank[0])], SKILL_SCHEMA), [],
                {"fingerprint": "s", "counts": {"out": 1},
                 "counters": {"usefulness": {"textworld": {"scored": 3, "quarantined": 2}, "alfworld": {"scored": 0}}}})
    d = outcome.data_figures(str(tmp_path), "o", bank)
    assert (d["quarantine_useful"], d["bank_items"], d["bank_gated"]) == (0.5, 1, 2)
    assert outcome.data_figures(str(tmp_path), "none", bank)["pairs"] == 0


def test_each_arm_copies_the_skills_arms_stages_before_its_own():
    assert outcome.shared_stages(outcome.arm("actions")) == ("_plan", "parse", "remove_loops", "verify", "split",
                                                             "memory", "skills")
    assert outcome.shared_stages(outcome.arm("thinks")) == outcome.shared_stages(outcome.arm("actions"))
    # the gated arm shares trajectories and memories, and builds its own bank with the gate on
    assert outcome.shared_stages(outcome.arm("gated")) == ("_plan", "parse", "remove_loops", "verify", "split",
                                                           "memory")
    assert outcome.shared_stages(outcome.arm("skills")) == ()


def test_share_teacher_answers_adds_the_skills_runs_cached_answers(tmp_path):
    from pipeline.llm.cache import CACHE_FILE, ResponseCache
    src, dst = tmp_path / "a", tmp_path / "b"
    assert outcome.share_teacher_answers(str(src), str(dst)) == 0  # no cache yet: nothing to share
    cache = ResponseCache(str(src / CACHE_FILE))
    cache.put("k1", "teacher", {"skills": []}, "raw 1", {"prompt_tokens": 3})
    cache.put("k2", "teacher", {"skills": [1]}, "raw 2", {})
    cache.close()
    own = ResponseCache(str(dst / CACHE_FILE))
    own.put("k2", "teacher", {"skills": [2]}, "its own", {})
    own.close()
    assert outcome.share_teacher_answers(str(src), str(dst)) == 1
    got = ResponseCache(str(dst / CACHE_FILE))
    assert got.get("k1")["value"] == {"skills": []} and got.get("k2")["value"] == {"skills": [2]} and len(got) == 2
    got.close()


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
def test_units_in_workers_return_each_units_result(tmp_path, jobs):
    # a unit whose export has no pair trains nothing: the worker plumbing without a model
    a = outcome.parse_args(["--root", str(tmp_path), "--run-id", "w", "--jobs", str(jobs)])
    timer, lines = outcome.Timer(), []
    units = [outcome.Unit("actions", 1, "w-actions"), outcome.Unit("thinks", 0, "w-noskills")]
    evals = outcome.run_units(a, timer, [(u, 0) for u in units], outcome.plan.Progress([], units, 2, out=lines.append))
    assert evals == {"actions seed 1": None, "thinks seed 0": None}
    assert [name for name, _ in timer.phases] == ["3-4 arms (wall)"]
    assert sum("started" in ln for ln in lines) == sum("finished" in ln for ln in lines) == 2
    assert outcome.arm_results(a, [outcome.arm("actions"), outcome.arm("thinks")], evals) == {"actions": None,
                                                                                             "thinks": None}


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

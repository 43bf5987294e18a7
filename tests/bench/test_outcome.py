"""bench/outcome.py's reporting: interval verdict, data-quality metrics read from the export manifest."""
import importlib.util
import os

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.records import SFT_PAIR_SCHEMA, to_table
from sft.eval import summarize
from tests.helpers.paths import REPO

ROOT = REPO
spec = importlib.util.spec_from_file_location("outcome", os.path.join(ROOT, "bench", "outcome.py"))
outcome = importlib.util.module_from_spec(spec)
spec.loader.exec_module(outcome)


def _rows(wins, n):
    return [{"game": "coin", "won": i < wins, "reward": 10.0 * (i < wins), "score": float(i < wins), "steps": 2,
             "valid_steps": 2, "format_errors": 0, "inadmissible": 0} for i in range(n)]


def _summary(wins, n):
    return {**summarize(_rows(wins, n)), "policy": "p"}


def test_verdict_disjoint_and_overlapping(capsys):
    a = outcome.parse_args(["--quick"])
    assert (a.train_tasks, a.sft_steps, a.eval_episodes) == (4, 2, 2)
    timer = outcome.Timer()
    v = outcome.report(a, {"base": _summary(0, 20), "sft": _summary(9, 20)}, {"pairs": 3}, {}, timer)
    assert "DISJOINT (SFT better)" in v and "difference +0.450" in v  # [0, 0.161] vs [0.258, 0.658]
    v = outcome.report(a, {"base": _summary(1, 20), "sft": _summary(4, 20)}, {}, {}, timer)
    assert "overlap (target not reached)" in v
    out = capsys.readouterr().out
    assert "the export manifest has no data-quality metrics" in out and " 9/20 =0.450" in out


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


def test_verdict_of_the_action_only_control_and_of_a_run_without_pairs(capsys):
    a = outcome.parse_args(["--quick"])
    assert a.baseline and not outcome.parse_args(["--no-baseline"]).baseline
    v = outcome.report(a, {"base": _summary(0, 30), "sft-actions": _summary(12, 30)}, {}, {}, outcome.Timer(),
                       trained=("sft", "sft-actions"))
    first, second = v.split("; outcome: ")
    assert first == ("outcome: coin sft: no SFT pair survived the quality rules, nothing to train "
                     "(target not reached)")
    assert second.startswith("coin base 0.000") and "vs sft-actions 0.400" in second
    assert second.endswith("DISJOINT (sft-actions better)")  # [0, 0.114] vs [0.246, 0.577]
    assert "  sft-actions   12/30 =0.400   0.246-0.577" in capsys.readouterr().out


def test_action_only_control_trains_on_every_step_without_an_llm(tmp_path):
    """Step 2b on real gold rollouts: the main run's upstream artifacts are copied, distill makes
    no call, every successful step becomes a pair with an empty think."""
    from pipeline.core.config import PipelineConfig
    from pipeline.core.runner import run_pipeline
    from sft.rl.cli import collect_rollouts
    a = outcome.parse_args(["--root", str(tmp_path), "--run-id", "o", "--train-tasks", "3"])
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

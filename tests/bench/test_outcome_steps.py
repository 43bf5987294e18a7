"""bench/outcome_steps.py and the units of bench/outcome.py: each arm and SFT seed is its own
fingerprinted step, so a finished unit is skipped and an interrupted run redoes only what it had
not finished. Real step machinery (``run_step``, ``EvalStep`` on TextWorld Express games); the
training is a fake ``sft.train.fit`` and the policy the engine's gold plan, so nothing trains."""
import dataclasses
import os
import shutil

import pytest

from bench import outcome, outcome_steps as steps
from bench.outcome_plan import Progress, Unit
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.records import SFT_PAIR_SCHEMA, to_table
from tests.helpers.report_run import row


def test_step_names_per_seed():
    assert [steps.fit_name(k) for k in (0, 1, 2)] == ["sft_fit", "sft_fit_seed1", "sft_fit_seed2"]
    assert [steps.eval_name(k) for k in (None, 0, 2)] == ["eval_base", "eval_sft_fit", "eval_sft_fit_seed2"]
    with pytest.raises(ValueError, match=">= 0"):
        steps.fit_name(-1)


def test_seed_step_sets_the_seed_in_its_config_and_folder(tmp_path):
    from sft.config import SFTFitConfig
    store = ArtifactStore(str(tmp_path), "r")
    store.write("export", to_table([], SFT_PAIR_SCHEMA), [], {"fingerprint": "e"})
    cfgs = {k: steps.SeedFitStep(k).configure(store, SFTFitConfig(max_steps=5, seed=7)) for k in (0, 2)}
    assert (cfgs[0].seed, cfgs[2].seed, cfgs[2].max_steps) == (0, 2, 5)
    assert cfgs[2].output_dir == os.path.join(store.run_dir, "sft_fit_seed2") and cfgs[2].pairs == store.load("export").path
    facts = [steps.SeedFitStep(k).config_facts(cfgs[k]) for k in (0, 2)]
    assert {k for k in facts[0] if facts[0][k] != facts[1][k]} == {"seed"}  # output_dir is not fingerprinted


@pytest.fixture()
def fake_training(tmp_path, monkeypatch):
    """A run ``o-actions`` with a one-pair export; ``sft.train.fit`` writes a one-file "model"
    naming its seed; the policy of a checkpoint is the gold plan, named by that file. Returns the
    list of seeds fit was called with."""
    from sft.rl.rollout import GoldPolicy
    pair = row(SFT_PAIR_SCHEMA, pair_id="p", trajectory_id="t1", step_index=1, env="textworld",
               category="find_coin", action="move east", think="")
    ArtifactStore(str(tmp_path), "o-actions").write("export", to_table([pair], SFT_PAIR_SCHEMA), [],
                                                    {"fingerprint": "e"})
    calls = []

    def fit(pairs, output_dir, cfg):
        calls.append(cfg.seed)
        os.makedirs(output_dir, exist_ok=True)
        with open(os.path.join(output_dir, "adapter.bin"), "w", encoding="utf-8") as f:
            f.write(f"seed {cfg.seed}")
        return {"global_step": cfg.max_steps, "losses": [1.0], "export": {"rows": {"used": 1, "quarantined": 0}},
                "config": dataclasses.asdict(cfg)}

    def model_policy(spec, base_model=""):
        with open(os.path.join(spec, "adapter.bin"), encoding="utf-8") as f:
            return spec, "", {"policy": f"fake:{os.path.basename(spec)}", "weights": f.read()}

    monkeypatch.setattr("sft.train.fit", fit)
    monkeypatch.setattr("sft.eval.model_policy", model_policy)
    monkeypatch.setattr("sft.eval.open_model_policy", lambda folder, name, cfg, stack: GoldPolicy())
    return calls


def test_units_are_skipped_when_finished_and_resumed_where_interrupted(tmp_path, fake_training):
    a = outcome.parse_args(["--root", str(tmp_path), "--run-id", "o", "--jobs", "1", "--eval-episodes", "2",
                            "--sft-steps", "2", "--game-params",
                            "numLocations=2,numDistractorItems=0,includeDoors=0,limitInventorySize=0"])
    units = [Unit("actions", k, "o-actions", 60.0) for k in (0, 1)]
    jobs = [(u, 1) for u in units]

    def run():
        out = []
        evals = outcome.run_units(a, outcome.Timer(), jobs, Progress([], units, 2, out=out.append))
        return evals, out

    evals, lines = run()
    assert fake_training == [0, 1] and [evals[u.label]["reused"] for u in units] == [False, False]
    assert [evals[u.label]["episodes"] for u in units] == [2, 2]
    assert lines[0].startswith("[outcome ") and "started actions seed 0 (unit 1/2)" in lines[0]
    assert "finished actions seed 1 in" in lines[-1] and "2/2 units done; ETA 0s" in lines[-1]
    run_dir = ArtifactStore(str(tmp_path), "o-actions").run_dir
    assert {"sft_fit", "sft_fit_seed1", "eval_sft_fit", "eval_sft_fit_seed1"} <= set(os.listdir(run_dir))

    evals, lines = run()  # finished: both steps of both units skipped, nothing trained or played
    assert fake_training == [0, 1] and [evals[u.label]["reused"] for u in units] == [True, True]
    assert all("(reused: fingerprints unchanged)" in ln for ln in lines if "finished" in ln)

    shutil.rmtree(os.path.join(run_dir, "eval_sft_fit_seed1"))  # interrupted during seed 1's evaluation
    evals, _ = run()
    assert fake_training == [0, 1] and [evals[u.label]["reused"] for u in units] == [True, False]

    a.sft_steps = 3  # another SFT budget: every seed trains and plays again
    evals, _ = run()
    assert fake_training == [0, 1, 0, 1] and not any(evals[u.label]["reused"] for u in units)

    by_arm = outcome.arm_results(a, [outcome.arm("actions")], evals)
    assert sorted(by_arm["actions"]) == [0, 1]
    assert [r["instance"] for r in by_arm["actions"][1]] == ["coin-dev-100", "coin-dev-101"]

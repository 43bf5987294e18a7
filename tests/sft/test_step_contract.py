"""Every step after the data stages (sft_fit, grpo, eval_*, rollout) is declared the same way and
run by one function: freshness, fingerprint (with the step's version), reuse, run, record."""
import json
import os

import pyarrow as pa
import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.engine.steps import run_step
from pipeline.stage.step import TrainingStep
from sft import run_step as sft_step
from sft.rl import grpo, step as grpo_step
from sft.rl.config import smoke
from sft.rl.rollout_io import RolloutStep
from sft.eval import EvalStep

BANK = {"general_skills": [], "task_specific_skills": {}, "common_mistakes": [], "metadata": {"env": "textworld"}}


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run with build_pairs and export artifacts; SFT and GRPO training replaced by recorders."""
    store = ArtifactStore(str(tmp_path), "r")
    rows = pa.table({"pair_id": ["p1", "p2"], "env_instance": ["coin-train-0", "coin-train-1"]})
    store.write("build_pairs", rows, [], {"fingerprint": "bp", "config": {"prompt": {"history_length": 1}}})
    store.write("export", rows, [], {"fingerprint": "ex", "inputs": [
        {"stage": "build_pairs", "content_sha256": store.require("build_pairs").content_sha256}]},
        {"skill_bank.json": json.dumps(BANK)})
    calls = []

    def fit(pairs, out, cfg):
        calls.append("sft_fit")
        os.makedirs(out, exist_ok=True)
        return {"export": {"rows": {"used": 2}}, "global_step": cfg.max_steps, "final_loss": 1.0 + len(calls),
                "losses": [1.0], "config": {"output_dir": out}}

    def train(cfg):
        calls.append("grpo")
        os.makedirs(cfg.output_dir, exist_ok=True)
        log = os.path.join(cfg.output_dir, "grpo_log.jsonl")
        with open(log, "w") as f:
            f.write(json.dumps({"kind": "train", "step": 1, "groups": [{"rewards": [0.0, 10.0, 0.0]}]}) + "\n")
        return {"steps": 1, "bank_version": "b", "bank_file": "", "log": log}
    monkeypatch.setattr("sft.train.fit", fit)
    monkeypatch.setattr(grpo, "train", train)
    monkeypatch.setattr(grpo_step, "register_banks", lambda *a: None)
    return str(tmp_path), calls


def both(root):
    quiet = dict(log=lambda m: None)
    return (sft_step.fit_for_run(root, "r", **quiet)["skipped"],
            grpo_step.grpo_for_run(root, "r", smoke(max_steps=1), **quiet)["skipped"])


def test_a_steps_version_reruns_it_and_what_follows_it_and_nothing_before(run, monkeypatch):
    root, calls = run
    assert both(root) == (False, False) and calls == ["sft_fit", "grpo"]
    assert both(root) == (True, True) and len(calls) == 2
    monkeypatch.setattr(grpo_step.GRPOStep, "version", "2")
    assert both(root) == (True, False) and calls[2:] == ["grpo"]
    monkeypatch.setattr(sft_step.SFTFitStep, "version", "2")  # the SFT result changes: GRPO starts elsewhere
    assert both(root) == (False, False) and calls[3:] == ["sft_fit", "grpo"]
    m = json.load(open(os.path.join(root, "runs", "r", "grpo", "grpo_manifest.json")))
    assert m["fingerprint_facts"]["step_version"] == "2" and m["train_episodes"] == 3


def test_the_manifest_is_recorded_only_when_the_run_finished(run):
    root, _ = run

    class Broken(TrainingStep):
        name, inputs, manifest_name = "broken", ("export",), "done.json"

        def run(self, store, cfg):
            raise RuntimeError("killed mid-step")
    with pytest.raises(RuntimeError):
        run_step(Broken(), root, "r", smoke(), log=lambda m: None)
    assert not os.path.exists(os.path.join(root, "runs", "r", "broken", "done.json"))


def test_an_unchanged_eval_of_a_run_checkpoint_loads_no_model(run, monkeypatch):
    """The eval step names the checkpoint by its weights' hashes before loading it: the same
    weights, bank and games are not replayed; new weights are."""
    import sft.eval
    from sft.rl.rollout import GoldPolicy
    root, _ = run
    sft_step.fit_for_run(root, "r", log=lambda m: None)
    weights, opened = ["w1"], []
    monkeypatch.setattr(sft.eval, "model_policy", lambda spec, base_model="": (spec, "", {
        "policy": "hf:x", "weights_sha256": weights[0]}))
    monkeypatch.setattr(sft.eval, "open_model_policy", lambda folder, name, cfg, stack: opened.append(folder)
                        or GoldPolicy())
    cfg = sft.eval.eval_config(games="twc", episodes=2, max_steps=12)
    first = sft.eval.eval_for_run(root, "r", "sft_fit", cfg, log=lambda m: None, progress=False)
    again = sft.eval.eval_for_run(root, "r", "sft_fit", cfg, log=lambda m: None, progress=False)
    assert (first["skipped"], again["skipped"], first["wins"], again["wins"]) == (False, True, 2, 2)
    assert opened == [os.path.join(root, "runs", "r", "sft_fit")]
    weights[0] = "w2"
    assert not sft.eval.eval_for_run(root, "r", "sft_fit", cfg, log=lambda m: None, progress=False)["skipped"]
    assert len(opened) == 2


def test_every_step_is_declared_with_the_same_fields():
    steps = [sft_step.SFT_FIT, grpo_step.GRPO, EvalStep("sft_fit", lambda s: None, {"policy": "p"}),
             RolloutStep("out", lambda s: None, {"policy": "gold"})]
    assert [s.name for s in steps] == ["sft_fit", "grpo", "eval_sft_fit", "rollout"]
    assert [s.config_section for s in steps] == ["sft", "grpo", "eval", ""]
    assert [s.manifest_name for s in steps] == ["skillpipe_sft_manifest.json", "grpo_manifest.json",
                                                "_manifest.json", "_manifest.json"]
    assert all(type(s).run is not TrainingStep.run for s in steps)


def test_rollout_is_reused_while_its_tree_is_whole_and_replayed_into_a_cleared_tree(tmp_path):
    """Real TextWorld Express gold rollouts: the same settings replay nothing; a tree that lost a
    file is refused (its other files would be parsed with a new one's) or, when asked, replaced."""
    from pipeline.core.config import ConfigError
    from sft.rl.cli import collect_rollouts
    out, root = str(tmp_path / "tree"), str(tmp_path)
    kw = dict(games="coin", tasks=2, episodes_per_task=1, max_steps=12, policy="gold")
    first = collect_rollouts(out, root, "ro", **kw)
    art = ArtifactStore(root, "ro").require("rollout")
    assert not first["skipped"] and len(first["txt_files"]) == 2 and art.fingerprint
    assert art.manifest["fingerprint_facts"]["inputs"][0]["policy"] == {"policy": "gold"}
    again = collect_rollouts(out, root, "ro", **kw)
    assert again["skipped"] and again["txt_files"] == first["txt_files"]
    with pytest.raises(ConfigError, match="already holds a rollout tree"):  # other settings: a new tree
        collect_rollouts(out, root, "ro", **dict(kw, max_steps=11))
    os.remove(first["txt_files"][0])
    with pytest.raises(ConfigError, match="already holds a rollout tree"):
        collect_rollouts(out, root, "ro", **kw)
    replayed = collect_rollouts(out, root, "ro", replace_tree=True, **kw)
    assert not replayed["skipped"] and all(os.path.isfile(f) for f in replayed["txt_files"])

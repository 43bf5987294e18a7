"""The training steps after the data stages (sft_fit, grpo) skip like a stage: one fingerprint
mechanism (pipeline.core.manifest), the same XCom shape, a rerun when an input or the config changes."""
import json
import os

import pyarrow as pa
import pytest

from pipeline.core.artifacts import ArtifactError, ArtifactStore
from pipeline.core.config import PromptConfig
from sft import run_step
from sft.config import SFTFitConfig
from sft.rl import grpo, step
from sft.rl.config import smoke

BANK = {"general_skills": [], "task_specific_skills": {}, "common_mistakes": [], "metadata": {"env": "textworld"}}
ROWS = pa.table({"pair_id": ["p1", "p2"]})


def write_run(root, prompt=PromptConfig(history_length=1), bank=BANK, counters=None):
    store = ArtifactStore(str(root), "r")
    store.write("build_pairs", ROWS, [], {"fingerprint": "bp", "config": {"prompt": prompt.__dict__}})
    store.write("export", ROWS, [], {"fingerprint": "ex", "counters": counters or {},
                                     "inputs": [{"stage": "build_pairs", "content_sha256":
                                                 store.require("build_pairs").content_sha256}]},
                {"skill_bank.json": json.dumps(bank)})
    return store


@pytest.fixture
def fake_fit(monkeypatch):
    calls = []

    def fit(pairs, out, cfg):
        calls.append(cfg)
        os.makedirs(out, exist_ok=True)
        return {"export": {"rows": {"used": 2}}, "global_step": cfg.max_steps, "final_loss": 1.5, "losses": [1.5],
                "config": {"output_dir": out}}
    monkeypatch.setattr("sft.train.fit", fit)
    return calls


def test_sft_fit_skips_on_the_same_fingerprint_and_reruns_on_a_change(tmp_path, fake_fit):
    store = write_run(tmp_path)
    first = run_step.fit_for_run(str(tmp_path), "r", SFTFitConfig(max_steps=3), log=lambda m: None)
    assert (first["skipped"], first["rows"], first["uri"]) == (False, 2, os.path.join(store.run_dir, "sft_fit"))
    assert first["fingerprint_facts"]["inputs"] == [{"stage": "export",
                                                     "content_sha256": store.require("export").content_sha256}]
    assert "output_dir" not in first["fingerprint_facts"]["config"]
    again = run_step.fit_for_run(str(tmp_path), "r", SFTFitConfig(max_steps=3), log=lambda m: None)
    assert again["skipped"] and again["fingerprint"] == first["fingerprint"] and len(fake_fit) == 1
    changed = run_step.fit_for_run(str(tmp_path), "r", SFTFitConfig(max_steps=4), log=lambda m: None)
    assert not changed["skipped"] and changed["fingerprint"] != first["fingerprint"] and len(fake_fit) == 2
    write_run(tmp_path, counters={"new": 1})  # other export content: rerun
    assert not run_step.fit_for_run(str(tmp_path), "r", SFTFitConfig(max_steps=4), log=lambda m: None)["skipped"]


def test_sft_fit_refuses_a_stale_export(tmp_path, fake_fit):
    store = write_run(tmp_path)
    store.write("build_pairs", pa.table({"pair_id": ["other"]}), [], {"fingerprint": "bp2"})
    with pytest.raises(ArtifactError, match="stale"):
        run_step.fit_for_run(str(tmp_path), "r", log=lambda m: None)
    assert fake_fit == []


def test_grpo_step_uses_the_runs_prompt_config_and_skips_when_unchanged(tmp_path, fake_fit, monkeypatch):
    write_run(tmp_path)
    with pytest.raises(FileNotFoundError, match="run `skillpipe sft fit --run-id r` first"):
        step.grpo_for_run(str(tmp_path), "r", log=lambda m: None)
    run_step.fit_for_run(str(tmp_path), "r", log=lambda m: None)
    trained = []

    def train(cfg):
        trained.append(cfg)
        log = os.path.join(cfg.output_dir, "grpo_log.jsonl")
        os.makedirs(cfg.output_dir, exist_ok=True)
        with open(log, "w") as f:
            f.write(json.dumps({"kind": "train", "step": 1, "groups": [{"rewards": [0.0, 10.0]}]}) + "\n")
        return {"steps": 1, "bank_version": "bank-x", "bank_file": "", "log": log}
    monkeypatch.setattr(grpo, "train", train)
    monkeypatch.setattr(step, "register_banks", lambda *a: None)
    first = step.grpo_for_run(str(tmp_path), "r", smoke(max_steps=1), log=lambda m: None)
    assert trained[0].prompt == PromptConfig(history_length=1)
    assert (first["skipped"], first["rows"], first["train_episodes"]) == (False, 2, 2)
    again = step.grpo_for_run(str(tmp_path), "r", smoke(max_steps=1), log=lambda m: None)
    assert again["skipped"] and again["fingerprint"] == first["fingerprint"] and len(trained) == 1
    assert {k: again[k] for k in ("uri", "rows")} == {k: first[k] for k in ("uri", "rows")}
    assert not step.grpo_for_run(str(tmp_path), "r", smoke(max_steps=2), log=lambda m: None)["skipped"]

"""Coupled checkpoint: weights, optimizer, step, RNG and bank version saved and resumed together."""
import json
import os
import random

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from pipeline.bank import rows as skillbank
from sft.rl import checkpoint as ckpt
from sft.base_model import ensure_base_model
from pipeline.bank.evolving import SkillBank


@pytest.fixture()
def tiny(tmp_path):
    """A 1-layer random Llama with the real tokenizer (fast to save and load) and a stepped optimizer."""
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(ensure_base_model()))
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    opt.step()
    dyn = skillbank.make_row("task_specific", "cooking", {"title": "Read Recipe", "principle": "Read it first."},
                             source_trajectory_ids=["traj-1"])
    bank = SkillBank([skillbank.make_row("general", "", {"title": "Look", "principle": "Look."}), dyn],
                     dynamic=[dyn["skill_id"]], history=[{"step": 3, "version": "v", "parent_version": "p"}])
    return model, tok, opt, bank


def test_save_then_resume_restores_step_bank_optimizer_and_rng(tiny, tmp_path):
    model, tok, opt, bank = tiny
    random.seed(123)
    torch.manual_seed(7)
    path = ckpt.save(str(tmp_path), 3, model, tok, opt, bank, {"env": "textworld"})
    expected_py, expected_torch = random.random(), torch.rand(1)
    assert path == os.path.join(str(tmp_path), "checkpoints", "step-000003")
    manifest = json.load(open(os.path.join(path, "checkpoint.json")))
    assert manifest["step"] == 3 and manifest["bank_version"] == bank.version
    assert len(manifest["weights_sha256"]) == 64

    random.seed(999)  # disturb every state, then resume
    torch.manual_seed(999)
    fresh = torch.optim.AdamW(LlamaForCausalLM.from_pretrained(os.path.join(path, "policy")).parameters(), lr=1e-3)
    state = ckpt.restore_state(path, fresh)
    assert state["step"] == 3
    assert (state["bank"].version, state["bank"].dynamic, state["bank"].history) == \
        (bank.version, bank.dynamic, bank.history)
    assert state["bank"].rows[1]["source_trajectory_ids"] == ["traj-1"]
    assert (random.random(), float(torch.rand(1))) == (expected_py, float(expected_torch))
    a, b = opt.state_dict()["state"], fresh.state_dict()["state"]
    assert a.keys() == b.keys() and all(torch.equal(a[k]["exp_avg"], b[k]["exp_avg"]) for k in a)


def test_latest_resolve_and_mismatched_bank(tiny, tmp_path):
    model, tok, opt, bank = tiny
    assert ckpt.latest(str(tmp_path)) is None and ckpt.resolve("auto", str(tmp_path)) is None
    ckpt.save(str(tmp_path), 2, model, tok, opt, bank, {})
    last = ckpt.save(str(tmp_path), 10, model, tok, opt, bank, {})
    assert ckpt.latest(str(tmp_path)) == last == ckpt.resolve("auto", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="not a GRPO checkpoint"):
        ckpt.resolve(str(tmp_path), str(tmp_path))
    m = json.load(open(os.path.join(last, "checkpoint.json")))
    m["bank_version"] = "bank-other"
    json.dump(m, open(os.path.join(last, "checkpoint.json"), "w"))
    with pytest.raises(ValueError, match="manifest says bank-other"):
        ckpt.restore_state(last, torch.optim.AdamW(model.parameters()))


def test_fresh_run_replaces_earlier_outputs_but_keeps_other_files(tmp_path, monkeypatch):
    """A non-resumed run must not append to an earlier log nor leave a later-step checkpoint
    that --resume auto would then pick (a retried task replaces, never appends)."""
    from sft.rl import grpo
    from sft.rl.config import smoke
    out = tmp_path / "grpo"
    (out / "checkpoints" / "step-000003").mkdir(parents=True)
    (out / "checkpoints" / "step-000003" / "checkpoint.json").write_text("{}")
    (out / "grpo_log.jsonl").write_text('{"kind": "train", "step": 3}\n')
    (out / "notes.txt").write_text("mine")

    def stop(cfg):
        raise RuntimeError("stop after set-up")
    monkeypatch.setattr(grpo, "starting_policy", stop)
    with pytest.raises(RuntimeError, match="stop after set-up"):
        grpo.train(smoke(output_dir=str(out)))
    assert sorted(p.name for p in out.iterdir()) == ["banks", "notes.txt"]

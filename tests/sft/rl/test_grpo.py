"""A few real GRPO steps on TextWorld Express with the embedded SmolLM2, then a resume.

Tiny budget (1 task x 2 episodes x 2 actions, 16 new tokens): the point is the plumbing - finite
loss and KL, rewards and advantages logged per group, a coupled checkpoint naming its bank
version, and a resume that continues from that step with that bank.
"""
import json
import math
import os

import pytest

from pipeline.bank import rows as skillbank
from sft.rl import checkpoint as ckpt
from sft.rl.grpo import train
from sft.rl.config import smoke
from pipeline.bank.evolving import SkillBank

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("lora_r", [0, 8], ids=["full", "lora"])
def test_grpo_steps_then_resume(tmp_path, lora_r):
    bank_path = str(tmp_path / "bank.json")
    SkillBank([skillbank.make_row("general", "", {"title": "Look First", "principle": "Read the room."})]).save(bank_path)
    out = str(tmp_path / "grpo")
    cfg = smoke(output_dir=out, max_steps=1, max_env_steps=2, max_completion_length=16, val_tasks=1, eval_steps=1,
                evolve_skills=False, skill_bank=bank_path, save_steps=1, lora_r=lora_r)
    first = train(cfg)
    lines = [json.loads(x) for x in open(first["log"], encoding="utf-8")]
    step1 = [x for x in lines if x["kind"] == "train"]
    assert [x["step"] for x in step1] == [1]
    assert math.isfinite(step1[0]["loss"]) and math.isfinite(step1[0]["kl"]) and step1[0]["samples"] > 0
    (group,) = step1[0]["groups"]
    assert group["group_id"].startswith("s1:twc-train-") and len(group["rewards"]) == 2
    assert len(group["advantages"]) == 2 and group["category"] == "put_away_objects"
    assert [x["kind"] for x in lines] == ["train", "validation"]
    manifest = ckpt.read_manifest(first["checkpoint"])
    assert manifest["step"] == 1 and manifest["bank_version"] == first["bank_version"] == SkillBank.load(bank_path, "textworld").version

    cfg.max_steps, cfg.resume = 2, "auto"
    second = train(cfg)
    assert second["started_at_step"] == 1 and second["steps"] == 2
    assert second["bank_version"] == first["bank_version"]
    lines = [json.loads(x) for x in open(second["log"], encoding="utf-8")]
    assert [x["step"] for x in lines if x["kind"] == "train"] == [1, 2]
    policy_files = os.listdir(os.path.join(second["checkpoint"], "policy"))
    if not lora_r:
        assert "model.safetensors" in policy_files
        return
    # LoRA: the checkpoint holds only the adapter, and loads back onto the starting policy
    adapter = os.path.join(second["checkpoint"], "policy", "adapter_model.safetensors")
    assert "model.safetensors" not in policy_files and os.path.getsize(adapter) < 10 * 2**20
    from sft.rl.grpo import starting_policy
    from sft.rl.policy import load_model
    tuned, start = load_model(second["checkpoint"])[0], load_model(starting_policy(cfg))[0]
    name = "model.layers.0.self_attn.q_proj.weight"
    delta = (tuned.state_dict()[name] - start.state_dict()[name]).abs().max().item()
    assert 0 < delta < 0.1  # two small adapter updates, merged

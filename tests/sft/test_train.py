"""SFT fit on the embedded SmolLM2 with LoRA (CPU): loss falls on a tiny overfit set, every
checkpoint carries its manifest, and a resumed run continues from the saved step.

Kept small for 2 shared cores: one batch of 2 demo rows (the same batch every step), 3 steps, then
1 resumed step. Losses are not pinned (thread-count dependent in the last digits); the direction is.
"""
import json
import math
import os
import subprocess
import sys

import pytest

from sft import manifest as mf
from sft.base_model import content_hashes, ensure_base_model
from sft.config import SFTFitConfig
from sft.demo import BANK_VERSION, write_demo_export
from sft.train import fit, run
from tests.helpers.paths import REPO

TINY = SFTFitConfig(max_rows=2, per_device_train_batch_size=2, learning_rate=1e-3, max_steps=3, max_length=512)


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return write_demo_export(str(tmp_path_factory.mktemp("sft")))


@pytest.fixture(scope="module")
def first_run(export, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("sft") / "out")
    return out, fit(export.path, out, TINY)


def test_lora_loss_is_finite_and_decreasing(first_run):
    _, m = first_run
    losses = m["losses"]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert losses[0] > losses[1] > losses[2], losses


def test_manifest_names_export_bank_model_and_topology(first_run, export):
    out, m = first_run
    assert m["export"]["fingerprint"] == export.fingerprint
    assert m["export"]["bank_versions"] == [BANK_VERSION]
    assert m["export"]["rows"] == {"total": 12, "other_split": 4, "used": 2, "quarantined": 0}
    assert {k: m["base_model"][k] for k in ("weights_sha256", "tokenizer_sha256")} == content_hashes(ensure_base_model())
    assert (m["world_size"], m["zero_stage"], m["global_step"], m["final_loss"]) == (1, 0, 3, m["losses"][-1])
    # completion + <|im_end|> + "\n" tokens of demo rows 0 and 1 (SmolLM2 tokenizer)
    assert m["preflight"] == {"rows_checked": 2, "supervised_tokens": 27 + 30}
    on_disk = mf.read_manifest(os.path.join(out, "checkpoint-3"))
    assert (on_disk["global_step"], on_disk["export"]["fingerprint"]) == (3, export.fingerprint)
    assert os.path.isfile(os.path.join(out, "adapter_model.safetensors"))


def test_resume_continues_from_saved_step(first_run, export):
    out, first = first_run
    m = fit(export.path, out, SFTFitConfig(**{**TINY.__dict__, "max_steps": 4, "resume": "auto"}))
    assert m["resumed"] == {"from": os.path.join(out, "checkpoint-3"), "mode": "continue"}
    assert m["global_step"] == 4
    assert m["losses"][:3] == first["losses"]  # history restored, one new step logged
    assert len(m["losses"]) == 4 and m["losses"][3] < first["losses"][2]


def test_weights_only_resume_restarts_from_trained_adapter(first_run, export, tmp_path, monkeypatch):
    out, first = first_run
    monkeypatch.setattr(mf, "runtime_topology", lambda: (1, 2))  # as if relaunched under ZeRO-2
    m = fit(export.path, str(tmp_path / "w"), SFTFitConfig(**{**TINY.__dict__, "max_steps": 1, "resume_mode": "weights_only",
                                                              "resume": os.path.join(out, "checkpoint-3")}))
    assert m["resumed"] == {"from": os.path.join(out, "checkpoint-3"), "mode": "weights_only"}
    assert m["global_step"] == 1  # fresh optimizer and step counter ...
    assert m["losses"][0] < first["losses"][0]  # ... but the trained adapter weights were loaded


def test_resume_with_other_world_size_fails_before_loading(first_run, export, monkeypatch):
    out, _ = first_run
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(mf.ResumeError, match="world size 1 -> 2"):
        run(SFTFitConfig(**{**TINY.__dict__, "pairs": export.path, "output_dir": out, "resume": "auto"}))


def test_accelerate_launch_zero2_one_process(export, tmp_path):
    out = str(tmp_path / "z2")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "sft/configs/zero2.yaml",
           "--num_processes", "1", "--mixed_precision", "no", "-m", "sft.train", "--pairs", export.path,
           "--output_dir", out, "--max_steps", "2", "--max_rows", "2", "--learning_rate", "1e-3"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(cmd, cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["global_step"] == 2 and summary["losses"][1] < summary["losses"][0]
    m = mf.read_manifest(os.path.join(out, "checkpoint-2"))
    assert (m["world_size"], m["zero_stage"]) == (1, 2)


def test_bf16_without_a_gpu_is_cpu_autocast(tmp_path):
    """precision bf16 on a machine without CUDA asks transformers for CPU autocast (it refuses bf16
    otherwise); fp32 and auto stay full precision."""
    import torch

    from sft.train import _sft_args
    if torch.cuda.is_available():
        pytest.skip("CPU-only behaviour")
    args = _sft_args(SFTFitConfig(output_dir=str(tmp_path), precision="bf16"))
    assert args.bf16 and args.use_cpu
    for precision in ("fp32", "auto"):
        args = _sft_args(SFTFitConfig(output_dir=str(tmp_path), precision=precision))
        assert not args.bf16 and not args.use_cpu

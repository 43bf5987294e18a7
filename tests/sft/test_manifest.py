"""Checkpoint manifest I/O and the resume compatibility rules (no model needed)."""
import pytest

from sft import manifest as mf
from sft.submit import config_path


def _saved(world=1, zero=0, fp="fp-1", step=3):
    return {"export": {"fingerprint": fp}, "world_size": world, "zero_stage": zero, "global_step": step}


def test_same_topology_continues():
    assert mf.check_resume(_saved(), world_size=1, zero_stage=0, export_fingerprint="fp-1") == "continue"


def test_changed_world_size_or_zero_stage_fails_with_clear_message():
    with pytest.raises(mf.ResumeError) as e:
        mf.check_resume(_saved(world=8, zero=3), world_size=4, zero_stage=2, export_fingerprint="fp-1")
    assert str(e.value).startswith("cannot resume step 3: world size 8 -> 4, ZeRO stage 3 -> 2. ")
    assert "--resume_mode weights_only" in str(e.value)


def test_weights_only_mode_restarts_instead_of_failing():
    assert mf.check_resume(_saved(zero=2), world_size=1, zero_stage=0, export_fingerprint="fp-1",
                           mode="weights_only") == "weights_only"


def test_other_export_or_missing_manifest_fails():
    with pytest.raises(mf.ResumeError, match="trained on export fp-1, not fp-2"):
        mf.check_resume(_saved(), world_size=1, zero_stage=0, export_fingerprint="fp-2")
    with pytest.raises(mf.ResumeError, match="has no skillpipe_sft_manifest.json"):
        mf.check_resume(None, world_size=1, zero_stage=0, export_fingerprint="fp-1")


def test_manifest_roundtrip_and_latest_checkpoint(tmp_path):
    for step in (2, 10):
        mf.write_checkpoint_manifest(str(tmp_path / f"checkpoint-{step}"), _saved(step=step))
    assert mf.find_checkpoint(str(tmp_path), "auto") == str(tmp_path / "checkpoint-10")
    assert mf.read_manifest(str(tmp_path / "checkpoint-2"))["global_step"] == 2
    assert mf.read_manifest(str(tmp_path)) is None
    assert mf.find_checkpoint(str(tmp_path / "nothing"), "auto") is None
    assert mf.find_checkpoint(str(tmp_path), "") is None
    with pytest.raises(FileNotFoundError):
        mf.find_checkpoint(str(tmp_path), str(tmp_path / "checkpoint-7"))


def test_topology_from_env_and_from_accelerate_configs():
    assert mf.runtime_topology({}) == (1, 0)
    assert mf.runtime_topology({"WORLD_SIZE": "4", "ACCELERATE_USE_DEEPSPEED": "true",
                                "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}) == (4, 3)
    assert mf.config_topology(str(config_path("cpu"))) == (1, 0)
    assert mf.config_topology(str(config_path("ddp"))) == (8, 0)
    assert mf.config_topology(str(config_path("zero2_offload")), num_processes=2) == (2, 2)
    assert mf.config_topology(str(config_path("zero3"))) == (8, 3)
    assert mf.config_topology(str(config_path("multinode"))) == (16, 3)

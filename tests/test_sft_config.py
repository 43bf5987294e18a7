"""SFT config: defaults with help text, YAML loading, command-line overrides (TRL's parser)."""
import dataclasses

import pytest

from sft.config import SFTFitConfig, from_dict, load_yaml, to_argv
from sft.train import parse_args


def test_every_field_has_a_default_and_help():
    for f in dataclasses.fields(SFTFitConfig):
        assert f.default is not dataclasses.MISSING, f.name
        assert f.metadata.get("help"), f.name


def test_yaml_then_command_line_wins(tmp_path):
    p = tmp_path / "run.yaml"
    p.write_text("max_steps: 7\nlora_r: 4\nlearning_rate: 0.001\n")
    assert load_yaml(str(p)).max_steps == 7
    cfg = parse_args(["--config", str(p), "--lora_r", "16", "--lora", "false"])
    assert (cfg.max_steps, cfg.lora_r, cfg.learning_rate, cfg.lora) == (7, 16, 0.001, False)


def test_to_argv_roundtrips_non_defaults():
    cfg = SFTFitConfig(pairs="/x/export", max_steps=9, lora=False, learning_rate=5e-5)
    assert to_argv(cfg) == ["--pairs", "/x/export", "--max_steps", "9", "--learning_rate", "5e-05",
                            "--lora", "False"]
    assert parse_args(to_argv(cfg)) == cfg


def test_unknown_key_and_bad_value_raise():
    with pytest.raises(KeyError, match="unknown SFT config keys: \\['lora_rank'\\]"):
        from_dict({"lora_rank": 8})
    with pytest.raises(ValueError, match="resume_mode must be strict or weights_only"):
        SFTFitConfig(resume_mode="maybe").validate()

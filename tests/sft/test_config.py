"""SFT config: defaults with help text, YAML loading, command-line overrides (TRL's parser)."""
import dataclasses

import pytest

from pipeline.core.config import ConfigError
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
    with pytest.raises(ConfigError, match="unknown SFT config keys \\['lora_rank'\\]"):
        from_dict({"lora_rank": 8})
    with pytest.raises(ConfigError, match="^resume_mode: must be one of strict, weights_only, got 'maybe'$"):
        SFTFitConfig(resume_mode="maybe").validate()


def test_values_are_coerced_strictly():
    # the same rules as the pipeline config: "false" is False, 1.7 steps is an error, not 1
    cfg = from_dict({"lora": "false", "max_steps": 4.0, "learning_rate": "1e-5"})
    assert (cfg.lora, cfg.max_steps, cfg.learning_rate) == (False, 4, 1e-5)
    for data, msg in [({"max_steps": 1.7}, "max_steps: expected an integer, got 1.7 (float)"),
                      ({"max_steps": -5}, "max_steps: must be >= 1, got -5"),
                      ({"lora_dropout": 1.5}, "lora_dropout: must be <= 1, got 1.5"),
                      ({"lora_r": 0}, "lora_r: must be >= 1 when lora is on, got 0")]:
        with pytest.raises(ConfigError) as e:
            from_dict(data)
        assert str(e.value) == msg
    assert from_dict({"lora": False, "lora_r": 0}).lora_r == 0  # rank unused without LoRA


def test_load_yaml_rejects_non_mapping_and_bad_yaml(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("- 1\n")
    with pytest.raises(ConfigError, match="expected a mapping of SFT config fields, got list"):
        load_yaml(str(p))
    p.write_text("max_steps: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(str(p))


def test_train_entry_point_reports_a_bad_value_in_one_line(capsys):
    from sft.train import main
    assert main(["--max_steps", "0", "--pairs", "nowhere"]) == 2
    assert capsys.readouterr().err.strip() == "error: max_steps: must be >= 1, got 0"

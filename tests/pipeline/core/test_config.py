"""Pipeline config loading is strict: wrong types, unknown keys and out-of-range values raise a
``ConfigError`` naming ``section.key`` instead of being silently coerced (fresh-eyes report)."""
import dataclasses

import pytest
from typer.testing import CliRunner

from pipeline.core.config import PER_ENV_CAPS, ConfigError, ParseConfig, PipelineConfig, from_dict, load_config
from pipeline.envs import REGISTRY
from pipeline import selection as parse_stage


def _err(data) -> str:
    with pytest.raises(ConfigError) as e:
        from_dict(data)
    return str(e.value)


@pytest.mark.parametrize("text,expected", [("false", False), ("No", False), ("0", False), ("TRUE", True),
                                           ("yes", True), (0, False), (True, True)])
def test_bool_accepts_real_bools_and_yes_no_strings(text, expected):
    # `bool("false")` is True: the old loader turned synthetic_done: "false" into True
    assert from_dict({"distill": {"synthetic_done": text}}).distill.synthetic_done is expected


def test_bool_rejects_other_strings_and_numbers():
    assert _err({"distill": {"synthetic_done": "nope"}}) == \
        "distill.synthetic_done: expected a boolean (true/false/yes/no/1/0), got 'nope' (str)"
    assert _err({"prompt": {"skills": 2}}).startswith("prompt.skills: expected a boolean")


def test_int_must_be_integral_and_not_bool():
    assert from_dict({"parse": {"max_per_instance": 1.0}}).parse.max_per_instance == 1
    assert _err({"parse": {"max_per_instance": 1.7}}) == "parse.max_per_instance: expected an integer, got 1.7 (float)"
    assert _err({"parse": {"max_per_instance": True}}) == \
        "parse.max_per_instance: expected an integer, got True (bool)"
    assert _err({"parse": {"max_per_instance": None}}) == \
        "parse.max_per_instance: expected an integer, got None (NoneType)"


def test_float_accepts_yaml_exponent_strings_but_not_nan():
    # PyYAML reads `1e-1` (no dot) as a string
    assert from_dict({"export": {"val_fraction": "1e-1"}}).export.val_fraction == 0.1
    assert _err({"llm": {"timeout_s": "nan"}}) == "llm.timeout_s: expected a finite number, got 'nan' (str)"


def test_non_mapping_top_level_and_sections_are_clear_errors():
    assert _err([1, 2]) == ("config: expected a mapping of sections (llm, parse, remove_loops, verify, memory, skills, "
                            "distill, prompt, build_pairs, export, quality, usefulness, sft, grpo, eval), got list")
    assert _err({"parse": [1, 2]}) == "parse: expected a mapping of keys to values, got list [1, 2]"
    assert _err({"parse": {"per_env": 5}}) == "parse.per_env: expected a mapping, got 5 (int)"
    assert _err({"build_pairs": {"nope": 1}}).startswith("unknown config key build_pairs.nope;")
    # `build_pairs` is both a section and (elsewhere) a method name: sections come from the fields only
    assert _err({"check_config": {}}).startswith("unknown config section 'check_config'")


def test_per_env_rejects_typos_and_unknown_envs():
    cfg = from_dict({"parse": {"per_env": {"alfworld": {"max_per_instance": 1}, "webshop": None}}})
    assert cfg.parse.per_env == {"alfworld": {"max_per_instance": 1}, "webshop": {}}
    assert parse_stage.caps(cfg.parse, "alfworld") == {"max_per_instance": 1, "max_success_instances": 0,
                                                       "max_failure_instances": 0}
    assert _err({"parse": {"per_env": {"alfworld": {"max_per_instanc": 1}}}}) == (
        "parse.per_env.alfworld.max_per_instanc: unknown cap; allowed: max_per_instance, "
        "max_success_instances, max_failure_instances")
    assert _err({"parse": {"per_env": {"alfwrld": {"max_per_instance": 1}}}}) == (
        f"parse.per_env: unknown env 'alfwrld'; known: {', '.join(sorted(REGISTRY))}")
    assert _err({"parse": {"per_env": {"webshop": {"max_per_instance": -2}}}}) == \
        "parse.per_env.webshop.max_per_instance: must be >= 0, got -2"
    assert _err({"parse": {"per_env": {"webshop": 3}}}).startswith("parse.per_env.webshop: expected a mapping of caps")


def test_per_env_caps_are_the_keys_the_parse_stage_reads():
    assert tuple(parse_stage.caps(ParseConfig(), "alfworld")) == PER_ENV_CAPS


def test_ranges_and_choices():
    # max_per_instance: -1 would quarantine every trajectory
    assert _err({"parse": {"max_per_instance": -1}}) == "parse.max_per_instance: must be >= 0, got -1"
    assert _err({"llm": {"concurrency": 0}}) == "llm.concurrency: must be >= 1, got 0"
    assert _err({"export": {"val_fraction": 1.5}}) == "export.val_fraction: must be <= 1, got 1.5"
    assert _err({"build_pairs": {"leakage": "drop"}}) == "build_pairs.leakage: must be one of quarantine, flag, got 'drop'"
    assert _err({"build_pairs": {"short_think": "fix"}}) == \
        "build_pairs.short_think: must be one of quarantine, flag, got 'fix'"
    assert _err({"build_pairs": {"min_think_words": -1}}) == "build_pairs.min_think_words: must be >= 0, got -1"
    assert _err({"llm": {"structured_output": "xml"}}) == \
        "llm.structured_output: must be one of auto, json_schema, json_object, none, got 'xml'"


def test_defaults_pass_and_empty_file_is_defaults(tmp_path):
    p = tmp_path / "empty.yaml"
    p.write_text("")
    assert load_config(str(p)) == PipelineConfig()


def test_cli_prints_a_usage_error_without_traceback(tmp_path):
    from pipeline.cli import app
    p = tmp_path / "bad.yaml"
    p.write_text("parse:\n  max_per_instance: 1.7\n")
    res = CliRunner().invoke(app, ["run", "--config", str(p), "--input", "data/samples", "--stages", "parse",
                                   "--root", str(tmp_path), "--run-id", "t"])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit)  # usage error, not a crash
    assert "parse.max_per_instance: expected an integer, got 1.7" in " ".join(res.output.split())
    assert not (tmp_path / "runs").exists()

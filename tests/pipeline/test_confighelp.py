"""`skillpipe config --show`: the effective config with each key's help, and `run --help` pointing at it."""
import json
import re

import yaml
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.config import load_config, to_dict

cli = CliRunner()
SECTIONS = ["llm", "parse", "remove_loops", "verify", "memory", "skills", "distill", "prompt", "build_pairs", "export",
            "quality", "usefulness", "sft", "grpo", "eval"]


def _words(help_text: str) -> str:
    """Rich help without its box drawing and line wrapping: one line of single-spaced words."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", help_text).split())


def _config_file(tmp_path):
    path = tmp_path / "my.yaml"
    path.write_text("llm:\n  temperature: 0.3\nprompt:\n  history_length: 4\n"
                    "parse:\n  per_env:\n    webshop:\n      max_per_instance: 1\n")
    return str(path)


def test_show_prints_merged_config_with_help_comments(tmp_path):
    path = _config_file(tmp_path)
    res = cli.invoke(app, ["config", "--show", "--config", path])
    assert res.exit_code == 0, res.output
    out = res.output
    assert out.startswith(f"# skillpipe effective config: the defaults merged with {path}\n")
    assert "\nllm:\n  # OpenAI-compatible endpoint; empty = start the embedded llama.cpp server\n  base_url: ''\n" in out
    assert "  # sampling temperature (0 = greedy, reproducible)\n  temperature: 0.3\n" in out
    assert "  # observation/action pairs shown in the prompt" in out
    assert "  history_length: 4\n" in out
    assert "  per_env:\n    webshop:\n      max_per_instance: 1\n" in out
    assert [ln[:-1] for ln in out.splitlines() if ln and ln[0].isalpha()] == SECTIONS
    shown = yaml.safe_load(out)
    assert shown == to_dict(load_config(path))
    assert shown["llm"]["max_tokens"] == 1536  # a default the file does not set
    again = tmp_path / "shown.yaml"  # what it prints is itself a config file
    again.write_text(out)
    assert to_dict(load_config(str(again))) == shown


def test_show_json_is_plain(tmp_path):
    path = _config_file(tmp_path)
    res = cli.invoke(app, ["config", "--show", "--json", "-c", path])
    assert res.exit_code == 0, res.output
    shown = json.loads(res.output)
    assert shown == to_dict(load_config(path))
    assert (shown["llm"]["temperature"], shown["prompt"]["history_length"], shown["export"]["val_fraction"]) == (0.3, 4, 0.1)


def test_show_defaults_and_bad_file(tmp_path):
    res = cli.invoke(app, ["config", "--show"])
    assert res.exit_code == 0
    assert res.output.startswith("# skillpipe effective config: the defaults (no --config file)\n")
    assert yaml.safe_load(res.output) == to_dict(load_config(None))
    bad = tmp_path / "bad.yaml"
    bad.write_text("llm:\n  temperature: -1\n")
    res = cli.invoke(app, ["config", "--show", "-c", str(bad)])
    assert res.exit_code == 2
    assert "llm.temperature: must be >= 0, got -1.0" in _words(res.output)


def test_config_without_show_prints_its_help():
    res = cli.invoke(app, ["config"])
    assert res.exit_code == 0
    assert "--show" in res.output and "--json" in res.output


def test_run_help_names_sections_and_points_at_config_show():
    out = _words(cli.invoke(app, ["run", "--help"]).output)
    assert f"sections: {', '.join(SECTIONS)}" in out
    assert "every key with its default and help: skillpipe config --show" in out

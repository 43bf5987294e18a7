"""`--config` of the training commands: a run config's bad sft:/grpo:/eval: value is a usage error
naming the file and `section.key`, raised before anything trains."""
import re

import pytest
from typer.testing import CliRunner

from pipeline.cli import app


@pytest.mark.parametrize("cmd,yaml_text,msg", [
    (["sft", "fit"], "sft:\n  max_steps: 0\n", "sft.max_steps: must be >= 1, got 0"),
    (["sft", "fit"], "sft:\n  output_dir: elsewhere\n", "sft.output_dir: not a config key: set by the run"),
    (["rl", "grpo"], "grpo:\n  num_generations: 1\n", "grpo.num_generations: must be >= 2, got 1"),
    (["rl", "grpo"], "grpo:\n  games: [bogus]\n", "grpo.games: unknown TextWorld Express game(s) 'bogus'"),
    (["eval", "--policy", "sft_fit"], "eval:\n  episodes: -2\n", "eval.episodes: must be >= 1, got -2"),
])
def test_bad_training_section_is_a_usage_error_naming_file_and_key(tmp_path, cmd, yaml_text, msg):
    path = tmp_path / "run.yaml"
    path.write_text(yaml_text)
    res = CliRunner().invoke(app, [*cmd, "--run-id", "r", "--root", str(tmp_path), "--config", str(path)],
                             env={"COLUMNS": "400"})
    out = " ".join(re.sub(r"[│╭╮╰╯─]", " ", res.output).split())
    assert res.exit_code == 2, res.output
    assert f"Invalid value for --config: config {path}: {msg}" in out
    assert not (tmp_path / "runs").exists()

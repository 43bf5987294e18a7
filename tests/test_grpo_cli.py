"""`rollout` and `grpo` commands: the rollout tree parses back through `skillpipe run` with equal steps."""
import pytest
from typer.testing import CliRunner

from pipeline.artifacts import ArtifactStore
from pipeline.cli import app as skillpipe
from sft.grpo_cli import app


def test_help_lists_both_commands():
    out = CliRunner().invoke(app, ["--help"]).output
    assert "rollout" in out and "grpo" in out


def test_unknown_policy_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(app, ["rollout", "--out", str(tmp_path / "t"), "--policy", str(tmp_path / "nope"),
                                   "--tasks", "1", "--max-steps", "1"])
    assert res.exit_code == 2 and "must be embedded, endpoint or a model folder" in res.output


@pytest.mark.slow
def test_embedded_rollout_tree_parses_back(tmp_path):
    tree, root = str(tmp_path / "tree"), str(tmp_path)
    res = CliRunner().invoke(app, ["rollout", "--out", tree, "--root", root, "--run-id", "roll", "--games",
                                   "twc,cookingworld", "--tasks", "2", "--episodes-per-task", "2", "--max-steps", "3",
                                   "--max-tokens", "48"])
    assert res.exit_code == 0, res.output
    rolled = ArtifactStore(root, "roll").require("rollout").read_rows()
    assert len(rolled) == 4
    back = CliRunner().invoke(skillpipe, ["run", "--input", tree, "--run-id", "back", "--root", root,
                                          "--stages", "parse", "--config", str(_cfg(tmp_path))])
    assert back.exit_code == 0, back.output
    parsed = ArtifactStore(root, "back").require("parse").read_rows()
    key = lambda r: (r["env_instance"], r["task"], [s["action"] for s in r["steps"]])  # noqa: E731
    assert sorted(len(r["steps"]) for r in parsed) == sorted(len(r["steps"]) for r in rolled)
    assert sorted(map(key, parsed), key=str) == sorted(
        ((f"env{i:03d}", r["task"], [s["action"] for s in r["steps"]]) for i, r in
         zip([0, 1, 0, 1], rolled)), key=str)


def _cfg(tmp_path):
    p = tmp_path / "cfg.yaml"
    p.write_text("parse:\n  max_per_instance: 100\n")  # keep every episode (selection is not under test)
    return p

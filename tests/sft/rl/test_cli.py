"""`rollout` and `grpo` commands: the rollout tree parses back through `skillpipe run` with equal steps."""
import pytest
from typer.testing import CliRunner

from pipeline.core.artifacts import ArtifactStore
from pipeline.cli import app as skillpipe
from sft.rl.cli import app


def test_help_lists_both_commands():
    out = CliRunner().invoke(app, ["--help"]).output
    assert "rollout" in out and "grpo" in out


def test_unknown_policy_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(app, ["rollout", "--out", str(tmp_path / "t"), "--policy", str(tmp_path / "nope"),
                                   "--tasks", "1", "--max-steps", "1"])
    assert res.exit_code == 2 and "must be gold, embedded, endpoint or a model folder" in res.output


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
    parse = ArtifactStore(root, "back").require("parse")
    parsed = parse.read_rows()
    # parse quarantines exact duplicates (same content, any source): two identical episodes of one game count once
    dups = [q for q in parse.read_rows(quarantine=True) if q["reason"] == "duplicate_trajectory"]
    assert len(parsed) + len(dups) == len(rolled)
    key = lambda r: str((r["env_instance"], r["task"], [s["action"] for s in r["steps"]]))  # noqa: E731
    assert {key(r) for r in parsed} == {key(dict(r, env_instance=f"env{i:03d}")) for i, r in zip([0, 1, 0, 1], rolled)}


def _cfg(tmp_path):
    p = tmp_path / "cfg.yaml"
    p.write_text("parse:\n  max_per_instance: 100\n")  # keep every episode (selection is not under test)
    return p


def _invoke(*args):
    res = CliRunner().invoke(app, list(args))
    return res, " ".join(res.output.replace("│", " ").split())  # un-wrap the rich error box


def test_bare_grpo_is_a_usage_error_not_a_full_default_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res, out = _invoke("grpo")
    assert res.exit_code == 2 and "give --run-id (continue a pipeline run) or --output-dir" in out
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args,msg", [
    (["--max-steps", "0"], "max_steps: must be >= 1, got 0"),  # used to overwrite the GRPO result with 0 steps
    (["--output-dir", "x"], "--output-dir cannot be combined with --run-id"),
    (["--config", "PROMPT_YAML"], "prompt (in --config) cannot be combined with --run-id"),
])
def test_grpo_run_id_with_bad_options_is_refused_before_training(tmp_path, args, msg):
    (tmp_path / "prompt.yaml").write_text("prompt: {history_length: 3}\n")
    args = [str(tmp_path / "prompt.yaml") if a == "PROMPT_YAML" else a for a in args]
    res, out = _invoke("grpo", "--run-id", "sample", "--root", str(tmp_path), *args)
    assert res.exit_code == 2 and msg in out, out
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("yaml_text,msg", [
    ("num_generations: 1\n", "num_generations: must be >= 2, got 1"),
    ("tasks_per_step: 0\n", "tasks_per_step: must be >= 1, got 0"),
    ("lora_r: -1\n", "lora_r: must be >= 0, got -1"),
    ("games: [twc, bogus]\n", "games: unknown TextWorld Express game(s) 'bogus'"),
    ("max_step: 3\n", "unknown GRPO config keys ['max_step']"),
    ("- 1\n", "expected a mapping of GRPOConfig fields, got list"),
    ("prompt: {history_length: -1}\n", "history_length: must be >= 0, got -1"),
    ("prompt: {history: 3}\n", "unknown GRPO config prompt keys ['history']"),
    ("prompt: 3\n", "prompt: expected a mapping of prompt fields, got int"),
])
def test_grpo_config_file_errors_are_usage_errors(tmp_path, yaml_text, msg):
    p = tmp_path / "g.yaml"
    p.write_text(yaml_text)
    res, out = _invoke("grpo", "--config", str(p), "--output-dir", str(tmp_path / "out"))
    assert res.exit_code == 2 and msg in out, out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,code,msg", [
    (["--tasks", "0"], 2, "Invalid value for '--tasks': Input should be greater than or equal to 1"),
    (["--games", "bogus"], 2, "games: unknown TextWorld Express game(s) 'bogus'; known: arithmetic, coin,"),
    (["--fold", "test"], 2, "must be train or dev, got 'test'"),
])
def test_rollout_bad_options_fail_before_any_server_starts(tmp_path, args, code, msg):
    res, out = _invoke("rollout", "--out", str(tmp_path / "t"), "--root", str(tmp_path), *args)
    assert res.exit_code == code and msg in out, out
    assert not (tmp_path / "t").exists()  # the embedded server (which logs there) never started


def test_rollout_without_alfworld_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))  # no json_2.1.1/ under it
    res, out = _invoke("rollout", "--env", "alfworld", "--out", str(tmp_path / "t"))
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)
    assert out.startswith("error: ALFWorld is not available: missing") and "Traceback" not in out


def test_grpo_config_coerces_like_the_pipeline_config():
    from sft.rl.config import from_dict, smoke
    cfg = from_dict({"games": "twc, cookingworld", "scale_rewards": "no", "max_steps": 3.0, "output_dir": "o"})
    assert (cfg.games, cfg.scale_rewards, cfg.max_steps) == (["twc", "cookingworld"], False, 3)
    assert smoke().num_generations == 2  # the CPU budget itself passes validation


def test_grpo_config_nests_the_prompt_config():
    from pipeline.core.config import PromptConfig
    from sft.rl.config import from_dict, to_dict
    cfg = from_dict({"output_dir": "o", "prompt": {"history_length": "3", "skills": "false"}})
    assert cfg.prompt == PromptConfig(history_length=3, skills=False)
    assert to_dict(cfg)["prompt"] == {"history_length": 3, "top_k_general": 6, "max_mistakes": 5, "skills": False}
    assert from_dict({"output_dir": "o", "prompt": PromptConfig(max_mistakes=1)}).prompt.max_mistakes == 1
    with pytest.warns(FutureWarning, match=r"\['history_length'\] are now under `prompt:`"):
        assert from_dict({"output_dir": "o", "history_length": 4}).prompt == PromptConfig(history_length=4)


def test_run_prompt_config_reads_the_build_pairs_manifest(tmp_path):
    import pyarrow as pa

    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.config import ConfigError, PromptConfig
    from sft.rl.config import run_prompt_config
    store = ArtifactStore(str(tmp_path), "r")
    empty = pa.table({"x": pa.array([], pa.int64())})
    store.write("build_pairs", empty, [], {"fingerprint": "f", "config": {"prompt": {"history_length": 0,
                                                                                    "top_k_general": 1}}})
    assert run_prompt_config(store) == PromptConfig(history_length=0, top_k_general=1)
    store.write("build_pairs", empty, [], {"fingerprint": "g", "config": {}})
    with pytest.raises(ConfigError, match="records no prompt config"):
        run_prompt_config(store)

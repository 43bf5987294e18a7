"""One run config, two ways in: `skillpipe sft fit / rl grpo / eval --config` and the DAG tasks
`sft_fit`, `grpo`, `eval_sft` train and evaluate with the same settings.

The DAG task functions are called directly (what `airflow dags test` runs in each task), with the
training itself replaced by a recorder: the full DAG run is tests/dags/test_dag.py (slow)."""
import dataclasses
import importlib.util
import json
import os
import shutil

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PromptConfig
from tests.helpers.paths import REPO

RUN_CONFIG = """\
prompt: {history_length: 1}
sft: {max_steps: 4, learning_rate: 1.0e-4, lora_r: 4, seed: 3}
grpo: {max_steps: 1, num_generations: 3, learning_rate: 2.0e-5, games: [coin]}
eval: {episodes: 2, games: [coin], max_new_tokens: 40}
"""
BANK = {"general_skills": [], "task_specific_skills": {}, "common_mistakes": [], "metadata": {"env": "textworld"}}


@pytest.fixture(scope="module")
def dag_module(tmp_path_factory):
    """``dags/skillpipe_dag.py`` imported as the dag-processor does (Airflow home in a temp folder)."""
    os.environ.setdefault("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow")))
    spec = importlib.util.spec_from_file_location("skillpipe_dag_under_test", os.path.join(REPO, "dags",
                                                                                            "skillpipe_dag.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run with export and build_pairs artifacts, its config file, and recorders in place of SFT
    and GRPO training (each returns what the real step records of its config)."""
    store = ArtifactStore(str(tmp_path), "r")
    rows = pa.table({"pair_id": ["p1", "p2"]})
    store.write("build_pairs", rows, [], {"fingerprint": "bp", "config": {"prompt": PromptConfig(history_length=1)
                                                                          .__dict__}})
    store.write("export", rows, [], {"fingerprint": "ex", "inputs": [
        {"stage": "build_pairs", "content_sha256": store.require("build_pairs").content_sha256}]},
        {"skill_bank.json": json.dumps(BANK)})
    (tmp_path / "run.yaml").write_text(RUN_CONFIG)
    trained = []

    def fit(pairs, out, cfg):
        os.makedirs(out, exist_ok=True)
        trained.append(cfg)
        return {"export": {"rows": {"used": 2}, "fingerprint": "ex"}, "global_step": cfg.max_steps, "final_loss": 1.0, "losses": [1.0],
                "config": dataclasses.asdict(cfg)}

    def grpo_train(cfg):
        os.makedirs(cfg.output_dir, exist_ok=True)
        trained.append(cfg)
        log = os.path.join(cfg.output_dir, "grpo_log.jsonl")
        with open(log, "w") as f:
            f.write(json.dumps({"kind": "train", "step": 1, "groups": [{"rewards": [0.0] * cfg.num_generations}]}))
        return {"steps": cfg.max_steps, "bank_version": "b", "bank_file": "", "log": log, "checkpoint": ""}
    monkeypatch.setattr("sft.train.fit", fit)
    monkeypatch.setattr("sft.rl.grpo.train", grpo_train)
    monkeypatch.setattr("sft.rl.step.register_banks", lambda *a: None)
    return store, str(tmp_path / "run.yaml"), trained


def _params(store, config: str) -> dict:
    return {"root": os.path.dirname(os.path.dirname(store.run_dir)), "run_id": "r", "input_path": "", "env": "auto",
            "config": config, "llm_mode": "", "train": True, "sft_max_steps": None, "grpo_max_steps": None,
            "eval_episodes": None, "eval_games": ""}


def _manifest(store, step: str, name: str) -> dict:
    with open(os.path.join(store.run_dir, step, name), encoding="utf-8") as f:
        return json.load(f)


def _cli(app, *args):
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res


def test_cli_and_dag_tasks_record_the_same_sft_and_grpo_config(dag_module, run):
    from sft.cli import app as sft_app
    from sft.rl.cli import app as rl_app
    store, config, trained = run
    root = _params(store, config)["root"]
    _cli(sft_app, "fit", "--run-id", "r", "--root", root, "--config", config)
    _cli(rl_app, "grpo", "--run-id", "r", "--root", root, "--config", config)
    cli = {s: _manifest(store, s, n) for s, n in (("sft_fit", "skillpipe_sft_manifest.json"),
                                                   ("grpo", "grpo_manifest.json"))}
    shutil.rmtree(os.path.join(store.run_dir, "sft_fit"))
    shutil.rmtree(os.path.join(store.run_dir, "grpo"))
    dag_module.sft_fit.function({}, params=_params(store, config))
    dag_module.grpo.function({}, params=_params(store, config))
    dag = {s: _manifest(store, s, n) for s, n in (("sft_fit", "skillpipe_sft_manifest.json"),
                                                   ("grpo", "grpo_manifest.json"))}
    assert cli["sft_fit"]["config"] == dag["sft_fit"]["config"]
    assert (dag["sft_fit"]["config"]["max_steps"], dag["sft_fit"]["config"]["lora_r"]) == (4, 4)
    for step in ("sft_fit", "grpo"):
        assert cli[step]["fingerprint_facts"]["config"] == dag[step]["fingerprint_facts"]["config"]
        assert cli[step]["fingerprint"] == dag[step]["fingerprint"]
    grpo_cfg = dag["grpo"]["fingerprint_facts"]["config"]
    assert (grpo_cfg["num_generations"], grpo_cfg["learning_rate"], grpo_cfg["games"]) == (3, 2e-5, ["coin"])
    assert grpo_cfg["tasks_per_step"] == 1  # a key the file does not set: the CPU budget
    assert [dataclasses.asdict(c) for c in trained[:2]] == [dataclasses.asdict(c) for c in trained[2:]]


def test_dag_params_override_the_config_only_when_set(dag_module, run):
    store, config, trained = run
    dag_module.sft_fit.function({}, params={**_params(store, config), "sft_max_steps": 6})
    assert trained[-1].max_steps == 6 and trained[-1].lora_r == 4
    dag_module.sft_fit.function({}, params=_params(store, ""))  # no config file: the CPU budget
    assert (trained[-1].max_steps, trained[-1].lora_r) == (3, 8)


def test_cli_and_dag_evaluate_with_the_same_eval_section(dag_module, run, monkeypatch):
    from sft.eval import eval_cmd
    import typer
    store, config, _ = run
    seen = []

    def eval_for_run(root, run_id, which, cfg, **kw):
        seen.append(cfg)
        raise FileNotFoundError("recorded")
    monkeypatch.setattr("sft.eval.eval_for_run", eval_for_run)
    app = typer.Typer()
    app.command()(eval_cmd)
    root = _params(store, config)["root"]
    res = CliRunner().invoke(app, ["--policy", "sft_fit", "--run-id", "r", "--root", root, "--config", config])
    assert res.exit_code == 1 and "recorded" in res.output
    with pytest.raises(FileNotFoundError, match="recorded"):
        dag_module.eval_task("sft_fit", "eval_sft").function({}, params=_params(store, config))
    assert seen[0] == seen[1]
    assert (seen[1].episodes, seen[1].games, seen[1].max_new_tokens, seen[1].max_steps) == (2, ["coin"], 40, 5)

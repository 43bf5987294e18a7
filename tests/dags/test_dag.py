"""End-to-end: the real Airflow DAG (`airflow dags test skillpipe`) on a tiny real sample.

Starts a real Airflow metadata DB (SQLite in a temp AIRFLOW_HOME) and the real embedded LLM.
"""
import glob
import json
import os
import subprocess
import sys

import pytest
import yaml

from pipeline.core.artifacts import ArtifactStore
from pipeline.bank.store import BankStore
from pipeline.quality import QUALITY_RULES
from pipeline.inspect import lineage_report
from pipeline.engine.runner import STAGES
from tests.helpers.paths import REPO

ROOT = REPO
BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def tiny_sample(tmp_path_factory):
    """Two real ReAct ALFWorld demonstrations (one clean, one heat task) from the shipped sample."""
    src = sorted(glob.glob(os.path.join(ROOT, "data", "samples", "react-alfworld", "*.json")))[0]
    with open(src, encoding="utf-8") as f:
        data = json.load(f)
    keep = {k: data[k] for k in sorted(data)[:2]}
    d = tmp_path_factory.mktemp("tiny")
    with open(d / "react_two.json", "w", encoding="utf-8") as f:
        json.dump(keep, f)
    return str(d), keep


def _xcoms(db, task_ids) -> dict:
    """The return values (XCom ``return_value``) of ``task_ids`` in the Airflow metadata DB."""
    import sqlite3
    with sqlite3.connect(str(db)) as con:
        rows = con.execute(f"SELECT task_id, value FROM xcom WHERE dag_id = 'skillpipe' AND key = 'return_value' "
                           f"AND task_id IN ({','.join('?' * len(task_ids))})", task_ids).fetchall()
    return {t: json.loads(v) if isinstance(v, (str, bytes)) else v for t, v in rows}


def test_map_stages_are_mapped_tasks_and_reduces_single(tmp_path):
    """The DAG as the dag-processor parses it (in a subprocess with its own AIRFLOW_HOME): one
    mapped task per map stage expanding over ``plan``, its ``<stage>_all`` collect step after it,
    the reduces as single tasks, in pipeline order."""
    # parsed three times in one process: the default, then $SKILLPIPE_RETRY_DELAY_S=7 and =-1
    code = ("import json, os; from airflow.dag_processing.dagbag import DagBag; d = DagBag(%r).dags['skillpipe']; "
            "os.environ['SKILLPIPE_RETRY_DELAY_S'] = '7'; d7 = DagBag(%r).dags['skillpipe']; "
            "os.environ['SKILLPIPE_RETRY_DELAY_S'] = '-1'; bad = DagBag(%r).import_errors; "
            "print(json.dumps({'delay7': {t.task_id: t.retry_delay.total_seconds() for t in d7.tasks},"
            " 'bad': list(bad.values())}))\n"
            "print(json.dumps({t.task_id: [type(t).__name__, sorted(t.upstream_task_ids), t.retries,"
            " t.retry_delay.total_seconds(), t.execution_timeout and t.execution_timeout.total_seconds()]"
            " for t in d.tasks}))"
            % ((os.path.join(ROOT, "dags"),) * 3))
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False", PYTHONPATH=ROOT,
               SKILLPIPE_RETRY_DELAY_S="")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    overridden, tasks = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    mapped = [t for t, (kind, *_) in tasks.items() if "Mapped" in kind]
    assert mapped == ["parse", "remove_loops", "verify", "memory", "distill", "build_pairs", "usefulness"]
    for name in mapped:
        assert "plan" in tasks[name][1] and tasks[f"{name}_all"][1] == sorted([name, "start_llm"])
    assert tasks["remove_loops"][1] == ["parse_all", "plan", "start_llm"]  # after the cross-shard pass
    assert tasks["verify"][1] == ["plan", "remove_loops_all", "start_llm"]
    assert tasks["split"][1] == ["start_llm", "verify_all"] and tasks["skills"][1] == ["memory_all", "start_llm"]
    assert tasks["usefulness"][1] == ["build_pairs_all", "plan", "start_llm"]
    assert tasks["export"][1] == ["start_llm", "usefulness_all"] and "Mapped" not in tasks["export"][0]
    # stage and collect tasks retry after the object-storage lease of a killed worker has expired
    # (120 s), and none runs without a deadline (48 h by default)
    for name in [*mapped, *(f"{m}_all" for m in mapped), "split", "skills", "export"]:
        assert tasks[name][2:] == [2, 150.0, 172800.0], name
        assert overridden["delay7"][name] == 7.0, name  # the test-sized delay of the distributed kill test
    assert overridden["delay7"]["sft_fit"] == tasks["sft_fit"][3]  # tasks without retries keep Airflow's default
    assert len(overridden["bad"]) == 1 and "SKILLPIPE_RETRY_DELAY_S must be a number of seconds >= 0" \
        in overridden["bad"][0] and "'-1'" in overridden["bad"][0]


def test_xcom_stays_small_for_1000_shards(tmp_path):
    """The plan task's XCom (the shard ids) and the references of 1,000 mapped tasks, as JSON."""
    from pipeline.engine.runner import plan_task, run_task
    inp = tmp_path / "in"
    for i in range(1000):  # 1,000 folders: a plan can have up to one shard per folder
        os.makedirs(inp / f"env{i:04d}")
        (inp / f"env{i:04d}" / "test1.txt").write_text("x" * (1 + i % 7))
    args = dict(root=str(tmp_path), run_id="manual__2026-12-02T04-00-00-00-00", input_path=str(inp),
                log=lambda m: None)
    ids = plan_task(shards=1000, **args)
    assert len(ids) == 1000 and ids[-1] == "shard-00999"
    ref = run_task("parse", shard=ids[-1], **args)  # a real mapped task's reference
    assert set(ref) == {"uri", "rows", "fingerprint"}
    plan_bytes, ref_bytes = len(json.dumps(ids)), len(json.dumps(ref))
    print(f"XCom: plan {plan_bytes} B, one reference {ref_bytes} B, 1,000 references {1000 * ref_bytes} B")
    assert plan_bytes < 20_000 and 1000 * ref_bytes < 300_000


@pytest.mark.slow
def test_airflow_dags_test_runs_every_stage(tmp_path, tiny_sample):
    input_dir, records = tiny_sample
    home = tmp_path / "airflow"
    env = dict(os.environ,
               AIRFLOW_HOME=str(home),
               AIRFLOW__CORE__DAGS_FOLDER=os.path.join(ROOT, "dags"),
               AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__CORE__PARALLELISM="2",
               AIRFLOW__CORE__UNIT_TEST_MODE="False",
               PYTHONPATH=ROOT,
               HF_HUB_OFFLINE="1")
    airflow = os.path.join(BIN, "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    # This tests the wiring. The content rules (tests/test_quality_*) quarantine nearly all of the
    # 135M model's memories and thinks, which would leave no pairs to train on: here they only count.
    config = tmp_path / "plumbing.yaml"
    config.write_text(yaml.safe_dump({"quality": {"flag_rules": list(QUALITY_RULES)},
                                      "build_pairs": {"short_think": "flag"}}))
    # small training budgets: SFT/GRPO are tested in depth in test_sft_* / test_grpo_*
    conf = {"input_path": input_dir, "root": str(tmp_path), "run_id": "dagtest", "sft_max_steps": 2, "grpo_max_steps": 1,
            "eval_episodes": 2, "config": str(config)}
    proc = subprocess.run([airflow, "dags", "test", "skillpipe", "-c", json.dumps(conf)], env=env,
                          capture_output=True, text=True, timeout=1800, cwd=ROOT)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]

    store = ArtifactStore(str(tmp_path), "dagtest")
    for stage in STAGES:
        art = store.load(stage)
        assert art is not None, f"stage {stage} wrote no artifact\n{log[-3000:]}"
        c = art.manifest["counts"]
        assert c["units_in"] == c["units_out"] + c["quarantined"], (stage, c)
    parse = store.load("parse").manifest["counts"]
    assert parse["in"] == len(records) and parse["out"] + parse["quarantined"] == len(records)
    # the setup task started the embedded server; the teardown task stopped it (state file gone)
    state = os.path.join(str(tmp_path), "runs", "dagtest", "_llm_server")
    assert os.path.isdir(state) and not os.path.exists(os.path.join(state, "llm_server.json"))
    # sft_fit trained on exactly this export artifact
    with open(os.path.join(str(tmp_path), "runs", "dagtest", "sft_fit", "skillpipe_sft_manifest.json")) as f:
        sft = json.load(f)
    assert sft["export"]["fingerprint"] == store.load("export").fingerprint
    assert sft["global_step"] == 2
    # grpo ran from that checkpoint and names the bank version it ended with
    with open(os.path.join(str(tmp_path), "runs", "dagtest", "grpo", "grpo_manifest.json")) as f:
        grpo = json.load(f)
    assert grpo["steps"] == 1 and grpo["bank_version"].startswith("bank-")
    assert BankStore(str(tmp_path)).has(grpo["bank_version"])  # `skillpipe bank show` finds it
    # the report task (a teardown after the last step) wrote the run report, GRPO's bank in its history
    with open(os.path.join(str(tmp_path), "runs", "dagtest", "report.html"), encoding="utf-8") as f:
        html = f.read()
    assert '<h2 id="training">Training</h2>' in html and grpo["bank_version"] in html
    # every run ends with held-out eval numbers of both checkpoints; XCom carries only a small dict
    xcoms = _xcoms(home / "airflow.db", ("eval_sft", "eval_grpo"))
    for task_id, which in (("eval_sft", "sft_fit"), ("eval_grpo", "grpo")):
        x = xcoms[task_id]
        print(f"XCom {task_id}: {x}")
        assert set(x) == {"uri", "rows", "fingerprint", "success_rate", "success_ci95"}
        art = store.load(f"eval_{which}")
        assert x["uri"] == art.path and x["fingerprint"] == art.fingerprint and x["rows"] == 2
        summary = art.manifest["summary"]
        assert summary["success_ci95"] == x["success_ci95"] and summary["config"]["fold"] == "test"
        assert {r["instance"] for r in art.read_rows()} == {"twc-test-0", "twc-test-1"}
    assert "hf:" in store.load("eval_grpo").manifest["summary"]["policy"]

    # lineage: one exported SFT pair back to its source file and line, memory and skills
    pair = store.load("export").read_rows()[0]
    report = lineage_report(store.stage_dir("export"), pair["pair_id"])
    traj = next(t for t in store.load("verify").read_rows() if t["trajectory_id"] == pair["trajectory_id"])
    assert f"source        {os.path.join(input_dir, traj['source_uri'])}" in report
    assert f"first line {traj['source_line']}" in report and pair["step_id"] in report
    assert all(m in report for m in pair["memory_ids"]) and pair["memory_ids"]
    assert all(s in report for s in pair["skill_ids_used"])


@pytest.mark.slow
def test_dag_runs_the_map_stages_per_shard(tmp_path):
    """`airflow dags test` with ``shards=3`` on the shipped sample (the schema stub as LLM, no
    training): every mapped shard task succeeds, each returns a small reference to its shard
    folder, and the export equals a one-shard CLI run's."""
    from bench.reliability_stub import SchemaStub
    from pipeline.engine.runner import run_pipeline
    from pipeline.core.config import load_config
    home = tmp_path / "airflow"
    env = dict(os.environ, AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=os.path.join(ROOT, "dags"),
               AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__CORE__UNIT_TEST_MODE="False", PYTHONPATH=ROOT)
    airflow = os.path.join(BIN, "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    samples = os.path.join(ROOT, "data", "samples")
    with SchemaStub() as stub:
        config = tmp_path / "stub.yaml"
        config.write_text(yaml.safe_dump({"llm": {"base_url": stub.base_url, "model": "stub-model",
                                                  "structured_output": "json_schema"},
                                          "quality": {"off_topic_threshold": -1, "flag_rules": list(QUALITY_RULES)}}))
        conf = {"input_path": samples, "root": str(tmp_path), "run_id": "sharded", "config": str(config),
                "llm_base_url": stub.base_url, "llm_model": "stub-model", "shards": 3, "train": False}
        proc = subprocess.run([airflow, "dags", "test", "skillpipe", "-c", json.dumps(conf)], env=env,
                              capture_output=True, text=True, timeout=1200, cwd=ROOT)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        run_pipeline(str(tmp_path), "cli", samples, load_config(str(config)), shards=1, log=lambda m: None)
    store = ArtifactStore(str(tmp_path), "sharded")
    assert [s["id"] for s in store.require("memory").manifest["shards"]] == ["shard-00000", "shard-00001", "shard-00002"]
    assert store.require("export").read_rows() == ArtifactStore(str(tmp_path), "cli").require("export").read_rows()
    import sqlite3
    with sqlite3.connect(str(home / "airflow.db")) as con:
        refs = con.execute("SELECT map_index, value FROM xcom WHERE task_id = 'memory' AND key = 'return_value' "
                           "ORDER BY map_index").fetchall()
    assert [i for i, _ in refs] == [0, 1, 2]
    for i, v in refs:
        ref = json.loads(v) if isinstance(v, (str, bytes)) else v
        assert set(ref) == {"uri", "rows", "fingerprint"} and ref["uri"].endswith(f"memory/shard-0000{i}")

"""Parse and dedupe stages through the runner: counts reconcile, selection, rerun skipped."""
import os
import shutil

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.records import Step, Trajectory
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext
from pipeline.stages import parse
from pipeline.selection import select
from tests.helpers.paths import FIXTURES


def test_parse_and_remove_loops_stages_on_sample(tmp_path, sample_input):
    inp = sample_input
    shutil.copy(os.path.join(FIXTURES, "formats", "corrupt", "empty.txt"), inp / "empty.txt")
    ctx = StageContext(store=ArtifactStore(str(tmp_path / "store"), "r1"), config=PipelineConfig(), input_path=str(inp))
    logs = []
    res = run_stage("parse", ctx, log=logs.append)
    m = res.manifest
    assert m["counts"]["in"] == 20 and res.rows == 19  # 19 trajectories + 1 unreadable file
    assert m["counts"]["quarantine_reasons"] == {"empty_file": 1}
    assert m["counters"]["read_by_source_format"] == {"chat_json": 4, "react_alfworld_json": 3,
                                                      "react_webshop_log": 4, "reflexion_txt": 4, "skillrl_txt": 4}
    assert m["counters"]["kept_by_env_category_outcome"]["alfworld/cool/failure"] == 1  # env000 is mixed: kept
    assert m["counters"]["kept_by_env_category_outcome"]["webshop/other/success"] == 1
    again = run_stage("parse", ctx, log=logs.append)
    assert again.skipped and "skipped" in logs[-1]
    d = run_stage("remove_loops", ctx, log=logs.append)
    assert d.rows == 19 and d.manifest["counters"] == {"trajectories_shortened": 3, "steps_removed": 13}
    # a tighter cap changes the fingerprint and quarantines instead of dropping
    ctx.config.parse.max_per_instance = 1
    res2 = run_stage("parse", ctx, log=logs.append)
    assert not res2.skipped and res2.rows == 18  # env001 keeps 1 of its 2 successes
    assert res2.manifest["counts"]["quarantine_reasons"] == {"empty_file": 1, "not_selected": 1}
    # the first run took the input digest from the workers (one read of each file); the rerun
    # hashed the files up front and got the same fingerprint, hence the skip above
    assert "input_fingerprint" not in m["counters"] and again.fingerprint == m["fingerprint"]
    assert m["inputs"][0]["files"] == 10 and len(m["inputs"][0]["listed"]) == 10  # 9 sample files + empty.txt


def _t(inst, outcome, n_actions, file, idx=0):
    steps = [Step(i, None if i == 0 else "a", "o") for i in range(n_actions + 1)]
    return Trajectory(f"traj-{inst}-{file}-{idx}", "alfworld", inst, "t", "c", outcome, 0.0, steps, f"/x/{inst}/{file}", "f", idx)


def test_select_tv2_ours():
    cfg = PipelineConfig().parse
    trajs = [_t("env000", "success", 5, "t1"), _t("env000", "success", 3, "t2"), _t("env000", "success", 4, "t3"),
             _t("env000", "success", 3, "t0"),
             _t("env001", "success", 4, "t1"), *[_t("env001", "failure", 2, f"t{i}") for i in (4, 3, 2, 5)],
             _t("env002", "success", 2, "a"), _t("env002", "success", 2, "b"), _t("env002", "failure", 2, "c")]
    kept, dropped = select(trajs, cfg)
    ids = {t.trajectory_id for t in kept}
    # env000: 3 shortest, the length tie (3) broken by file name: t0, t2, then t3 (4); t1 (5) dropped
    assert "traj-env000-t1-0" in dropped and {"traj-env000-t0-0", "traj-env000-t2-0", "traj-env000-t3-0"} <= ids
    # env001 (s=1, f=4) is mixed: its success is kept, failures = first 3 by file name
    assert "traj-env001-t1-0" in ids and "traj-env001-t5-0" in dropped
    assert {"traj-env002-a-0", "traj-env002-b-0", "traj-env002-c-0"} <= ids  # both outcomes kept (D-P5)
    assert len(kept) + len(dropped) == len(trajs)


@pytest.mark.parametrize("field,value,n_kept", [("max_success_instances", 1, 5), ("max_trajectories", 2, 2)])
def test_select_caps(field, value, n_kept):
    cfg = PipelineConfig().parse
    setattr(cfg, field, value)
    trajs = [_t("a", "success", 1, "x"), _t("a", "failure", 1, "y"), _t("b", "success", 1, "x"),
             _t("c", "failure", 1, "x"), _t("c", "failure", 1, "z"), _t("d", "failure", 1, "x")]
    kept, dropped = select(trajs, cfg)
    assert len(kept) == n_kept and all(value and field in why for why in dropped.values())


def _parse_rows(tmp_path, name, inp, **cfg):
    ctx = StageContext(store=ArtifactStore(str(tmp_path / name), "r1"), config=PipelineConfig(), input_path=str(inp))
    for k, v in cfg.items():
        setattr(ctx.config.parse, k, v)
    res = run_stage("parse", ctx, log=lambda s: None)
    art = ctx.store.require("parse")
    return art.read_rows(), art.read_rows(quarantine=True), res.manifest


def test_worker_pool_gives_identical_artifacts(tmp_path, monkeypatch):
    """Streaming through the process pool (ordered, bounded) equals the in-process run, with
    instance caps counted in path order across groups."""
    inp = tmp_path / "in"
    for name in ("env000", "env001"):
        shutil.copytree(f"data/samples/skillrl-rollouts/{name}", inp / name)
    shutil.copytree("tests/fixtures/formats/env005", inp / "env005")
    seq_rows, seq_q, seq_m = _parse_rows(tmp_path, "seq", inp, max_success_instances=2)
    monkeypatch.setattr(parse, "MIN_FILES_FOR_POOL", 1)
    monkeypatch.setattr(parse, "WORKERS", 2)
    monkeypatch.setattr(parse, "BATCH_ROWS", 1)
    par_rows, par_q, par_m = _parse_rows(tmp_path, "par", inp, max_success_instances=2)
    assert par_rows == seq_rows and par_q == seq_q and par_m["counts"] == seq_m["counts"]
    assert par_m["inputs"] == seq_m["inputs"] and par_m["fingerprint"] == seq_m["fingerprint"]
    assert [r["env_instance"] for r in par_rows] == ["env000", "env000", "env001", "env001"]
    assert [q["detail"] for q in par_q] == ["max_success_instances=2 instances of env 'alfworld' reached"]


def test_per_env_caps(tmp_path):
    rows, q, m = _parse_rows(tmp_path, "caps", "data/samples/skillrl-rollouts",
                             per_env={"alfworld": {"max_per_instance": 1}})
    # env000 (mixed) keeps its success and its failure; env001 the shorter of its two successes
    assert [(r["env_instance"], r["outcome"], len(r["steps"])) for r in rows] == [
        ("env000", "success", 7), ("env000", "failure", 15), ("env001", "success", 9)]
    assert [x["reason"] for x in q] == ["not_selected"] and m["counts"]["quarantine_reasons"] == {"not_selected": 1}
    assert q[0]["detail"] == "success #2 of instance 'env001': max_per_instance=1"
    assert m["counts"]["in"] == 4 and m["counts"]["units_in"] == m["counts"]["out"] + m["counts"]["quarantined"]


def test_corrupt_inputs_through_the_stage(tmp_path):
    inp = tmp_path / "in"
    shutil.copytree("tests/fixtures/formats/corrupt", inp)
    shutil.copy("data/samples/react-webshop/webshop_react_episodes_sample.txt", inp / "good.txt")
    rows, q, m = _parse_rows(tmp_path, "bad", inp)
    assert len(rows) == 5  # 4 WebShop episodes + the truncated chat file's first record
    assert sorted((x["source_uri"], x["reason"], x["line"]) for x in q) == [
        ("bad_header.txt", "bad_step_header", 5), ("binary.dat", "binary_file", 1), ("empty.txt", "empty_file", 1),
        ("headerless.txt", "unrecognised_format", 1), ("not_utf8.txt", "not_utf8", 2),
        ("truncated_chat.json", "invalid_json", 14), ("wrong_format.txt", "unrecognised_format", 1)]
    assert m["counts"]["in"] == 12 and m["counts"]["out"] == 5 and m["counts"]["quarantined"] == 7


def test_a_folder_that_cannot_be_listed_is_one_quarantine_row(tmp_path, monkeypatch):
    """A folder below the input that cannot be listed (no permission: simulated, since tests may
    run as root, who lists everything) was skipped without a word, its files neither read nor
    counted. It is now one unit in, quarantined as ``unreadable_file`` with the reason."""
    from pipeline.formats import discover
    inp = tmp_path / "in"
    shutil.copytree("data/samples/skillrl-rollouts/env000", inp / "env000")
    (inp / "closed").mkdir()
    (inp / "closed" / "test9.txt").write_text("never read")
    real_scandir = discover.os.scandir

    def scandir(path="."):
        if os.path.basename(os.fspath(path)) == "closed":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(discover.os, "scandir", scandir)
    ctx = StageContext(store=ArtifactStore(str(tmp_path / "root"), "r1"), config=PipelineConfig(), input_path=str(inp))
    res = run_stage("parse", ctx, log=lambda s: None)
    c = res.manifest["counts"]
    assert (c["in"], c["out"], c["quarantine_reasons"]) == (3, 2, {"unreadable_file": 1})
    (row,) = ctx.store.require("parse").read_rows(quarantine=True)
    assert row["source_uri"] == "closed"
    assert row["detail"].startswith("folder cannot be listed, so none of its files was read: PermissionError")


def test_unreadable_input_is_quarantined_and_fingerprints_stably(tmp_path):
    """A file that cannot be read (here a link to /proc/self/mem: open works, read fails with
    EIO) is quarantined, and the next run's up-front input fingerprint neither crashes nor
    differs from the one parse reported, so the stage is skipped."""
    inp = tmp_path / "in"
    shutil.copytree("data/samples/skillrl-rollouts/env000", inp / "env000")
    os.symlink("/proc/self/mem", inp / "mem.txt")
    ctx = StageContext(store=ArtifactStore(str(tmp_path / "root"), "r1"), config=PipelineConfig(), input_path=str(inp))
    first = run_stage("parse", ctx, log=lambda s: None)
    c = first.manifest["counts"]
    assert (c["in"], c["out"], c["quarantine_reasons"]) == (3, 2, {"unreadable_file": 1})
    second = run_stage("parse", ctx, log=lambda s: None)
    assert second.skipped and second.fingerprint == first.fingerprint


def test_exact_duplicates_are_quarantined_within_and_across_folders(tmp_path):
    """A copied file in the same folder and a copied folder: each copy is quarantined as
    ``duplicate_trajectory`` naming the kept original (first in path order); caps ignore copies."""
    inp = tmp_path / "in"
    shutil.copytree("data/samples/skillrl-rollouts/env000", inp / "env000")
    shutil.copy(inp / "env000" / "test1.txt", inp / "env000" / "test9.txt")  # same folder
    shutil.copytree("data/samples/skillrl-rollouts/env001", inp / "env001")
    shutil.copytree(inp / "env001", inp / "env002")  # another folder, same content
    rows, q, m = _parse_rows(tmp_path, "dup", inp)
    by_uri = {r["source_uri"]: r["trajectory_id"] for r in rows}
    assert sorted(by_uri) == ["env000/test1.txt", "env000/test2.txt", "env001/test1.txt", "env001/test2.txt"]
    assert sorted((x["source_uri"], x["reason"], x["detail"]) for x in q) == [
        ("env000/test9.txt", "duplicate_trajectory", f"same content as {by_uri['env000/test1.txt']}, which is kept"),
        ("env002/test1.txt", "duplicate_trajectory", f"same content as {by_uri['env001/test1.txt']}, which is kept"),
        ("env002/test2.txt", "duplicate_trajectory", f"same content as {by_uri['env001/test2.txt']}, which is kept")]
    assert (m["counts"]["in"], m["counts"]["out"], m["counts"]["quarantined"]) == (7, 4, 3)
    assert m["counters"]["kept_instances"] == 2


def test_worker_tasks_shrink_towards_the_end_and_keep_groups_whole():
    groups = [[f"env{g:04d}/test{k}.txt" for k in range(4 if g % 7 else 9)] for g in range(3000)]
    total = sum(map(len, groups))
    tasks = list(parse._chunks(iter(groups), total, 2))
    assert [g for t in tasks for g in t] == groups  # every group once, in order, never split
    sizes = [sum(map(len, t)) for t in tasks]
    # a task closes at the first whole group that reaches its size (groups here hold 4 or 9 files)
    assert parse.CHUNK_FILES <= sizes[0] < parse.CHUNK_FILES + 9 and max(sizes) < parse.CHUNK_FILES + 9
    assert all(a + 9 > b for a, b in zip(sizes, sizes[1:]))  # none bigger than an earlier one
    assert sizes[len(sizes) // 2] < 500 and max(sizes[-3:]) < parse.MIN_TASK_FILES + 9 and len(tasks) < 40
    one = [sum(map(len, t)) for t in parse._chunks(iter(groups), total, 1)]  # one worker: equal tasks
    assert all(parse.CHUNK_FILES <= s < parse.CHUNK_FILES + 9 for s in one[:-1])


def test_parse_imports_no_llm_module(tmp_path, sample_input):
    """A stage that sends no LLM request writes its manifest without loading the LLM client
    modules (llama-server management, weights checks: ~20 ms of a parse run)."""
    import subprocess
    import sys
    code = ("import sys\nfrom pipeline.core.artifacts import ArtifactStore\nfrom pipeline.core.config import "
            "PipelineConfig\nfrom pipeline.engine.runner import run_stage\nfrom pipeline.stage.stage import StageContext\n"
            f"ctx = StageContext(ArtifactStore({str(tmp_path / 's')!r}, 'r'), PipelineConfig(), input_path={str(sample_input)!r})\n"
            "run_stage('parse', ctx, log=lambda s: None)\n"
            "print(sorted(m for m in sys.modules if m.startswith('pipeline.llm.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "['pipeline.llm.accounting']"

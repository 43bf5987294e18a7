"""Shard plans and sharded runs of the map stages (pipeline/engine/shards.py, the runner's shard path)."""
import os
import shutil

import pyarrow.dataset as ds
import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.engine.runlock import RunLocked, run_lock, task_lock
from pipeline.engine.runner import plan_task, run_pipeline, run_task
from pipeline.engine.shards import make_plan, partition
from pipeline.formats.discover import file_groups, list_input_files
from tests.helpers.paths import REPO

SAMPLES = os.path.join(REPO, "data", "samples")
STAGES = ["parse", "remove_loops", "verify", "split"]


def quiet(msg: str) -> None:
    pass


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """The shipped sample plus, in a last folder, a copy of its first file: with 3 shards the
    copy's trajectories are exact duplicates of rows in shard 0, found only across shards."""
    d = tmp_path_factory.mktemp("shards") / "in"
    shutil.copytree(SAMPLES, d)
    os.makedirs(d / "zz-copy")
    shutil.copy(os.path.join(SAMPLES, "eto-alfworld", "alfworld_sft_sample.json"), d / "zz-copy")
    return str(d)


def capped() -> PipelineConfig:
    cfg = PipelineConfig()
    cfg.parse.max_success_instances = 4  # per env: reached in shard 0, so it drops rows of later shards
    return cfg


@pytest.fixture(scope="module")
def runs(tree, tmp_path_factory):
    """The same input and config run with 1 shard and with 3 shards: the two stores."""
    root = str(tmp_path_factory.mktemp("root"))
    for n in (1, 3):
        run_pipeline(root, f"r{n}", tree, capped(), stages=STAGES, shards=n, log=quiet)
    return ArtifactStore(root, "r1"), ArtifactStore(root, "r3")


def test_partition_is_contiguous_and_minimises_the_largest_shard():
    assert partition([5, 1, 1, 1, 5, 1, 1, 1], 2) == [0, 4]  # 8 + 8
    assert partition([1] * 6, 3) == [0, 2, 4]
    assert partition([9, 1, 1, 1], 2) == [0, 1]  # the big group alone
    assert partition([3, 3], 5) == [0, 1]  # never more shards than groups
    assert partition([7], 1) == [0]
    with pytest.raises(ValueError, match="at least 1"):
        partition([1, 2], 0)


def test_plan_keeps_each_folder_whole_and_in_path_order(tree):
    plan = make_plan(tree, 3)
    assert plan.ids == ["shard-00000", "shard-00001", "shard-00002"]
    files = [f for s in plan.shards for f in s["files"]]
    assert files == [os.path.relpath(p, tree) for p in list_input_files(tree)]  # path order, each file once
    for group in file_groups(list_input_files(tree)):
        owners = {s["id"] for s in plan.shards for f in s["files"] if os.path.join(tree, f) in group}
        assert len(owners) == 1, group  # a folder (env instance and its trajectories) stays in one shard
    sizes = [s["bytes"] for s in plan.shards]
    assert sum(sizes) == sum(os.path.getsize(p) for p in list_input_files(tree))
    groups = [sum(os.path.getsize(f) for f in g) for g in file_groups(list_input_files(tree))]
    best = min(max(sum(groups[:i]), sum(groups[i:j]), sum(groups[j:]))  # every contiguous 3-way cut
               for i in range(1, len(groups) - 1) for j in range(i + 1, len(groups)))
    assert max(sizes) == best  # measured 37,264 / 25,405 / 40,152 bytes (two copies of the 16 KB ETO file)
    assert make_plan(tree, 3).fingerprint == plan.fingerprint
    assert len(make_plan(SAMPLES).shards) == 1  # automatic: one per 256 MB
    assert len(make_plan(tree, 0, bytes_per_shard=40_000).shards) == 3


def test_three_shards_keep_exactly_the_rows_of_one(runs):
    one, three = runs
    rows1 = one.require("remove_loops").read_rows()
    rows3 = three.require("remove_loops").read_rows()
    assert len(rows1) == 12 and rows3 == rows1  # same rows, same order
    assert three.require("split").read_rows() == one.require("split").read_rows()

    def dropped(store):  # parse drops them unsharded; remove_loops quarantines them per shard
        return sorted((q["reason"], q["item_id"], q["detail"], q["raw"]) for s in ("parse", "remove_loops")
                      for q in store.require(s).read_rows(quarantine=True))
    assert dropped(three) == dropped(one)
    reasons = one.require("parse").manifest["counts"]["quarantine_reasons"]
    assert reasons == {"duplicate_trajectory": 4, "not_selected": 7}
    # the duplicates sit in the last shard and copy rows of the first: only the reduce sees them
    assert three.require("remove_loops", "shard-00002").manifest["counts"]["quarantine_reasons"] == {
        "duplicate_trajectory": 4, "not_selected": 2}


def test_one_shard_keeps_the_flat_layout(runs):
    one, three = runs
    assert sorted(os.listdir(one.stage_dir("parse"))) == ["_manifest.json", "_quarantine", "part-00000.parquet"]
    assert sorted(os.listdir(three.stage_dir("parse"))) == [
        "_manifest.json", "_selection", "shard-00000", "shard-00001", "shard-00002"]


def test_counts_reconcile_per_shard_and_in_total(runs):
    _, three = runs
    for stage in ("parse", "remove_loops", "verify"):
        total = three.require(stage).manifest
        shards = [three.require(stage, s["id"]).manifest["counts"] for s in total["shards"]]
        for c in shards + [total["counts"]]:
            assert c["units_in"] == c["units_out"] + c["quarantined"]
        assert total["counts"]["in"] == sum(c["in"] for c in shards)
        assert [s["counts"] for s in total["shards"]] == shards
    assert three.require("parse").manifest["counts"]["in"] == 23


def test_dataset_readers_see_the_rows_of_every_shard_and_no_quarantine(runs):
    _, three = runs
    folder = three.stage_dir("remove_loops")
    table = ds.dataset(folder, format="parquet").to_table()  # skips _quarantine, _manifest.json, _selection
    assert table.num_rows == three.require("remove_loops").read_table().num_rows == 12
    assert len(three.require("remove_loops").read_rows(quarantine=True)) == 11


def test_rerun_after_losing_one_shard_reruns_only_that_shard(tree, tmp_path):
    root = str(tmp_path)
    run_pipeline(root, "r", tree, capped(), stages=STAGES, shards=3, log=quiet)
    store = ArtifactStore(root, "r")
    before = store.require("remove_loops").manifest["content_sha256"]
    shutil.rmtree(store.stage_dir("remove_loops", "shard-00001"))
    log: list[str] = []
    results = run_pipeline(root, "r", tree, capped(), stages=STAGES, log=log.append)  # keeps the 3-shard plan
    ran = [m for m in log if "unchanged" not in m and "shard-" in m]
    assert ran == [m for m in ran if m.startswith("[remove_loops shard-00001]")] and len(ran) == 1
    assert store.require("remove_loops").manifest["content_sha256"] == before
    assert [r.skipped for r in results] == [True, False, True, True]  # verify and split read the same rows


def test_orchestrator_tasks_run_one_shard_each_then_collect(tree, tmp_path):
    args = dict(root=str(tmp_path), run_id="t", input_path=tree, log=quiet)
    ids = plan_task(shards=2, **args)
    assert ids == ["shard-00000", "shard-00001"]
    refs = [run_task("parse", shard=s, **args) for s in ids]
    assert set(refs[0]) == {"uri", "rows", "fingerprint"} and refs[0]["uri"].endswith("parse/shard-00000")
    total = run_task("parse", **args)  # the collect step (with the cross-shard pass)
    assert total["rows"] == sum(r["rows"] for r in refs)
    for stage in ("remove_loops", "verify"):
        for s in ids:
            run_task(stage, shard=s, **args)
    split = run_task("split", **args)  # a reduce: collects remove_loops and verify first
    (one,) = run_pipeline(str(tmp_path), "one", tree, PipelineConfig(),
                          stages=["parse", "remove_loops", "verify", "split"], log=quiet)[3:]
    assert split["rows"] == one.rows == 17
    # the same rows, byte for byte (fingerprints differ: they name the upstream's layout)
    split_t, split_one = (ArtifactStore(str(tmp_path), r).require("split") for r in ("t", "one"))
    assert split_t.content_sha256 == split_one.content_sha256


def test_task_locks_are_per_shard_and_exclude_a_whole_run(tmp_path):
    run_dir = str(tmp_path / "runs" / "r")
    with task_lock(run_dir, "memory.shard-00000", "r"), task_lock(run_dir, "memory.shard-00001", "r"):
        with pytest.raises(RunLocked, match="memory.shard-00000 of run r is in use"):
            with task_lock(run_dir, "memory.shard-00000", "r"):
                pass
        with pytest.raises(RunLocked, match="run r is in use by .*orchestrator run"):
            with run_lock(run_dir, "r"):
                pass
    with run_lock(run_dir, "r"):
        with pytest.raises(RunLocked, match="run r is in use by pid"):
            with task_lock(run_dir, "memory.shard-00000", "r"):
                pass


def test_every_stage_sharded_gives_the_export_of_one_shard(tree, tmp_path):
    """All eight stages with the schema stub as LLM (valid answers that depend only on the
    request): 3 shards export the same rows in the same order as 1, asking the same number of
    LLM calls, and every sharded stage's counts reconcile in total."""
    from bench.reliability_stub import SchemaStub
    from pipeline.quality import QUALITY_RULES
    with SchemaStub() as stub:
        cfg = PipelineConfig()
        cfg.llm.base_url, cfg.llm.model, cfg.llm.structured_output = stub.base_url, "stub-model", "json_schema"
        cfg.quality.off_topic_threshold, cfg.quality.flag_rules = -1, list(QUALITY_RULES)  # rules only count
        calls = []
        for n in (1, 3):
            run_pipeline(str(tmp_path), f"r{n}", tree, cfg, shards=n, log=quiet)
            calls.append(len(stub.requests) - sum(calls))
        # a lost memory shard is rebuilt alone, from the run's LLM cache: no request is sent again
        shutil.rmtree(ArtifactStore(str(tmp_path), "r3").stage_dir("memory", "shard-00001"))
        log: list[str] = []
        run_pipeline(str(tmp_path), "r3", tree, cfg, log=log.append)
        assert [m.split("]")[0] for m in log if "shard-" in m and "unchanged" not in m] == ["[memory shard-00001"]
        assert len(stub.requests) == sum(calls)
    one, three = (ArtifactStore(str(tmp_path), f"r{n}") for n in (1, 3))
    rows = one.require("export").read_rows()
    assert len(rows) == 46 and three.require("export").read_rows() == rows  # measured: 46 pairs
    assert calls[0] == calls[1] > 0
    for stage in ("memory", "distill", "build_pairs"):
        m = three.require(stage).manifest
        assert len(m["shards"]) == 3 and m["counts"] == one.require(stage).manifest["counts"]


def test_cli_shards_option_plans_and_a_later_run_keeps_the_plan(tree, tmp_path):
    from typer.testing import CliRunner
    from pipeline.cli import app
    base = ["run", "--root", str(tmp_path), "--run-id", "c", "--stages", "parse,remove_loops,verify"]
    res = CliRunner().invoke(app, base + ["--input", tree, "--shards", "2"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    store = ArtifactStore(str(tmp_path), "c")
    assert [s["id"] for s in store.require("remove_loops").manifest["shards"]] == ["shard-00000", "shard-00001"]
    res = CliRunner().invoke(app, ["run", "--root", str(tmp_path), "--run-id", "c", "--stages", "split",
                                   "--shards", "3"], catch_exceptions=False)
    assert res.exit_code == 1 and "planned into 2 shards" in res.output

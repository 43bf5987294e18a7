"""pipeline.core.split: the instance-level train/val rule, and the split stage that writes it as an
artifact read by skills and export."""
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.engine.runner import run_stage
from pipeline.core.split import read_assignment, split_instances, split_rows
from pipeline.stage.stage import StageContext


def test_split_instances_rules():
    assert split_instances(["only"], 0.5, 0) == {"only": "train"}
    assert set(split_instances(["a", "b", "c"], 0.0, 0).values()) == {"train"}
    names = [f"e{i}" for i in range(200)]
    got = split_instances(names, 0.1, 0)
    assert got == split_instances(reversed(names), 0.1, 0)      # order-independent
    assert 5 <= sum(v == "val" for v in got.values()) <= 40     # ~10% of 200
    assert split_instances(names, 0.1, 1) != got                 # the seed matters
    both = split_instances(["a", "b"], 0.999999, 0)
    assert sorted(both.values()) == ["train", "val"]            # never an empty train split


def test_split_instances_exact_draw():
    # sha256 scores at seed 0: env000 .736, env001 .373, env002 .130, env003 .312
    names = ["env000", "env001", "env002", "env003"]
    assert split_instances(names, 0.25, 0) == {"env000": "train", "env001": "train", "env002": "val",
                                               "env003": "train"}
    # 0.05: nobody draws val, so the smallest score (env002) is moved there to keep val non-empty
    assert split_instances(names, 0.05, 0) == split_instances(names, 0.25, 0)


def test_only_instances_with_a_success_are_drawn():
    """SFT pairs come from successes only: a failure-only instance in val would leave the
    validation split empty (seen in `make run`), so it is always train and never drawn."""
    rows = split_rows(["env003", "env000", "env001", "env002", "env000", "fail-only"],
                      {"env000", "env001", "env002", "env003"}, 0.25, 0)
    assert [(r["env_instance"], r["split"], r["rule"]) for r in rows] == [
        ("env000", "train", "hash"), ("env001", "train", "hash"), ("env002", "val", "hash"),
        ("env003", "train", "hash"), ("fail-only", "train", "no_success")]
    assert {(r["val_fraction"], r["seed"]) for r in rows} == {(0.25, 0)}
    # the failure-only instance does not take part in the draw: same sides as without it
    assert {r["env_instance"]: r["split"] for r in rows if r["rule"] == "hash"} == \
        split_instances(["env000", "env001", "env002", "env003"], 0.25, 0)


def test_split_stage_writes_one_row_per_instance(tmp_path):
    import dataclasses
    from tests.helpers.llm_stage_data import cool_apple, write_upstream
    from pipeline.core.records import TRAJECTORY_SCHEMA
    trajs = [dataclasses.replace(cool_apple(tid=f"traj-{i}"), env_instance=f"env{i % 4:03d}") for i in range(8)]
    trajs.append(dataclasses.replace(cool_apple("failure", "traj-f"), env_instance="fail-only"))
    store = ArtifactStore(str(tmp_path), "r")
    write_upstream(store, "verify", [t.to_row() for t in trajs], TRAJECTORY_SCHEMA)
    cfg = PipelineConfig()
    cfg.export.val_fraction = 0.25
    res = run_stage("split", StageContext(store, cfg), log=lambda m: None)
    assert read_assignment(store.require("split")) == {
        "env000": "train", "env001": "train", "env002": "val", "env003": "train", "fail-only": "train"}
    c = res.manifest["counts"]
    assert (c["in"], c["units_in"], c["out"], c["quarantined"]) == (9, 5, 5, 0)
    assert res.manifest["counters"] == {"train": 4, "val": 1, "drawn": 4}

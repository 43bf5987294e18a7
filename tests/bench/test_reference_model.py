"""bench/reference_model.py (the benchmark's cost model of the SkillRL parse + dedupe scripts):
its selection and dedupe on a generated 5-env tree, checked against our parse and remove_loops
where the two must agree (same files, steps, observations, lists, loops on this clean tree)."""
import importlib.util
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext
from tests.helpers.paths import FIXTURES, REPO

spec = importlib.util.spec_from_file_location("reference_model", os.path.join(REPO, "bench", "reference_model.py"))
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
TOOL = os.path.join(FIXTURES, "tools", "make_skillrl_rollouts.py")


def _actions(steps):
    """Actions as the reference writes them (the reset step's action is the string "None")."""
    return tuple("None" if s["action"] is None else s["action"] for s in steps)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """(tree, reference counts, reference dedupe counts, cleaned JSON, our parse rows, our remove_loops rows)."""
    base = tmp_path_factory.mktemp("refmodel")
    tree, work = str(base / "tree"), str(base / "work")
    os.mkdir(work)
    subprocess.run([sys.executable, TOOL, tree, "--envs", "5", "--seed", "0"], check=True)
    counts, dedupe = ref.run_parse(tree, work), ref.run_dedupe(work)
    with open(os.path.join(work, ref.CLEANED), encoding="utf-8") as f:
        cleaned = json.load(f)
    ctx = StageContext(ArtifactStore(str(base / "runs"), "r"), PipelineConfig(), input_path=tree)
    manifests = {s: run_stage(s, ctx, log=lambda m: None).manifest for s in ("parse", "remove_loops")}
    rows = {s: pq.read_table(ctx.store.stage_dir(s)).to_pylist() for s in manifests}
    return tree, counts, dedupe, cleaned, manifests, rows


def test_reference_selection_counts(both):
    _, counts, dedupe, cleaned, manifests, _ = both
    assert counts == {"files": 20, "envs": 5, "skipped_few_files": 0, "mixed": 2, "all_success": 2, "all_fail": 1,
                      "dropped": 0, "kept_envs": 3, "kept_trajectories": 9}
    assert counts["files"] == manifests["parse"]["counts"]["in"]  # both read every file once
    assert [(r["env_id"], r["type"]) for r in cleaned] == [("env002", "all_success"), ("env003", "all_success"),
                                                          ("env000", "all_fail")]
    assert dedupe == {"trajectories": 9, "trajectories_shortened": 3, "steps_removed": 15}


def test_reference_picks_are_ours_for_pure_envs(both):
    """All-success envs: the 3 shortest successes, the same as ours keeps for those instances (ours
    keeps mixed instances too), loop-free the same way. All-fail envs: 3 failures in file-system
    order (ours: by file name, D-P6), so only the count and their being failures of the env agree."""
    tree, _, _, cleaned, _, rows = both
    for rec in cleaned:
        ours = sorted(_actions(r["steps"]) for r in rows["remove_loops"] if r["env_instance"] == rec["env_id"])
        picks = sorted(_actions(t) for t in rec["trajectories"])
        if rec["type"] == "all_success":
            assert picks == ours, rec["env_id"]
            continue
        env_dir = os.path.join(tree, rec["env_id"])
        fails = [ref.parse_trajectory_file(os.path.join(env_dir, n)) for n in sorted(os.listdir(env_dir))]
        fails = {_actions(ref.dedupe_steps(t["steps"])) for t in fails if not t["is_success"]}
        assert len(picks) == len(ours) == 3 and set(picks) <= fails and len(fails) == 4


def test_reference_file_parse_matches_ours(both):
    """Per kept file: same outcome, step count, actions, observations and admissible lists as
    our reader on this tree (no negative rewards, one quoted item per line); same loops removed."""
    tree, _, _, _, _, rows = both
    after = {r["source_uri"]: r for r in rows["remove_loops"]}
    assert len(rows["parse"]) == 17
    for row in rows["parse"]:
        t = ref.parse_trajectory_file(os.path.join(tree, row["source_uri"]))
        assert t["is_success"] == (row["outcome"] == "success") and t["length"] == len(row["steps"])
        assert tuple(s["action"] for s in t["steps"]) == _actions(row["steps"])
        assert [s["observation"] for s in t["steps"]] == [s["observation"] for s in row["steps"]]
        assert [s["admissible_actions"] for s in t["steps"]] == [s["admissible_actions"] for s in row["steps"]]
        assert tuple(s["action"] for s in ref.dedupe_steps(t["steps"])) == _actions(after[row["source_uri"]]["steps"])


def test_reference_defects_kept():
    """The model keeps the reference's behaviour: actions-only dedupe, shortest period first, earliest copy."""
    steps = [{"action": a, "observation": str(i)} for i, a in enumerate("ABABAAC")]
    assert [(s["action"], s["observation"]) for s in ref.dedupe_steps(steps)] == [("A", "0"), ("B", "1"), ("A", "4"),
                                                                                    ("C", "6")]
    assert ref.bucket(2, 1, 3) == "mixed" and ref.bucket(1, 3, 3) == "all_fail" and ref.bucket(2, 0, 3) is None

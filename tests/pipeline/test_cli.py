"""The `skillpipe` CLI on the shipped real sample (deterministic stages only; LLM stages are
covered end to end by tests/dags/test_dag.py)."""
import os
import shutil

import pytest
from typer.testing import CliRunner

from pipeline.core.artifacts import ArtifactStore
from pipeline.cli import app
from tests.helpers.paths import REPO

ROOT = REPO
SAMPLES = os.path.join(ROOT, "data", "samples")
cli = CliRunner()


def run(*args):
    return cli.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def mixed_input(tmp_path):
    """Real ReAct WebShop sample + a binary file + a non-UTF-8 file + a truncated JSON file."""
    d = tmp_path / "in"
    shutil.copytree(os.path.join(SAMPLES, "react-webshop"), d / "react-webshop")
    (d / "junk.bin").write_bytes(bytes(range(256)) * 4)
    (d / "latin1.txt").write_bytes("Your task is to: caf\xe9\n> go to desk 1\n".encode("latin-1"))
    (d / "truncated.json").write_text('[{"id": "x", "conversations": [{"role": "user", "content": "Your ta')
    return str(d)


def test_run_parse_dedupe_quarantines_bad_files_and_finishes(tmp_path, mixed_input):
    res = run("run", "--input", mixed_input, "--run-id", "t", "--root", str(tmp_path), "--stages", "parse,remove_loops")
    assert res.exit_code == 0, res.output
    assert "skillpipe run summary" in res.output
    parse = ArtifactStore(str(tmp_path), "t").load("parse")
    q = {r["source_uri"]: r for r in parse.read_rows(quarantine=True)}
    assert q["junk.bin"]["reason"] == "binary_file" and q["junk.bin"]["line"] == 1
    assert q["latin1.txt"]["reason"] == "not_utf8"
    assert q["truncated.json"]["line"] >= 1 and q["truncated.json"]["reason"]
    c = parse.manifest["counts"]
    assert c["out"] == 4 and c["in"] == c["out"] + c["quarantined"]
    again = run("run", "--run-id", "t", "--root", str(tmp_path), "--stages", "parse,remove_loops")
    assert again.exit_code == 0
    assert "[parse] unchanged" in again.output and "[remove_loops] unchanged" in again.output


def test_unknown_stage_and_missing_input_fail_with_a_message(tmp_path):
    res = run("run", "--input", SAMPLES, "--root", str(tmp_path), "--stages", "parse,distil")
    assert res.exit_code != 0 and "unknown stage(s) distil" in res.output
    res = run("run", "--root", str(tmp_path), "--run-id", "new")
    assert res.exit_code != 0 and "Invalid value for --input: required for a new run" in " ".join(res.output.replace("│", " ").split())


def test_later_stage_without_upstream_artifact_exits_2_before_running(tmp_path):
    res = run("run", "--run-id", "empty", "--root", str(tmp_path), "--stages", "build_pairs")
    assert res.exit_code == 2 and ("build_pairs reads verify, skills, distill, which --stages does not include "
                                   "and run empty has not written yet") in " ".join(res.output.split())


def test_inspect_quarantine_reads_the_new_and_the_old_folder(tmp_path, mixed_input):
    """Quarantine parts live in _quarantine/ (skipped by Parquet dataset readers); a run written
    before that rename (quarantine/) is still shown."""
    assert run("run", "--input", mixed_input, "--run-id", "q", "--root", str(tmp_path), "--stages", "parse").exit_code == 0
    stage = os.path.join(str(tmp_path), "runs", "q", "parse")
    assert sorted(os.listdir(os.path.join(stage, "_quarantine"))) == ["part-00000.parquet"]
    new = run("inspect", stage, "--quarantine", "--rows", "5")
    assert new.exit_code == 0 and "rows: 3" in new.output and '"reason": "binary_file"' in new.output
    os.rename(os.path.join(stage, "_quarantine"), os.path.join(stage, "quarantine"))
    old = run("inspect", stage, "--quarantine", "--rows", "5")
    assert old.exit_code == 0 and old.output == new.output


def test_inspect_shows_schema_counts_and_rows(tmp_path):
    assert run("run", "--input", SAMPLES, "--run-id", "i", "--root", str(tmp_path), "--stages", "parse").exit_code == 0
    res = run("inspect", os.path.join(str(tmp_path), "runs", "i", "parse"), "--rows", "1")
    assert res.exit_code == 0
    assert "steps: large_list<item: struct<index: int32" in res.output or "steps: list<" in res.output
    assert '"trajectory_id": "traj-' in res.output and "counts:" in res.output
    bad = run("inspect", os.path.join(str(tmp_path), "nope"))
    assert bad.exit_code == 1 and "no such artifact" in bad.output


def test_corrupt_upstream_manifest_and_ignored_input_are_explained(tmp_path):
    assert run("run", "--input", SAMPLES, "--run-id", "c", "--root", str(tmp_path), "--stages", "parse").exit_code == 0
    res = run("run", "--input", SAMPLES, "--run-id", "c", "--root", str(tmp_path), "--stages", "remove_loops")
    assert res.exit_code == 0 and "note: --input is read by the parse stage only" in res.output
    with open(os.path.join(str(tmp_path), "runs", "c", "parse", "_manifest.json"), "w") as f:
        f.write("{not json")
    res = run("run", "--run-id", "c", "--root", str(tmp_path), "--stages", "remove_loops", "--force")
    assert res.exit_code == 1 and "stage 'parse' has an unreadable manifest" in " ".join(res.output.split())
    assert "Traceback" not in res.output

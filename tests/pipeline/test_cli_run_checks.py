"""Checks ``skillpipe run`` makes before and after its stages: ``--stages`` naming a stage whose
upstream is neither requested nor written (exit 2 before any stage runs), an input that gives no
trajectory (one warning line, exit 0), and ``--root gs://`` without gcsfs (which package to
install, no endpoint hint). Deterministic stages only, no LLM."""
from __future__ import annotations

import importlib.util
import os
import shlex
import shutil

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.helpers.paths import REPO

SAMPLES = os.path.join(REPO, "data", "samples")


def cli(*args: str, env: dict | None = None):
    """``(exit code, output with rich's line wrapping undone, stderr alone)`` of ``skillpipe ARGS``."""
    res = CliRunner().invoke(app, list(args), env={"COLUMNS": "400", **(env or {})})
    return res.exit_code, " ".join(res.output.replace("│", " ").split()), res.stderr


def suggested(out: str) -> list[str]:
    """The arguments of the ``skillpipe run`` command an error line suggests."""
    cmd = out.split("Run them too: skillpipe ", 1)[1]
    return shlex.split(cmd.replace(" (every stage)", ""))


def test_a_missing_upstream_stops_before_any_stage_runs_and_names_a_command_that_works(tmp_path):
    root = str(tmp_path)
    code, out, _ = cli("run", "--input", SAMPLES, "--root", root, "--run-id", "x", "--stages", "export,parse")
    assert code == 2
    assert out == (f"error: --stages export,parse: nothing was run: export reads usefulness, skills, split, which "
                   f"--stages does not include and run x has not written yet. Run them too: skillpipe run --root "
                   f"{root} --run-id x --input {SAMPLES} (every stage)")
    assert not os.path.exists(tmp_path / "runs" / "x" / "parse")  # parse did not run first

    code, out, _ = cli("run", "--input", SAMPLES, "--root", root, "--run-id", "x", "--stages", "split,remove_loops")
    assert code == 2 and out.endswith(f"remove_loops reads parse, which --stages does not include and run x has "
                                      f"not written yet. Run them too: skillpipe run --root {root} --run-id x "
                                      f"--input {SAMPLES} --stages parse,remove_loops,verify,split")
    code, out, _ = cli(*suggested(out))
    assert code == 0, out
    assert "[split] in=19 (units=17) out=17 quarantined=0" in out


def test_upstreams_already_written_are_enough_and_no_input_is_asked_for(tmp_path):
    root = str(tmp_path)
    code, out, _ = cli("run", "--input", SAMPLES, "--root", root, "--run-id", "r", "--stages", "parse")
    assert code == 0, out
    code, out, _ = cli("run", "--root", root, "--run-id", "r", "--stages", "split")  # remove_loops: not written
    assert code == 2 and out.endswith(f"split reads verify, which --stages does not include and run r has not "
                                      f"written yet. Run them too: skillpipe run --root {root} --run-id r "
                                      "--stages remove_loops,verify,split")  # parse is written: no --input needed
    code, out, _ = cli(*suggested(out))
    assert code == 0 and "[remove_loops] in=19 out=19 quarantined=0" in out
    code, out, _ = cli("run", "--root", root, "--run-id", "r", "--stages", "split")
    assert code == 0 and "[split] unchanged" in out


def test_a_sharded_upstream_counts_by_its_shards_before_it_is_collected(tmp_path):
    """Under Airflow the map tasks commit their shards and the next reduce collects them: a run
    with shards but no stage manifest yet is not missing anything."""
    root = str(tmp_path)
    code, out, _ = cli("run", "--input", SAMPLES, "--root", root, "--run-id", "s", "--stages",
                       "parse,remove_loops,verify", "--shards", "2")
    assert code == 0, out
    os.remove(tmp_path / "runs" / "s" / "verify" / "_manifest.json")  # shards only, as before a collect
    assert sorted(os.listdir(tmp_path / "runs" / "s" / "verify")) == ["shard-00000", "shard-00001"]
    code, out, _ = cli("run", "--root", root, "--run-id", "s", "--stages", "split")
    assert code == 0, out
    assert "[split] in=19 (units=17) out=17 quarantined=0" in out
    shutil.rmtree(tmp_path / "runs" / "s" / "split")
    shutil.rmtree(tmp_path / "runs" / "s" / "verify")
    code, out, _ = cli("run", "--root", root, "--run-id", "s", "--stages", "split")
    assert code == 2 and "split reads verify, which --stages does not include" in out


@pytest.fixture
def junk_input(tmp_path):
    d = tmp_path / "junk"
    d.mkdir()
    (d / "blob.bin").write_bytes(bytes(range(256)) * 2)
    (d / "empty.json").write_bytes(b"")
    return str(d)


def test_an_input_that_gives_no_trajectory_ends_with_one_warning_line(tmp_path, junk_input):
    root = str(tmp_path / "root")
    code, out, stderr = cli("run", "--input", junk_input, "--root", root, "--run-id", "j",
                            "--stages", "parse,remove_loops,verify,split")
    assert code == 0, out  # every file quarantined, as designed
    parse = os.path.join(root, "runs", "j", "parse")
    warning = (f"warning: no trajectory was read from {junk_input}: parse quarantined all 2 item(s) it found "
               f"(binary_file=1, empty_file=1); see each file and reason with skillpipe inspect {parse} --quarantine")
    assert stderr.rstrip("\n").splitlines()[-1] == warning
    code, shown, _ = cli("inspect", parse, "--quarantine", "--rows", "2")
    assert code == 0 and '"reason": "binary_file"' in shown and '"reason": "empty_file"' in shown
    code, out, stderr = cli("run", "--input", SAMPLES, "--root", root, "--run-id", "ok", "--stages", "parse")
    assert code == 0 and "warning:" not in stderr


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed here")
def test_gs_root_without_gcsfs_says_which_package_to_install_and_nothing_about_endpoints(monkeypatch):
    import sys
    from pipeline.cli import _missing_package_message
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "executable", os.path.join(REPO, ".venv", "bin", "python"))
    for args in (["run", "--input", SAMPLES, "--root", "gs://bucket/p", "--run-id", "g", "--stages", "parse"],
                 ["report", "g", "--root", "gs://bucket/p"]):
        code, out, _ = cli(*args)
        assert code == 1, out
        assert out == ("error: --root gs://bucket/p: the gs:// scheme needs package gcsfs (Please install gcsfs to "
                       "access Google Storage); install it into this environment: .venv/bin/pip install gcsfs")
    code, out, _ = cli("inspect", "gs://bucket/p/runs/g/parse")
    assert code == 1 and out == ("error: gs://bucket/p/runs/g/parse: the gs:// scheme needs package gcsfs (Please "
                                 "install gcsfs to access Google Storage); install it into this environment: "
                                 ".venv/bin/pip install gcsfs")
    assert _missing_package_message(ImportError("no"), "zz://b") == ("--root zz://b: the zz:// scheme needs a package "
                                                                     "that is not installed (no)")


@pytest.fixture(scope="module")
def s3():
    from bench.s3_server import S3Server
    with S3Server() as server:
        yield server


def test_on_object_storage_the_remote_run_is_what_counts(s3, tmp_path, monkeypatch):
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker1"))
    root = f"s3://{s3.bucket}/run-checks"
    code, out, _ = cli("run", "--input", SAMPLES, "--root", root, "--run-id", "r", "--stages", "parse")
    assert code == 0, out
    code, out, _ = cli("run", "--root", root, "--run-id", "r", "--stages", "split")
    assert code == 2 and out.endswith(f"Run them too: skillpipe run --root {root} --run-id r "
                                      "--stages remove_loops,verify,split")
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker2"))  # an empty mirror: parse is on S3
    code, out, _ = cli("run", "--root", root, "--run-id", "r", "--stages", "remove_loops,verify,split")
    assert code == 0 and "[split] in=19 (units=17) out=17 quarantined=0" in out

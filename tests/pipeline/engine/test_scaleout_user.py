"""The scale-out features as a new user meets them through the CLI: ``skillpipe run --shards`` on
a local root, ``--root s3://...`` against moto's S3 server on loopback, ``inspect`` and
``report`` on such a run, and the one-line errors of what a user gets wrong (a shard count the
input cannot take, a replanned run read by a later stage, an unreachable endpoint, Ctrl-C).
No LLM stage runs here: parse, remove_loops, verify and split only (a few seconds in all)."""
from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.inspect import split_run_uri
from tests.helpers.paths import REPO
from bench.s3_server import free_port

SAMPLES = os.path.join(REPO, "data", "samples")
NO_LLM = "parse,remove_loops,verify,split"


def cli(*args: str):
    """``(exit code, output with its line wrapping and help-panel borders undone)`` of ``skillpipe ARGS``."""
    res = CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})
    return res.exit_code, " ".join(res.output.replace("│", " ").split()), res


def test_help_says_what_the_scale_out_options_do_and_their_defaults():
    code, run_help, _ = cli("run", "--help")
    assert code == 0
    for words in ("one shard per 256 MB of input", "never more shards than input folders",
                  "<stage>/shard-NNNNN/", "Default: the run's previous plan, else 0",
                  "s3://bucket/prefix", "$SKILLPIPE_CACHE_DIR (default ~/.cache/skillpipe)",
                  "$SKILLPIPE_STORAGE_OPTIONS", "$SKILLPIPE_LEASE_S seconds, default 120"):
        assert words in run_help, words
    assert "s3://bucket/prefix/runs/<id>/<stage>" in cli("inspect", "--help")[1]
    assert "object-storage URI the run was written to" in cli("report", "--help")[1]


def test_shard_count_above_the_folders_and_a_replanned_run_give_clear_messages(tmp_path):
    root = str(tmp_path)
    code, out, _ = cli("run", "--input", SAMPLES, "--root", root, "--run-id", "r", "--stages",
                       "parse,remove_loops,verify", "--shards", "50")
    assert code == 0, out
    assert "[plan] 6 shard(s)" in out and "50 asked, but a folder is never split" in out  # 6 folders in the sample
    assert sorted(os.listdir(tmp_path / "runs" / "r" / "parse"))[-1] == "shard-00005"
    code, out, _ = cli("run", "--root", root, "--run-id", "r", "--stages", "parse", "--shards", "1")
    assert code == 0, out  # parse is flat now, remove_loops still in 6 shards
    assert "note: run r was built from" not in out  # the recorded input, reused
    other = os.path.join(SAMPLES, "eto-alfworld")
    code, out, _ = cli("run", "--input", other, "--root", root, "--run-id", "r", "--stages", "parse", "--shards", "1")
    assert code == 0 and (f"note: run r was built from {SAMPLES}; parse now reads {other} and the later stages "
                          "follow it (another --run-id keeps both runs)") in out
    code, out, _ = cli("run", "--input", SAMPLES, "--root", root, "--run-id", "r", "--stages", "parse", "--shards", "1")
    assert code == 0, out
    code, out, res = cli("run", "--root", root, "--run-id", "r", "--stages", "split")
    assert code == 1 and res.exception is not None and "Traceback" not in out
    assert ("error: stage 'remove_loops' shard-00000 of run r is stale: it was built from 'parse' shard-00000, "
            "which the run no longer has ('parse' was rerun with another shard count); rerun from 'remove_loops' "
            "on") in out
    code, out, _ = cli("run", "--root", root, "--run-id", "r", "--stages", "remove_loops,verify,split")
    assert code == 0 and "[remove_loops] in=19 out=19" in out
    # the same local root written as a file:// URI: the recorded input is found, inspect reads it
    code, out, _ = cli("run", "--root", f"file://{root}", "--run-id", "r", "--stages", "parse")
    assert code == 0 and "[parse] unchanged" in out
    code, out, _ = cli("inspect", f"file://{root}/runs/r/split", "--rows", "0")
    assert code == 0 and out.startswith(f"artifact: {root}/runs/r/split rows: 17 ")


def test_a_suggested_command_names_the_root_given(tmp_path):
    code, out, _ = cli("run", "--root", str(tmp_path), "--run-id", "fresh", "--stages", "remove_loops")
    assert code == 2
    assert out.endswith(f"Run them too: skillpipe run --root {tmp_path} --run-id fresh --input PATH "
                        "--stages parse,remove_loops")


def test_a_shard_that_lost_a_file_is_rebuilt_by_the_command_the_error_suggests(tmp_path):
    root = str(tmp_path)
    code, out, _ = cli("run", "--input", SAMPLES, "--root", root, "--run-id", "r", "--stages", NO_LLM, "--shards", "2")
    assert code == 0, out
    os.remove(tmp_path / "runs" / "r" / "remove_loops" / "shard-00001" / "part-00000.parquet")
    code, out, _ = cli("run", "--root", root, "--run-id", "r", "--stages", "split")
    assert code == 1
    assert out.endswith(f"remove_loops/shard-00001 is missing 1 of its files (part-00000.parquet); run it again (skillpipe run "
                        f"--root {root} --run-id r --stages remove_loops: what is missing or unreadable is rebuilt, "
                        "the rest skipped)")
    code, out, _ = cli("run", "--root", root, "--run-id", "r", "--stages", "remove_loops")
    assert code == 0, out
    assert "[remove_loops shard-00000] unchanged" in out  # the intact shard is kept
    assert "[remove_loops shard-00001] 1 of its files are missing (part-00000.parquet, ...): rebuilding it" in out
    assert os.path.exists(tmp_path / "runs" / "r" / "remove_loops" / "shard-00001" / "part-00000.parquet")


def test_ctrl_c_is_one_line_saying_how_to_go_on(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("pipeline.engine.runner.run_pipeline", interrupted)
    code, out, _ = cli("run", "--input", SAMPLES, "--root", str(tmp_path), "--stages", "parse")
    assert code == 130
    assert out == ("error: interrupted: the stages and shards written so far are kept (each is written whole or "
                   "not at all); rerun to go on from there (without --force, what is done is skipped)")


def test_split_run_uri():
    assert split_run_uri("s3://b/p/runs/r1/export/") == ("s3://b/p", "r1", "export")
    assert split_run_uri("s3://b/runs/r1") == ("s3://b", "r1", "")
    assert split_run_uri("s3://b/p/memory") == ("", "", "")


# fixtures s3 and env: tests/pipeline/engine/conftest.py


def test_s3_run_shows_uris_reruns_without_input_and_is_inspected_and_reported(env, tmp_path, monkeypatch):
    root = env.uri("user")
    code, out, _ = cli("run", "--input", SAMPLES, "--root", root, "--run-id", "r", "--stages", NO_LLM, "--shards", "2")
    assert code == 0, out
    for stage in NO_LLM.split(","):
        assert f" {stage} {root}/runs/r/{stage} " in f"{out} "
    mirror = str(tmp_path / "worker1" / "mirror")
    assert f"local mirror: {mirror}" in out and out.count(mirror) == 1  # named once, never as an artifact
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker2"))  # another machine, no --input
    code, out, _ = cli("run", "--root", root, "--run-id", "r", "--stages", "parse")
    assert code == 0, out
    assert out.count("unchanged (fingerprint") == 2  # both parse shards: the recorded input, unchanged
    code, out, _ = cli("inspect", f"{root}/runs/r", "--rows", "0")
    assert code == 0 and out.startswith(f"run: {root}/runs/r (local mirror ")
    assert "split in=19 out=17 quarantined=0" in out
    code, out, _ = cli("inspect", f"{root}/runs/r/parse/shard-00001", "--rows", "0")
    assert code == 0 and out.startswith(f"artifact: {root}/runs/r/parse/shard-00001 rows: ")
    code, out, _ = cli("inspect", f"{root}/runs/r/split", "--html", str(tmp_path / "split.html"))
    assert code == 0 and out == f"wrote {tmp_path / 'split.html'}" and os.path.getsize(tmp_path / "split.html") > 1000
    code, out, _ = cli("report", "nope", "--root", root)
    assert code == 1 and out == f"error: no run 'nope' under {root} (no committed stage manifest)"


def test_fewer_shards_on_s3_remove_the_old_shard_folders(env, tmp_path, monkeypatch):
    root = env.uri("replan")
    for n in ("3", "2"):
        code, out, _ = cli("run", "--input", SAMPLES, "--root", root, "--run-id", "r", "--stages", "parse", "--shards", n)
        assert code == 0, out
    fs = env.fs()
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(f"{env.bucket}/replan/runs/r/parse", detail=False, refresh=True)
                  if "shard-" in p) == ["shard-00000", "shard-00001"]
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker2"))  # a fresh mirror pulls no stale shard
    code, out, _ = cli("run", "--root", root, "--run-id", "r", "--stages", "parse")
    assert code == 0 and out.count("unchanged (fingerprint") == 2
    mirror = [d for d in os.listdir(tmp_path / "worker2" / "mirror")]
    assert len(mirror) == 1 and not os.path.exists(tmp_path / "worker2" / "mirror" / mirror[0] / "runs" / "r" /
                                                   "parse" / "shard-00002")


def test_a_stage_uri_stays_readable_after_its_shards_are_rewritten_twice(env):
    """Each --force commits the shards anew and the next one removes the attempt before last: the
    stage manifest must follow its shards (it kept pointing at the removed files: 'The specified
    key does not exist' from inspect and read_table)."""
    from pipeline.engine.remote import read_table
    root = env.uri("force")
    args = ["run", "--input", SAMPLES, "--root", root, "--run-id", "r", "--stages", "parse", "--shards", "2"]
    for extra in ([], ["--force"], ["--force"]):
        code, out, _ = cli(*args, *extra)
        assert code == 0, out
    assert read_table(f"{root}/runs/r/parse").num_rows == 19
    code, out, _ = cli("inspect", f"{root}/runs/r/parse", "--rows", "0", "--quarantine")
    assert code == 0 and out.startswith(f"artifact: {root}/runs/r/parse (quarantine) rows: 0 ")


def test_unreachable_endpoint_is_one_line_with_what_to_check(tmp_path, monkeypatch):
    opts = ('{"client_kwargs": {"endpoint_url": "http://127.0.0.1:%d"}, "key": "k", "secret": "s", '
            '"config_kwargs": {"retries": {"max_attempts": 1}}}' % free_port())
    monkeypatch.setenv("SKILLPIPE_STORAGE_OPTIONS", opts)
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path))
    for args in (["run", "--root", "s3://bucket/p", "--run-id", "r", "--stages", "parse"],  # the recorded input
                 ["run", "--root", "s3://bucket/p", "--run-id", "r", "--stages", "split"]):  # the run itself
        code, out, _ = cli(*args)
        assert code == 1 and "Traceback" not in out
        assert out.startswith("error: object storage s3://bucket/p: EndpointConnectionError: Could not connect")
        assert out.endswith("check the endpoint (AWS_ENDPOINT_URL or SKILLPIPE_STORAGE_OPTIONS), the credentials "
                            "and that the bucket exists")


def test_forced_sharded_llm_stage_reports_this_runs_llm_use(tmp_path):
    """``--stages memory --force`` on a 2-shard run answers every request from the run's LLM cache:
    the summary (the stage manifest the collect step writes) must say 0 calls and the cache hits,
    not the calls of the first run (it kept the old stage manifest: same shard outputs)."""
    from bench.reliability_stub import SchemaStub
    from pipeline.core.config import PipelineConfig
    from pipeline.quality import QUALITY_RULES
    from pipeline.engine.runner import run_pipeline
    src = tmp_path / "in"
    for name in ("eto-alfworld", "react-alfworld"):  # two folders: two shards, 7 trajectories
        os.makedirs(src / name)
        for f in os.listdir(os.path.join(SAMPLES, name)):
            if f.endswith((".json", ".txt")) and not f.startswith(("SOURCE", "README")):
                with open(os.path.join(SAMPLES, name, f), "rb") as a, open(src / name / f, "wb") as b:
                    b.write(a.read())
    with SchemaStub() as stub:
        cfg = PipelineConfig()
        cfg.llm.base_url, cfg.llm.model, cfg.llm.structured_output = stub.base_url, "stub-model", "json_schema"
        cfg.quality.off_topic_threshold, cfg.quality.flag_rules = -1, list(QUALITY_RULES)
        first = run_pipeline(str(tmp_path), "r", str(src), cfg, stages=[*NO_LLM.split(","), "memory"], shards=2,
                             log=lambda m: None)[-1].manifest["llm"]
        sent = len(stub.requests)
        forced = run_pipeline(str(tmp_path), "r", "", cfg, stages=["memory"], force=True, log=lambda m: None)[0]
    assert sent == first["calls"] == 7 and len(stub.requests) == sent  # the forced run sent nothing
    assert (forced.skipped, forced.manifest["llm"]["calls"], forced.manifest["llm"]["cache_hits"]) == (False, 0, 7)
    assert len(forced.manifest["shards"]) == 2


@pytest.mark.parametrize("lease_s", ["abc", "-5", "0"])
def test_a_bad_lease_time_or_cache_dir_is_one_line_naming_the_variable(env, tmp_path, monkeypatch, lease_s):
    monkeypatch.setenv("SKILLPIPE_LEASE_S", lease_s)
    code, out, _ = cli("run", "--input", SAMPLES, "--root", env.uri("lease"), "--run-id", "r", "--stages", "parse")
    assert code == 1 and out.endswith(
        f"error: $SKILLPIPE_LEASE_S must be a number of seconds > 0 (default 120), got '{lease_s}'")
    if lease_s == "0":  # once is enough: a cache dir that cannot be created
        monkeypatch.delenv("SKILLPIPE_LEASE_S")
        blocker = tmp_path / "file"
        blocker.write_text("")
        monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(blocker / "cache"))
        code, out, _ = cli("run", "--input", SAMPLES, "--root", env.uri("lease"), "--run-id", "r", "--stages", "parse")
        assert code == 1 and out.startswith(f"error: local mirror of {env.uri('lease')}: NotADirectoryError: ")
        assert out.endswith("$SKILLPIPE_CACHE_DIR (default ~/.cache/skillpipe) must be a writable folder with room "
                            "for the run")

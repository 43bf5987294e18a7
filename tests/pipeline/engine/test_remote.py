"""Object-storage roots against a real S3-protocol server on loopback (moto in server mode):
the manifest-last commit, pulls checked against the recorded SHA-256, garbage collection of a
killed attempt, the lease, and the LLM cache parts."""
from __future__ import annotations

import json
import os
import time

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.lease import Lease, LeaseHeld
from pipeline.core.records import TRAJECTORY_SCHEMA, to_table
from pipeline.engine.remote import ATTEMPT_KEY, CacheCheckpointer, open_artifact, open_root, read_table
from pipeline.llm.cache import ResponseCache, decode_part
from tests.helpers.llm_stage_data import cool_apple, heat_mug

ROWS = [cool_apple("success", "traj-A").to_row(), heat_mug("traj-B").to_row()]


# fixtures s3 and env: tests/pipeline/engine/conftest.py


def publish_remove_loops(root: str, rows=ROWS) -> dict:
    """Write ``rows`` as the remove_loops artifact in the mirror and publish it; its manifest."""
    with open_root(root, "r1") as (local, hooks):
        hooks.before("remove_loops")
        store = ArtifactStore(local, "r1")
        art = store.write("remove_loops", to_table(rows, TRAJECTORY_SCHEMA), [],
                          {"stage": "remove_loops", "fingerprint": "fp-1", "counts": {"out": len(rows)}})
        hooks.after("remove_loops")
    return art.manifest


def test_commit_names_its_attempt_and_a_fresh_mirror_reads_the_same_artifact(env, tmp_path, monkeypatch):
    root = env.uri("commit")
    local_manifest = publish_remove_loops(root)
    fs = env.fs()
    remote = json.loads(fs.cat_file(f"{env.bucket}/commit/runs/r1/remove_loops/_manifest.json"))
    attempt = remote[ATTEMPT_KEY]["id"]
    assert {k: v for k, v in remote.items() if k != ATTEMPT_KEY} == local_manifest
    assert sorted(fs.find(f"{env.bucket}/commit/runs/r1/remove_loops")) == sorted(
        [f"{env.bucket}/commit/runs/r1/remove_loops/_manifest.json"]
        + [f"{env.bucket}/commit/runs/r1/remove_loops/_attempts/{attempt}/{n}" for n in local_manifest["files"]])
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "cache2"))
    folder = open_artifact(f"{root}/runs/r1/remove_loops")
    assert str(tmp_path / "cache2") in folder
    with open(os.path.join(folder, "_manifest.json"), encoding="utf-8") as f:
        assert json.load(f) == local_manifest  # fingerprint and content_sha256 as written locally
    assert [r["trajectory_id"] for r in read_table(f"{root}/runs/r1/remove_loops").to_pylist()] == ["traj-A", "traj-B"]
    shown = CliRunner().invoke(app, ["inspect", f"{root}/runs/r1/remove_loops", "--rows", "1"])
    assert shown.exit_code == 0 and "rows: 2" in shown.output and "traj-A" in shown.output
    missing = CliRunner().invoke(app, ["inspect", f"{root}/runs/r1/memory"])
    assert missing.exit_code == 1 and "no complete artifact" in missing.output


def test_endpoint_from_the_standard_aws_variable(env, monkeypatch):
    monkeypatch.delenv("SKILLPIPE_STORAGE_OPTIONS")
    monkeypatch.setenv("AWS_ENDPOINT_URL", env.endpoint_url)
    publish_remove_loops(env.uri("awsenv"))
    assert env.fs().exists(f"{env.bucket}/awsenv/runs/r1/remove_loops/_manifest.json")


def test_killed_attempt_is_never_read_and_is_garbage_collected(env, tmp_path, monkeypatch):
    root = env.uri("killed")
    publish_remove_loops(root)
    fs = env.fs()
    base = f"{env.bucket}/killed/runs/r1/remove_loops"
    committed = json.loads(fs.cat_file(f"{base}/_manifest.json"))[ATTEMPT_KEY]["id"]
    # a retried task died after uploading its parts, before its manifest: one row only
    half = ArtifactStore(str(tmp_path / "half"), "r1").write(
        "remove_loops", to_table(ROWS[:1], TRAJECTORY_SCHEMA), [], {"stage": "remove_loops", "fingerprint": "x"})
    fs.put(os.path.join(half.path, "part-00000.parquet"), f"{base}/_attempts/20991231T000000Z-dead/part-00000.parquet")
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "cache2"))
    assert read_table(f"{root}/runs/r1/remove_loops").num_rows == 2  # the manifest's attempt, not the newest
    with open_root(root, "r1") as (local, hooks):  # the next attempt of the same folder
        hooks.before("remove_loops")
        assert hooks.stats["gc_attempts"] == 1
        assert [p.rsplit("/", 1)[-1] for p in fs.ls(f"{base}/_attempts", detail=False, refresh=True)] == [committed]
        assert ArtifactStore(local, "r1").require("remove_loops").read_table().num_rows == 2
        hooks.after("remove_loops")  # nothing changed: nothing is published again
        assert hooks.stats["published"] == 0


def test_a_tampered_remote_file_is_refused_and_a_stale_local_file_removed(env, tmp_path):
    root = env.uri("tamper")
    publish_remove_loops(root)
    with open_root(root, "r1") as (local, hooks):  # same mirror: the files match, none is downloaded
        stray = os.path.join(local, "runs", "r1", "remove_loops", "part-00001.parquet")
        with open(stray, "wb") as f:
            f.write(b"left by an older, larger version")
        hooks.before("remove_loops")
        assert hooks.stats["downloaded"] == 0 and not os.path.exists(stray)
        hooks.after("remove_loops")
    fs = env.fs()
    base = f"{env.bucket}/tamper/runs/r1/remove_loops"
    attempt = json.loads(fs.cat_file(f"{base}/_manifest.json"))[ATTEMPT_KEY]["id"]
    fs.pipe_file(f"{base}/_attempts/{attempt}/part-00000.parquet", b"not what the manifest recorded")
    os.remove(os.path.join(local, "runs", "r1", "remove_loops", "part-00000.parquet"))
    with pytest.raises(OSError, match="does not match its manifest"):
        with open_root(root, "r1") as (_, hooks):
            hooks.before("remove_loops")
    assert not os.path.exists(os.path.join(local, "runs", "r1", "remove_loops", "_manifest.json"))


def test_lease_conflict_renewal_expiry_takeover_and_release(env):
    fs = env.fs()
    path = f"{env.bucket}/lease/runs/r1/_locks/memory.shard-00001.json"
    first = Lease(fs, path, ttl_s=2.0).acquire()
    with pytest.raises(LeaseHeld, match=f"held by pid {os.getpid()}") as e:
        Lease(fs, path, ttl_s=2.0).acquire()
    assert e.value.holder["token"] == first.token
    expires = json.loads(fs.cat_file(path))["expires_at"]
    deadline = time.monotonic() + 10
    while json.loads(fs.cat_file(path))["expires_at"] == expires and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads(fs.cat_file(path))["expires_at"] > expires  # renewed by its thread
    first._stop.set()  # the holder is killed: it stops renewing
    first._thread.join()
    deadline, second = time.monotonic() + 10, None
    while second is None and time.monotonic() < deadline:
        try:
            second = Lease(fs, path, ttl_s=2.0).acquire()  # refused until the lease expires, then taken over
        except LeaseHeld:
            time.sleep(0.1)
    assert second is not None and json.loads(fs.cat_file(path))["token"] == second.token
    first.release()  # not the holder any more: leaves the lease alone
    assert fs.exists(path)
    second.release()
    assert not fs.exists(path)


def test_stage_hooks_refuse_a_stage_another_worker_holds(env):
    root = env.uri("held")
    other = Lease(env.fs(), f"{env.bucket}/held/runs/r1/_locks/remove_loops.json", ttl_s=60).acquire()
    try:
        with pytest.raises(LeaseHeld, match="Another worker is running this stage"):
            with open_root(root, "r1") as (_, hooks):
                hooks.before("remove_loops")
    finally:
        other.release()


def test_cache_checkpoints_every_k_answers_and_parts_import_once(tmp_path):
    parts: dict[str, bytes] = {}
    cache = ResponseCache(str(tmp_path / "a.sqlite"))
    ckpt = CacheCheckpointer(str(tmp_path / "a.sqlite"), parts.__setitem__, "att1", every_answers=2,
                             every_s=3600, poll_s=0.02)
    for i in range(3):
        cache.put(f"k{i}", "m", {"answer": i}, f"raw{i}", {"prompt_tokens": 10})
        if i == 1:  # 2 answers: a checkpoint
            deadline = time.monotonic() + 5
            while not parts and time.monotonic() < deadline:
                time.sleep(0.02)
    time.sleep(0.2)  # 1 answer pending: below both thresholds, no part yet
    assert sorted(parts) == ["att1-00000.parquet"]
    ckpt.stop(flush=True)
    assert sorted(parts) == ["att1-00000.parquet", "att1-00001.parquet"]
    assert [e["key"] for e in decode_part(parts["att1-00000.parquet"])] == ["k0", "k1"]
    entries = [e for name in sorted(parts) for e in decode_part(parts[name])]
    assert [e["key"] for e in entries] == ["k0", "k1", "k2"]
    fresh = ResponseCache(str(tmp_path / "b.sqlite"))
    assert fresh.import_entries(entries) == 3 and fresh.import_entries(entries) == 0
    assert fresh.get("k2") == {"value": {"answer": 2}, "raw": "raw2", "usage": {"prompt_tokens": 10}}
    with pytest.raises(ValueError, match="not an LLM cache part"):
        decode_part(b"PAR1 nonsense")


def test_a_failed_llm_stage_keeps_its_answers_and_the_retry_imports_them(env, tmp_path, monkeypatch):
    from pipeline.llm.cache import CACHE_FILE
    root = env.uri("failed")
    with pytest.raises(RuntimeError, match="endpoint down"):
        with open_root(root, "r1") as (local, hooks):
            hooks.before("memory")  # an LLM stage: its cache parts are imported, new answers checkpointed
            cache = ResponseCache(os.path.join(local, "runs", "r1", CACHE_FILE))
            cache.put("k-paid", "stub-model", {"ok": 1}, "raw", {"prompt_tokens": 10})
            raise RuntimeError("endpoint down")  # StageFailed: the runner never calls after()
    fs = env.fs()
    assert len(fs.ls(f"{env.bucket}/failed/runs/r1/memory/_llm_cache", detail=False, refresh=True)) == 1
    assert not fs.exists(f"{env.bucket}/failed/runs/r1/_locks/memory.json")  # released
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker2"))
    with open_root(root, "r1") as (local, hooks):
        hooks.before("memory")
        assert hooks.stats["cache_imported"] == 1
        assert ResponseCache(os.path.join(local, "runs", "r1", CACHE_FILE)).get("k-paid")["value"] == {"ok": 1}


def test_a_filesystem_without_conditional_writes_uses_the_read_back_lease(tmp_path, monkeypatch):
    """fsspec's in-memory filesystem stands for gcsfs & co: same commit, leases by read-back."""
    import fsspec
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "cache1"))
    monkeypatch.delenv("SKILLPIPE_STORAGE_OPTIONS", raising=False)
    root = "memory://skillpipe-test/generic"
    publish_remove_loops(root)
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "cache2"))
    assert read_table(f"{root}/runs/r1/remove_loops").num_rows == 2
    fs = fsspec.filesystem("memory")
    path = "/skillpipe-test/generic/runs/r1/_locks/split.json"
    held = Lease(fs, path, ttl_s=60).acquire()
    with pytest.raises(LeaseHeld):
        Lease(fs, path, ttl_s=60).acquire()
    held.release()
    assert not fs.exists(path)
    fs.rm("/skillpipe-test", recursive=True)

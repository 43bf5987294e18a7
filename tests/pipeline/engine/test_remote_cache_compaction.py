"""The LLM cache parts of a unit on an object-storage root (moto's S3 server on loopback) are
merged into one part when the unit commits; a worker reading them meanwhile loses no entry, and a
rerun on a fresh mirror pays for no answer again."""
from __future__ import annotations

import json
import os

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.records import TRAJECTORY_SCHEMA, to_table
from pipeline.engine.remote import RemoteRun, open_root
from pipeline.engine.runner import run_pipeline
from pipeline.llm.cache import CACHE_FILE, ResponseCache, decode_part, encode_part
from tests.helpers.llm_faults import GOOD_B, SUCCESS, stub_llm_config
from tests.helpers.llm_stage_data import cool_apple
from bench.chat_stub import ChatStub
from tests.helpers.remote_upstream import commit_cool_apple_upstream

ROWS = [cool_apple("success", "traj-A").to_row()]


# fixtures s3 and env: tests/pipeline/engine/conftest.py


def part_names(fs, folder: str) -> list[str]:
    return sorted(p.rsplit("/", 1)[-1] for p in fs.ls(folder, detail=False, refresh=True))


def test_parts_are_merged_into_one_when_the_unit_commits(env, tmp_path, monkeypatch):
    root, fs = env.uri("compact"), env.fs()
    folder = f"{env.bucket}/compact/runs/r1/memory/_llm_cache"
    fs.pipe_file(f"{folder}/notes.parquet", b"not a cache part")  # left alone: its rows cannot be carried over
    with open_root(root, "r1") as (local, hooks):
        hooks.before("memory")
        attempt = hooks._attempt["memory"]
        cache = ResponseCache(os.path.join(local, "runs", "r1", CACHE_FILE))
        for i, key in enumerate(["k0", "k1", "k2", "k3", "k0"]):  # k0 put again after its answer was deleted
            cache.put(key, "stub-model", {"answer": i}, f"raw{i}", {"prompt_tokens": 10})
            hooks._ckpt["memory"].flush()  # one part per answer
        assert part_names(fs, folder) == [f"{attempt}-{i:05d}.parquet" for i in range(5)] + ["notes.parquet"]
        ArtifactStore(local, "r1").write("memory", to_table(ROWS, TRAJECTORY_SCHEMA), [],
                                         {"stage": "memory", "fingerprint": "fp-1", "counts": {"out": 1}})
        hooks.after("memory")
        assert hooks.stats["cache_compacted"] == 5
    assert part_names(fs, folder) == [f"{attempt}-compact.parquet", "notes.parquet"]
    merged = decode_part(fs.cat_file(f"{folder}/{attempt}-compact.parquet"))
    assert [(e["key"], json.loads(e["value"])["answer"]) for e in merged] == [("k0", 4), ("k1", 1), ("k2", 2), ("k3", 3)]
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker2"))  # another worker: an empty mirror
    with open_root(root, "r1") as (local, hooks):
        hooks.before("memory")
        assert hooks.stats["cache_imported"] == 4
        hooks.after("memory")  # one readable part: nothing to merge
        assert hooks.stats["cache_compacted"] == 0
    assert part_names(fs, folder) == [f"{attempt}-compact.parquet", "notes.parquet"]


def test_a_part_deleted_between_listing_and_read_is_found_in_the_merged_part(env):
    fs = env.fs()
    remote = RemoteRun(fs, f"{env.bucket}/vanish", "r1")
    entries = [{"key": f"k{i}", "model_id": "m", "value": "1", "raw": "r", "usage": "{}", "created": 0.0}
               for i in range(3)]
    for i, e in enumerate(entries):
        remote.put_cache_part("memory", f"a-{i:05d}.parquet", encode_part([e]))
    cat = fs.cat

    def cat_racing_a_compaction(paths, **kw):  # another worker compacts right after our listing
        fs.cat = cat
        assert remote.compact_cache("memory", "b-compact.parquet") == 3
        return cat(paths, **kw)
    fs.cat = cat_racing_a_compaction
    try:
        blobs = remote.cache_parts("memory")
    finally:
        fs.cat = cat
    assert [[e["key"] for e in decode_part(b)] for b in blobs] == [["k0", "k1", "k2"]]


@pytest.mark.slow  # the memory stage end to end: ~15 s on 2 cores
def test_a_rerun_on_a_fresh_mirror_pays_for_no_answer_after_compaction(env, tmp_path, monkeypatch):
    root, fs = env.uri("rerun"), env.fs()
    commit_cool_apple_upstream(root)  # the upstream artifacts, committed
    put, written = RemoteRun.put_cache_part, []

    def spy(self, rel, name, data):
        written.append(name.rsplit("-", 1)[-1])
        put(self, rel, name, data)
    monkeypatch.setattr(RemoteRun, "put_cache_part", spy)
    monkeypatch.setenv("SKILLPIPE_LLM_CHECKPOINT_ANSWERS", "1")
    with ChatStub([{"content": json.dumps(SUCCESS)}, {"sleep": 0.6, **GOOD_B}]) as stub:  # B after a checkpoint
        cfg = PipelineConfig(llm=stub_llm_config(stub, max_retries=0, max_repairs=0, timeout_s=10))
        (first,) = run_pipeline(root, "r1", "", cfg, env="alfworld", stages=["memory"], log=lambda m: None)
    assert len(stub.requests) == 2 and first.manifest["llm"]["calls"] == 2
    assert written == ["00000.parquet", "00001.parquet", "compact.parquet"]  # one part per answer, then merged
    folder = f"{env.bucket}/rerun/runs/r1/memory/_llm_cache"
    (name,) = part_names(fs, folder)
    assert len(decode_part(fs.cat_file(f"{folder}/{name}"))) == 2
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker2"))
    with ChatStub([]) as stub2:  # any request would get an error answer
        cfg.llm.base_url = stub2.base_url
        (again,) = run_pipeline(root, "r1", "", cfg, env="alfworld", stages=["memory"], force=True, log=lambda m: None)
    assert len(stub2.requests) == 0
    assert (again.manifest["llm"]["calls"], again.manifest["llm"]["cache_hits"]) == (0, 2)
    assert again.manifest["content_sha256"] == first.manifest["content_sha256"]

"""ArtifactStore: atomic stage folders, manifests, streaming parts, run-id safety."""
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core import artifacts
from pipeline.core.artifacts import ArtifactError, ArtifactStore, EncodedPart, PartEncoder, decode_part
from pipeline.core.records import QUARANTINE_SCHEMA, QuarantineRow, to_table

SCHEMA = pa.schema([("id", pa.string()), ("n", pa.int64())])


def rows(a, b):
    return [{"id": f"r{i}", "n": i} for i in range(a, b)]


def test_write_then_load_roundtrip(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    q = [QuarantineRow("s", "bad_row", "why", "r9", "in.txt", 7, "raw text")]
    art = store.write("s", to_table(rows(0, 3), SCHEMA), q, {"fingerprint": "fp1"}, {"notes/a.txt": "hello"})
    assert art.path == os.path.join(str(tmp_path), "runs", "r1", "s")
    loaded = store.load("s")
    assert loaded.fingerprint == "fp1" and loaded.manifest["status"] == "complete"
    assert loaded.manifest["files"] == ["_quarantine/part-00000.parquet", "notes/a.txt", "part-00000.parquet"]
    assert loaded.read_rows() == rows(0, 3)
    assert loaded.read_rows(quarantine=True) == [{"stage": "s", "kind": "unit", "reason": "bad_row",
                                                  "detail": "why", "item_id": "r9", "source_uri": "in.txt",
                                                  "line": 7, "raw": "raw text"}]
    with open(os.path.join(art.path, "notes", "a.txt")) as f:
        assert f.read() == "hello"


def test_rewrite_replaces_and_leaves_no_temp_folders(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    store.write("s", to_table(rows(0, 5), SCHEMA), [], {"fingerprint": "a"})
    store.write("s", to_table(rows(0, 2), SCHEMA), [], {"fingerprint": "b"})
    assert store.load("s").read_rows() == rows(0, 2)
    assert sorted(os.listdir(store.run_dir)) == ["s"]


def test_failed_write_keeps_previous_version(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    store.write("s", to_table(rows(0, 2), SCHEMA), [], {"fingerprint": "a"})
    with pytest.raises(ValueError, match="escapes"):
        store.write("s", to_table(rows(0, 9), SCHEMA), [], {"fingerprint": "b"}, {"../evil": "x"})
    assert store.load("s").fingerprint == "a" and sorted(os.listdir(store.run_dir)) == ["s"]


def test_incomplete_manifest_is_not_an_artifact(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    os.makedirs(store.stage_dir("s"))
    with open(os.path.join(store.stage_dir("s"), artifacts.MANIFEST), "w") as f:
        json.dump({"status": "running", "fingerprint": "x"}, f)
    assert store.load("s") is None
    with pytest.raises(ArtifactError, match="stage 's' has no complete artifact"):
        store.require("s")


def test_stream_splits_parts_and_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(artifacts, "PART_ROWS", 4)
    store = ArtifactStore(str(tmp_path), "r1")
    batches = [(rows(0, 3), []), (rows(3, 10), [QuarantineRow("s", "x")]), ([], [])]
    seen = {}

    def finish(n_rows, tally):
        seen.update(n_rows=n_rows, kinds=dict(tally.kinds), reasons=dict(tally.reasons))
        return {"fingerprint": "f"}, {}
    art = store.write_stream("s", SCHEMA, iter(batches), finish)
    assert seen == {"n_rows": 10, "kinds": {"unit": 1}, "reasons": {"x": 1}}
    assert [f for f in art.manifest["files"] if not f.startswith("_quarantine/")] == \
        ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert art.read_rows() == rows(0, 10)


def test_part_encoder_splits_at_part_rows_and_counts_reasons(monkeypatch):
    monkeypatch.setattr(artifacts, "PART_ROWS", 4)
    enc = PartEncoder(SCHEMA)
    enc.write(to_table(rows(0, 3), SCHEMA))
    enc.write(to_table(rows(3, 6), SCHEMA))
    parts = enc.finish()
    assert [p.rows for p in parts] == [4, 2] and [p.reasons for p in parts] == [None, None]
    assert decode_part(parts[0]).to_pylist() + decode_part(parts[1]).to_pylist() == rows(0, 6)
    qenc = PartEncoder(QUARANTINE_SCHEMA)
    qenc.write(to_table([QuarantineRow("s", r).__dict__ for r in ("a", "b", "a")]
                        + [QuarantineRow("s", "c", kind="request").__dict__], QUARANTINE_SCHEMA))
    assert [(p.reasons, p.kinds) for p in qenc.finish()] == [({"a": 2, "b": 1}, {"unit": 3, "request": 1})]
    with pytest.raises(ArtifactError, match="differs from the declared schema"):
        PartEncoder(SCHEMA).write(to_table([{"id": "x"}], pa.schema([("id", pa.string())])))


def test_stream_mixes_encoded_parts_with_row_batches_in_order(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    enc, qenc = PartEncoder(SCHEMA), PartEncoder(QUARANTINE_SCHEMA)
    enc.write(to_table(rows(2, 5), SCHEMA))
    qenc.write(to_table([QuarantineRow("s", "late").__dict__], QUARANTINE_SCHEMA))
    batches = [(rows(0, 2), [QuarantineRow("s", "early")]), (enc.finish()[0], qenc.finish()[0]), (rows(5, 6), [])]
    art = store.write_stream("s", SCHEMA, iter(batches),
                             lambda n, q: ({"fingerprint": "m", "n": [n, q.units, sorted(q.reasons)]}, {}))
    assert art.manifest["n"] == [6, 2, ["early", "late"]] and art.read_rows() == rows(0, 6)
    assert [f for f in art.manifest["files"] if not f.startswith("_quarantine/")] == \
        ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]  # an encoded part stays whole
    assert [q["reason"] for q in art.read_rows(quarantine=True)] == ["early", "late"]


def test_stream_rejects_an_encoded_part_that_lies(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    enc = PartEncoder(SCHEMA)
    enc.write(to_table(rows(0, 3), SCHEMA))
    part = enc.finish()[0]
    with pytest.raises(ArtifactError, match="3 rows \\(declared 5"):
        store.write_stream("s", SCHEMA, iter([(EncodedPart(part.data, 5), [])]), lambda n, q: ({}, {}))
    assert store.load("s") is None and os.listdir(store.run_dir) == []


def test_empty_stream_writes_a_readable_empty_artifact(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    art = store.write_stream("s", SCHEMA, iter([]), lambda n, q: ({"fingerprint": "e"}, {}))
    assert art.read_table().num_rows == 0 and art.read_table().schema == SCHEMA


@pytest.mark.parametrize("bad", ["", "../x", ".hidden", "a/b", "a b"])
def test_run_id_cannot_escape_root(tmp_path, bad):
    with pytest.raises(ValueError, match="invalid run id"):
        ArtifactStore(str(tmp_path), bad)


def test_to_table_rejects_unknown_and_missing_fields():
    with pytest.raises(KeyError, match=r"unknown=\['extra'\] missing=\['n'\]"):
        to_table([{"id": "a", "extra": 1}], SCHEMA)


def test_corrupt_manifest_or_missing_part_is_a_clear_error(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    art = store.write("s", to_table(rows(0, 2), SCHEMA), [], {"fingerprint": "a"})
    os.remove(os.path.join(art.path, "part-00000.parquet"))
    with pytest.raises(ArtifactError, match=r"missing 1 of its files \(part-00000.parquet\); run it again "
                                            r"\(skillpipe run --run-id r1 --stages s: what is missing or unreadable is rebuilt"):
        store.require("s")
    with open(os.path.join(art.path, artifacts.MANIFEST), "w") as f:
        f.write('{"status": "compl')
    assert store.load("s") is None  # a rerun replaces it
    with pytest.raises(ArtifactError, match=r"stage 's' has an unreadable manifest .*_manifest.json \(JSONDecodeError"):
        store.require("s")


def test_parquet_readers_see_the_rows_and_not_the_quarantine(tmp_path):
    """Quarantine parts inside the stage folder were read as data by every
    Parquet dataset reader (pd.read_parquet returned good and quarantined rows mixed)."""
    import pandas as pd
    import pyarrow.dataset as ds
    store = ArtifactStore(str(tmp_path), "r1")
    q = [QuarantineRow("s", "bad_row", "why", "r9", "in.txt", 7, "raw")] * 2
    art = store.write("s", to_table(rows(0, 3), SCHEMA), q, {"fingerprint": "fp1"})
    assert pd.read_parquet(art.path).to_dict("records") == rows(0, 3)
    assert ds.dataset(art.path, format="parquet").to_table().num_rows == 3
    assert [r["reason"] for r in art.read_rows(quarantine=True)] == ["bad_row", "bad_row"]
    assert len(pd.read_parquet(artifacts.quarantine_dir(art.path))) == 2


def test_a_run_written_before_the_rename_keeps_its_quarantine_readable(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    art = store.write("s", to_table(rows(0, 1), SCHEMA), [QuarantineRow("s", "old_reason")], {"fingerprint": "f"})
    os.rename(os.path.join(art.path, "_quarantine"), os.path.join(art.path, "quarantine"))
    assert artifacts.quarantine_dir(art.path) == os.path.join(art.path, "quarantine")
    assert [r["reason"] for r in store.load("s").read_rows(quarantine=True)] == ["old_reason"]


def test_split_files_layout_names_splits_like_the_hub(tmp_path, monkeypatch):
    monkeypatch.setattr(artifacts, "PART_ROWS", 2)
    schema = pa.schema([("id", pa.string()), ("split", pa.string())])
    data = [{"id": f"p{i}", "split": "val" if i % 3 == 0 else "train"} for i in range(6)]
    store = ArtifactStore(str(tmp_path), "r1")
    art = store.write("e", to_table(data, schema), [], {"fingerprint": "f"},
                      split_files=("split", {"train": "train", "val": "validation"}))
    assert [f for f in art.manifest["files"] if f.startswith("data/")] == [
        "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
        "data/validation-00000-of-00001.parquet"]
    assert art.read_rows() == [r for r in data if r["split"] == "train"] + [r for r in data if r["split"] == "val"]
    with pytest.raises(ArtifactError, match=r"column 'split' holds \['test'\], which has no split file name"):
        store.write("e", to_table([{"id": "x", "split": "test"}], schema), [], {"fingerprint": "g"},
                    split_files=("split", {"train": "train"}))
    empty = store.write("e2", to_table([], schema), [], {"fingerprint": "h"}, split_files=("split", {"train": "train"}))
    assert empty.read_table().num_rows == 0 and empty.read_table().schema == schema


def test_content_hash_names_no_location_and_follows_the_bytes(tmp_path):
    import shutil
    store = ArtifactStore(str(tmp_path / "a"), "r1")
    art = store.write("s", to_table(rows(0, 3), SCHEMA), [QuarantineRow("s", "x")], {"fingerprint": "f"})
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    moved = ArtifactStore(str(tmp_path / "b"), "r1").load("s")
    assert moved.content_sha256 == art.content_sha256 == art.manifest["content_sha256"]
    assert artifacts.content_sha256(moved.path, moved.manifest) == art.content_sha256  # recomputed from files
    other = store.write("s", to_table(rows(0, 4), SCHEMA), [QuarantineRow("s", "x")], {"fingerprint": "f"})
    assert other.content_sha256 != art.content_sha256
    requarantined = store.write("s", to_table(rows(0, 4), SCHEMA), [], {"fingerprint": "f"})
    assert requarantined.content_sha256 == other.content_sha256  # downstream never reads the quarantine


def test_a_quarantine_part_written_before_the_kind_column_still_reads(tmp_path):
    """A sharded stage may keep an older shard's quarantine (no ``kind`` column) beside a new one."""
    store = ArtifactStore(str(tmp_path), "r1")
    art = store.write("s", to_table(rows(0, 1), SCHEMA), [QuarantineRow("s", "new", kind="request")], {"fingerprint": "f"})
    old = to_table([QuarantineRow("s", "old").__dict__], QUARANTINE_SCHEMA).drop_columns(["kind"])
    pq.write_table(old, os.path.join(art.path, "_quarantine", "part-00001.parquet"))
    assert [(r["reason"], r["kind"]) for r in art.read_rows(quarantine=True)] == [("new", "request"), ("old", None)]

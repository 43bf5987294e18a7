"""The recorder: counts built in one place, the manifest written once, last, with status and content hash."""
import json
import os

import pytest

from pipeline.core import recorder
from pipeline.core.records import QuarantineRow


def test_counts_are_built_from_the_rows_and_the_quarantine_by_kind():
    tally = recorder.QuarantineTally().add_rows([
        QuarantineRow("s", "too_short"), QuarantineRow("s", "too_short"),
        QuarantineRow("s", "not_json", kind="request"), QuarantineRow("s", "not_admissible", kind="demotion")])
    assert recorder.counts(10, 8, tally) == {
        "in": 10, "units_in": 10, "units_out": 8, "out": 8, "quarantined": 2, "quarantine_reasons": {"too_short": 2},
        "quarantine_kinds": {"demotion": 1, "request": 1, "unit": 2}}
    # skills: 5 memories in, 3 used, 2 quarantined; its rows are 7 skills
    assert recorder.counts(5, 7, tally, units_in=5, units_out=3)["units_out"] == 3
    with pytest.raises(recorder.CountMismatch, match=r"\[s\] units in 10 != out 9 \+ quarantined 2"):
        recorder.counts(10, 9, tally, where="s")
    assert recorder.counts(0, 0) == {"in": 0, "units_in": 0, "units_out": 0, "out": 0, "quarantined": 0,
                                     "quarantine_reasons": {}, "quarantine_kinds": {}}


def test_record_writes_the_manifest_last_with_status_files_and_content_hash(tmp_path):
    folder = str(tmp_path / "step")
    os.makedirs(os.path.join(folder, "_quarantine"))
    for name, text in (("a.txt", "A"), ("_quarantine/part-00000.parquet", "Q")):
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    m = recorder.record(folder, {"fingerprint": "fp", "counts": recorder.counts(1, 1), "counters": {"n": 1}},
                        ["a.txt", "_quarantine/part-00000.parquet"], name="done.json")
    with open(os.path.join(folder, "done.json"), encoding="utf-8") as f:
        assert json.load(f) == m
    assert (m["status"], m["fingerprint"], m["files"]) == ("complete", "fp", ["_quarantine/part-00000.parquet",
                                                                            "a.txt"])
    # the quarantine is no content; the counters are
    assert m["content_sha256"] == recorder.content_digest(
        [("a.txt", "559aead08264d5795d3909718cdd05abd49572e84fe55590eef31a88a08fdffd")], {"n": 1})
    again = recorder.record(folder, {"counters": {"n": 2}}, ["a.txt"])
    assert again["content_sha256"] != m["content_sha256"] and "fingerprint" not in again
    # a sharded stage hashes its shards' content hashes, in the order given, and no counters
    collected = recorder.record(folder, {"counters": {"n": 3}}, [], content=[("shard-00000", "h0"), ("x", "h1")])
    assert collected["content_sha256"] == recorder.content_digest([("shard-00000", "h0"), ("x", "h1")])

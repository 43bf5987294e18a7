"""Versioned bank store (pipeline/bank/store.py): content-hashed versions, parents, idempotent
registration, HEAD, restore, diff, and tamper detection - on the official ALFWorld bank."""
from __future__ import annotations

import json
import os

import pytest

from pipeline.bank import rows as skillbank
from pipeline.bank.store import BankError, BankStore, counts_of, diff
from tests.helpers.paths import FIXTURES

# SkillRL's official ALFWorld bank, copied with its SOURCE.md
ALFWORLD = os.path.join(FIXTURES, "skillrl-memory", "alfworld",
                        "claude_style_skills.json")


def official_rows() -> list[dict]:
    with open(ALFWORLD, encoding="utf-8") as f:
        return skillbank.from_skillrl_json(json.load(f), "alfworld")


def test_register_versions_with_parents_and_head(tmp_path):
    store = BankStore(str(tmp_path))
    assert (store.head(), store.versions(), store.history()) == (None, [], [])
    rows = official_rows()
    v1 = store.register(rows, run_id="r1", stage="skills", fingerprint="fp1")
    assert v1.version == skillbank.bank_version(rows)
    assert v1.record["parent"] is None and (v1.record["run_id"], v1.record["stage"]) == ("r1", "skills")
    assert v1.record["counts"] == {"general": 12, "task_specific": 32, "mistake": 11} == counts_of(rows)
    assert v1.record["envs"] == ["alfworld"] and store.head() == v1.version
    # the second bank drops one general skill: a new version whose parent is the first
    v2 = store.register(rows[1:], run_id="r2", stage="skills")
    assert v2.record["parent"] == v1.version and store.head() == v2.version
    assert store.versions() == [v1.version, v2.version]
    assert os.listdir(tmp_path / "banks") and sorted(os.listdir(tmp_path / "banks" / v2.version)) == ["bank.json"]
    # stored rows carry their version id
    assert {r["bank_version"] for r in store.get(v2.version).rows} == {v2.version}


def test_registering_the_same_bank_again_changes_nothing(tmp_path):
    store = BankStore(str(tmp_path))
    rows = official_rows()
    first = store.register(rows, run_id="r1", stage="skills")
    again = store.register(list(reversed(rows)), run_id="r9", stage="skills")  # order does not count
    assert again.record == first.record  # creator and timestamp of the first registration kept
    assert [e["event"] for e in store.history()] == ["create"]
    other = store.register(rows[:3], run_id="r2", stage="skills")
    back = store.register(rows, run_id="r3", stage="skills")  # an older bank produced again
    assert back.record["parent"] is None and store.head() == first.version
    assert [(e["event"], e["version"]) for e in store.history()] == [
        ("create", first.version), ("create", other.version), ("reuse", first.version)]


def test_restore_resolve_and_diff(tmp_path):
    store = BankStore(str(tmp_path))
    rows = official_rows()
    v1 = store.register(rows, run_id="r1", stage="skills")
    changed = dict(rows[0], principle="Check every receptacle once.", source_memory_ids=["mem-x"])
    moved = dict(rows[1], source_memory_ids=["mem-a", "mem-b"])
    v2 = store.register([changed, moved] + rows[2:], run_id="r2", stage="skills")
    assert store.resolve(v1.version[:12]) == v1.version and store.resolve(v1.version[5:14]) == v1.version
    assert store.resolve("HEAD") == v2.version
    with pytest.raises(BankError, match="no bank version matches 'bank-zzz'"):
        store.resolve("bank-zzz")
    restored = store.restore(v1.version[:10], note="v2 regressed")
    assert restored.version == v1.version == store.head()
    assert store.history()[-1] | {"at": "-"} == {"event": "restore", "version": v1.version, "previous": v2.version,
                                                 "note": "v2 regressed", "at": "-"}
    d = diff(store.get(v1.version), store.get(v2.version))
    assert [r["skill_id"] for r in d["added"]] == [skillbank.make_row(
        "general", "", skillbank.skill_content(changed))["skill_id"]]
    assert [r["title"] for r in d["removed"]] == ["Systematic Exploration"]
    assert d["sources_changed"] == [{"skill_id": rows[1]["skill_id"], "title": rows[1]["title"],
                                     "added_memory_ids": ["mem-a", "mem-b"], "removed_memory_ids": []}]


def test_an_edited_bank_file_is_refused(tmp_path):
    store = BankStore(str(tmp_path))
    v = store.register(official_rows(), run_id="r1", stage="skills")
    path = tmp_path / "banks" / v.version / "bank.json"
    data = json.loads(path.read_text())
    data["rows"][0]["title"] = "Tampered"
    path.write_text(json.dumps(data))
    with pytest.raises(BankError, match="content hash does not match its rows"):
        store.get(v.version)

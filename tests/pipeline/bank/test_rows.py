"""SkillRL skill-bank JSON: exact round trip of the three official banks, numbering, lineage."""
from __future__ import annotations

import json
import os

import pytest

from tests.helpers.paths import FIXTURES, REPO
from pipeline.core import lineage

from pipeline.bank import rows as skillbank

# the three official SkillRL banks, unchanged (SOURCE.md beside each)
ALFWORLD = os.path.join(FIXTURES, "skillrl-memory", "alfworld", "claude_style_skills.json")
SEARCH = os.path.join(FIXTURES, "formats", "real", "claude_style_skills_search.json")
WEBSHOP = os.path.join(FIXTURES, "skillrl-memory", "webshop", "claude_style_skills.json")


def _load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _official(entries: list[dict]) -> list[dict]:
    """Exported entries without our extra lineage key, for comparison with the official file."""
    return [{k: v for k, v in e.items() if k != "source_memory_ids"} for e in entries]


@pytest.mark.parametrize("path, env, key, n_general, per_cat, n_mistakes", [
    (ALFWORLD, "alfworld", "task_specific_skills", 12,
     {"pick_and_place": 5, "look_at_obj_in_light": 5, "clean": 6, "heat": 5, "cool": 5, "examine": 6}, 11),
    (WEBSHOP, "webshop", "task_specific_skills", 15,
     {"apparel": 6, "footwear": 5, "home_decor": 6, "electronics": 6, "accessories": 5, "beauty_health": 5,
      "other": 6}, 12),
    (SEARCH, "search", "query_type_skills", 10,
     {"direct_retrieval": 5, "multi_hop_reasoning": 5, "entity_attribute_lookup": 5, "comparison": 5}, 11),
])
def test_official_bank_round_trip(path, env, key, n_general, per_cat, n_mistakes):
    data = _load(path)
    rows = skillbank.from_skillrl_json(data, env)
    kinds = [r["kind"] for r in rows]
    assert kinds.count("general") == n_general and kinds.count("mistake") == n_mistakes
    assert {c: sum(r["category"] == c for r in rows) for c in per_cat} == per_cat
    out = skillbank.to_skillrl_json(rows)
    # the numbered ids of the official banks are consecutive, so renumbering reproduces them exactly
    assert _official(out["general_skills"]) == data["general_skills"]
    assert {c: _official(v) for c, v in out["task_specific_skills"].items()} == data[key]
    assert _official(out["common_mistakes"]) == data["common_mistakes"]
    assert "query_type_skills" not in out  # one category key for every env (D-K2)
    assert out["metadata"]["counts"] == {"general": n_general, "task_specific": per_cat, "mistakes": n_mistakes}
    # importing our own export gives the same rows back
    assert skillbank.from_skillrl_json(out, env) == rows


def test_rows_of_official_bank():
    rows = skillbank.from_skillrl_json(_load(ALFWORLD), "alfworld")
    first = rows[0]
    assert first["title"] == "Systematic Exploration" and first["category"] == "" and first["description"] == ""
    content = skillbank.skill_content(first)
    assert first["skill_id"] == lineage.skill_id("general", "", content) and first["skill_id"].startswith("gen-")
    loo = next(r for r in rows if r["category"] == "look_at_obj_in_light")
    assert (loo["kind"], loo["title"]) == ("task_specific", "Seek Lamp Surfaces First")
    err = next(r for r in rows if r["kind"] == "mistake")
    assert err["title"] == "" and err["how_to_avoid"].startswith("Maintain an exploration map")
    assert {r["bank_version"] for r in rows} == {skillbank.bank_version(rows)}
    assert all(r["source_memory_ids"] == [] for r in rows)  # the official bank has no lineage


def test_export_numbering_lineage_and_empty_categories():
    rows = [skillbank.make_row("general", "x", {"title": "A", "principle": "P", "when_to_apply": "W"},
                               ["mem-2", "mem-1", "mem-2"], ["traj-1"]),
            skillbank.make_row("task_specific", "look_at_obj_in_light", {"title": "L", "principle": "Q"}, ["mem-3"]),
            skillbank.make_row("mistake", "", {"description": "D", "why_it_happens": "Y", "how_to_avoid": "H"},
                               ["mem-1"], ["traj-1"])]
    assert rows[0]["category"] == "" and rows[0]["source_memory_ids"] == ["mem-1", "mem-2"]
    out = skillbank.to_skillrl_json(rows, metadata={"env": "alfworld"}, categories=["heat", "look_at_obj_in_light"])
    assert out["general_skills"] == [{"skill_id": "gen_001", "title": "A", "principle": "P", "when_to_apply": "W",
                                      "source_memory_ids": ["mem-1", "mem-2"]}]
    assert out["task_specific_skills"] == {"heat": [], "look_at_obj_in_light": [
        {"skill_id": "loo_001", "title": "L", "principle": "Q", "when_to_apply": "", "source_memory_ids": ["mem-3"]}]}
    assert out["common_mistakes"] == [{"mistake_id": "err_001", "description": "D", "why_it_happens": "Y",
                                       "how_to_avoid": "H", "source_memory_ids": ["mem-1"]}]
    assert out["metadata"]["lineage"]["gen_001"] == {"skill_id": rows[0]["skill_id"],
                                                     "source_memory_ids": ["mem-1", "mem-2"],
                                                     "source_trajectory_ids": ["traj-1"]}
    assert out["metadata"]["env"] == "alfworld"
    back = skillbank.from_skillrl_json(out, "alfworld")
    assert [r["source_trajectory_ids"] for r in back] == [["traj-1"], [], ["traj-1"]]
    with pytest.raises(ValueError, match="skill bank is for env 'alfworld', not 'webshop'"):
        skillbank.from_skillrl_json(out, "webshop")


def test_bank_version_is_order_independent_and_content_sensitive():
    rows = skillbank.from_skillrl_json(_load(ALFWORLD), "alfworld")
    assert skillbank.bank_version(rows) == skillbank.bank_version(list(reversed(rows)))
    changed = [dict(rows[0], principle=rows[0]["principle"] + "!")] + rows[1:]
    assert skillbank.bank_version(changed) != skillbank.bank_version(rows)


def test_category_prefix_and_bad_input():
    assert [skillbank.category_prefix(c) for c in ("look_at_obj_in_light", "beauty_health", "Multi-Hop")] == \
        ["loo", "bea", "mul"]
    with pytest.raises(ValueError, match="expected an object with a 'general_skills' list"):
        skillbank.from_skillrl_json({"skills": []}, "alfworld")
    with pytest.raises(ValueError, match=r"general_skills\[1\]: expected an object, got str"):
        skillbank.from_skillrl_json({"general_skills": [{"title": "T"}, "junk"]}, "alfworld")
    with pytest.raises(ValueError, match=r"common_mistakes\[0\]: fields \['description'\] must be strings"):
        skillbank.from_skillrl_json({"general_skills": [], "common_mistakes": [{"description": 3}]}, "alfworld")
    with pytest.raises(ValueError, match="unknown kind 'tip'"):
        skillbank.to_skillrl_json([dict(skillbank.make_row("general", "", {"title": "T"}), kind="tip")])

"""SkillRL memory JSON (both nestings) and skill-bank files, on real records (see
tests/fixtures/formats/real/SOURCE.md)."""
import json
import os

from pipeline.formats.discover import detect_format, read_file
from pipeline.core.records import QuarantineRow
from tests.helpers.paths import FIXTURES

REAL = os.path.join(FIXTURES, "formats", "real")


def test_alfworld_nested_success_and_failure():
    path = os.path.join(REAL, "memory_alfworld.json")
    assert detect_format(path, open(path, "rb").read()) == "skillrl_memory_json"
    t, q = list(read_file(path))
    assert (t.env, t.env_instance, t.task, t.category, t.outcome, t.reward) == (
        "alfworld", "env003", "look at alarmclock under the desklamp.", "look_at_obj_in_light", "success", 10.0)
    # the step_index -1 "start_episode" entry is the reset state
    assert t.steps[0].action is None and t.steps[0].observation.startswith("Agent is in a bedroom with several pieces")
    assert [s.action for s in t.steps[1:]] == ["go to desk", "use desklamp", "take alarmclock from desk"]
    assert t.steps[2].thought.startswith("Activate the desklamp so that the area around and under it")
    assert t.steps[-1].done and t.steps[-1].reward == 10.0 and t.source_line == 2
    meta = json.loads(t.metadata)
    assert meta["memory_id"] == "mem_alfworld_2aa50d60" and meta["abstracted"] is True
    assert meta["step_indices"] == [-1, 0, 1, 6] and meta["planning_pattern"].startswith("Search [Location]")
    assert isinstance(q, QuarantineRow) and (q.reason, q.item_id) == ("memory_without_steps", "mem_alfworld_8806791b")
    assert '"mistakes_to_avoid"' in q.raw and q.line > t.source_line


def test_search_flat_list_and_wrapped_guidelines():
    t, fail, empty = list(read_file(os.path.join(REAL, "memory_search.json")))
    assert (t.env, t.task, t.category, t.reward) == ("search", "who got the first nobel prize in physics?",
                                                       "direct_retrieval", 1.0)
    assert [s.action for s in t.steps] == [None, "Search for [Nobel Prize in Physics] first recipient"]
    meta = json.loads(t.metadata)
    # D-M4: the wrapped {"strategic_guidelines": {...}} shape is unwrapped
    assert meta["planning_pattern"] == "Decompose Question -> Search [Entity] -> Synthesize"
    assert meta["data_source"] == "nq" and meta["origin_env_id"] == "trajectories_0.txt"
    assert fail.reason == "memory_without_steps" and "failure memory" in fail.detail
    assert empty.reason == "memory_without_steps" and "success memory has no refined steps" in empty.detail


def test_webshop_nested_success():
    (t,) = list(read_file(os.path.join(REAL, "memory_webshop.json")))
    assert (t.env, t.category, t.env_instance) == ("webshop", "apparel", "env001")
    assert t.steps[1].action.startswith("search[men's dress shirts cotton spandex classic fit short sleeves")
    assert [s.action for s in t.steps[2:]] == ["click[apparel_item]", "click[[Size_Constraint]]",
                                               "click[[Color_Constraint]]", "click[buy now]"]


def test_skill_bank_is_recognised_and_quarantined():
    path = os.path.join(REAL, "claude_style_skills_search.json")
    assert detect_format(path, open(path, "rb").read(65536)) == "skillrl_bank_json"
    (q,) = list(read_file(path))
    assert (q.reason, q.line) == ("skill_bank_not_trajectories", 1)
    assert "pass it as a skill bank" in q.detail and "query_type_skills" in q.detail

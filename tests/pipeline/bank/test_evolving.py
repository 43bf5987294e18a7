"""The evolving skill bank (pipeline.bank.evolving): the updater prompt from its template file,
updates applied as new versions, failed answers quarantined, no LLM needed."""
import json

from pipeline.bank import rows as skillbank
from pipeline.bank.evolving import PROMPT_SHA, SkillBank, apply_updates, update_request
from pipeline.llm.types import JSONResult

STATIC = [skillbank.make_row("general", "", {"title": "Look First", "principle": "Read the room.", "when_to_apply": ""}),
          skillbank.make_row("task_specific", "cooking", {"title": "Read Recipe", "principle": "Read it first."}),
          skillbank.make_row("mistake", "", {"description": "Looping.", "how_to_avoid": "Try another action."})]


def test_the_template_file_renders_the_same_request_as_the_inline_prompt():
    req = update_request(SkillBank(list(STATIC)), "cooking", 0.25, 0.4, "- Task: cook\n  1. look -> a kitchen", 2)
    # the hash of the texts when they were inline: rows stamped before and after the move agree
    assert PROMPT_SHA == "8cc1887d732abf9e51d437cf75ae47c1011c29b2d5bf0035ed9f3ff41a1e90b2"
    assert req.key == "cooking" and req.schema["maxItems"] == 2 and req.schema_name == "skills"
    assert req.messages[0]["content"].startswith("You improve the skill library of an agent")
    assert req.messages[1]["content"] == (
        "Environment: textworld. Task category: cooking.\n"
        "The agent's success rate in this category is 25% (below the target 40%).\n\n"
        "Failed episodes (task, then the last steps as action -> observation):\n"
        "- Task: cook\n  1. look -> a kitchen\n\n"
        "Skill titles already in the library (do not repeat them):\n- Look First\n- Looping.\n- Read Recipe\n\n"
        "Write 1 to 2 NEW skills for the category \"cooking\". Each skill is an object with\n"
        "\"title\" (3-5 words, Title Case), \"principle\" (1-2 sentences: what to do and why) and\n"
        "\"when_to_apply\" (1 sentence). Reply with a JSON array of these objects only.")
    assert req.check([{"title": "read recipe"}]) == "the title 'read recipe' already exists: write a different skill"
    assert req.check([{"title": "Taste Food"}]) is None


def test_updates_are_new_versions_placed_after_static_skills_and_capped():
    bank = SkillBank(list(STATIC))
    skill = {"title": "Taste Food", "principle": "Taste before serving.", "when_to_apply": "Cooking."}
    up = apply_updates(bank, [JSONResult("cooking", True, [skill, dict(skill, title="Slice First")])],
                       {"cooking": ["traj-1"]}, "m", max_new=1, cap=6, step=3)
    assert up.changed and up.bank is not bank and bank.rows == STATIC and up.bank.version != bank.version
    assert [r["title"] or r["description"] for r in up.bank.rows] == ["Look First", "Read Recipe", "Taste Food",
                                                                       "Looping."]
    new = up.bank.rows[2]
    assert (new["source_trajectory_ids"], new["prompt_sha"], new["model"]) == (["traj-1"], PROMPT_SHA, "m")
    assert up.added == up.bank.dynamic == [new["skill_id"]]
    assert {r["bank_version"] for r in up.bank.rows} == {up.bank.version}
    capped = apply_updates(up.bank, [JSONResult("cooking", True, [dict(skill, title="Slice First")])],
                           {"cooking": ["traj-2"]}, "m", max_new=1, cap=1, step=4)
    assert capped.evicted == [new["skill_id"]] and capped.added == capped.bank.dynamic


def test_a_failed_answer_changes_nothing_and_is_quarantined(tmp_path):
    bank = SkillBank(list(STATIC))
    up = apply_updates(bank, [JSONResult("cooking", False, raw="[oops", error="schema_invalid", detail="bad")],
                       {"cooking": ["t"]}, "m", 3, 6, step=7)
    assert not up.changed and up.bank is bank and up.added == []
    [q] = up.quarantine
    assert (q["reason"], q["item_id"], q["raw"]) == ("schema_invalid", "cooking", "[oops")
    assert "at step 7 failed: bad" in q["detail"]
    path = bank.save(str(tmp_path / "b.json"))
    back = SkillBank.load(path, "textworld")
    assert back.version == bank.version and back.history[0]["event"] == "import"
    assert json.load(open(path))["metadata"]["env"] == "textworld"

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


def test_an_evolved_skill_meets_the_rules_of_its_env_and_the_games_order():
    """The updater has no successful episodes to judge an order against: a look-in-light skill
    that uses the lamp before the object is taken breaks ALFWorld's own order; a WebShop skill
    that names a drop-down breaks WebShop's pages. (Skills of the 1.5B teacher, quoted.)"""
    light = {"title": "Use Light Source", "principle": "When the goal asks for a light, use the light source first "
             "before moving to the target.", "when_to_apply": "While the object has not been found yet."}
    carry = {"title": "Carry Object To Lamp", "principle": "Take the object first, then go to the desklamp and "
             "turn it on while holding it.", "when_to_apply": "The goal asks to look at an object under a lamp."}
    up = apply_updates(SkillBank(list(STATIC), env="alfworld"),
                       [JSONResult("look_at_obj_in_light", True, [light, carry])],
                       {"look_at_obj_in_light": ["traj-1"]}, "m", max_new=2, cap=6, step=5)
    assert [r["title"] for r in up.bank.rows if r["skill_id"] in up.added] == ["Carry Object To Lamp"]
    [q] = up.quarantine
    assert (q["reason"], json.loads(q["raw"])["title"]) == ("contradicts_success", "Use Light Source")
    assert q["detail"].endswith("prescribes 'use lamp' first, but the game's rules order a look_at_obj_in_light "
                                "task take -> use")

    price = {"title": "Filter by Price", "principle": "After searching for products, select the price range from the "
             "drop-down menu to narrow down your results.", "when_to_apply": "After finding products but before "
             "making a purchase."}
    req = update_request(SkillBank(list(STATIC), env="webshop"), "beauty_health", 0.0, 0.4, "- Task: buy cream", 1)
    assert req.check([price]).startswith("missing_control: skills[0].principle tells the agent to use drop-down, menu")
    # the same words in a TextWorld bank name no WebShop page
    assert update_request(SkillBank(list(STATIC)), "cooking", 0.0, 0.4, "- Task: cook", 1).check([price]) is None


def test_a_repeated_title_drops_that_skill_and_keeps_the_rest():
    """The updater's answer is judged skill by skill: a bank title copied (or one repeated inside
    the answer) is quarantined as ``duplicate_title``; the new skills beside it are added. Only an
    answer with nothing new is sent back for repair."""
    bank = SkillBank(list(STATIC))
    copied = {"title": "Read Recipe", "principle": "Read the recipe before you cook.", "when_to_apply": "Cooking."}
    fresh = {"title": "Taste Food", "principle": "Taste the dish before serving it.", "when_to_apply": "Cooking."}
    req = update_request(bank, "cooking", 0.25, 0.4, "- Task: cook", 3)
    assert req.check([copied, fresh]) is None
    assert req.check([copied, dict(copied, title="LOOPING.")]) == \
        "the title 'Read Recipe' already exists: write a different skill"
    up = apply_updates(bank, [JSONResult("cooking", True, [copied, fresh, dict(fresh, principle="Taste it twice.")])],
                       {"cooking": ["traj-1"]}, "m", max_new=3, cap=6, step=2)
    assert [r["title"] for r in up.bank.rows if r["skill_id"] in up.added] == ["Taste Food"]
    assert [(q["reason"], json.loads(q["raw"])["title"]) for q in up.quarantine] == \
        [("duplicate_title", "Read Recipe"), ("duplicate_title", "Taste Food")]
    assert "at step 2: the title 'Read Recipe' already exists" in up.quarantine[0]["detail"]


def test_a_receptacle_to_heat_is_caught_in_the_title_and_the_condition():
    """The teacher's "Heat Fridge" and "Heat Stoveburner" told a receptacle to be heated in the
    title and the when-to-apply only (the principle said "heat it"): every field of an ALFWorld
    item is read for ``false_game_fact``; "Heat Mug" beside them passes."""
    from pipeline.bank.evolving import item_judge
    judge = item_judge("heat", env="alfworld")
    fridge = {"title": "Heat Fridge", "principle": "When the observation says the fridge must be heated, heat it in "
              "the microwave.", "when_to_apply": "When the agent is instructed to heat the fridge."}
    mug = dict(fridge, title="Heat Mug", principle=fridge["principle"].replace("fridge", "mug"),
               when_to_apply="When the task says to heat the mug.")
    burner = dict(mug, title="Warm Food Quickly", when_to_apply="When the agent is instructed to heat the stoveburner.")
    verdicts = judge.judge([fridge, mug, burner])
    assert sorted({v.detail.split(" ", 1)[0] for v in verdicts[0] if v.reason == "false_game_fact"}) == \
        ["skills[0].title", "skills[0].when_to_apply"]
    assert [v.reason for v in verdicts[1]] == []
    assert [v.detail.split(" ", 1)[0] for v in verdicts[2] if v.reason == "false_game_fact"] == \
        ["skills[2].when_to_apply"]

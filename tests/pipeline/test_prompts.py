"""The shared prompt renderer: TV5 (skills), TV6/TV12 (step prompts, ours), synthetic done."""
import pytest

from pipeline.core.config import DistillConfig, PromptConfig
from pipeline.prompts import (needs_synthetic_done, render_admissible, render_skills_block,
                              render_step_messages, render_target, select_skills,
                              synthetic_done_admissible)
from pipeline.core.records import Step, Trajectory
from tests.helpers.prompt_data import ALF_HEADER, ALF_TURN, tv6


def skill(sid, kind, title="", principle="", when="", category="", desc="", why="", how=""):
    return {"skill_id": sid, "env": "", "kind": kind, "category": category, "title": title, "principle": principle,
            "when_to_apply": when, "description": desc, "why_it_happens": why, "how_to_avoid": how}


# TV5's bank as rows: one empty general skill, one empty mistake.
TV5_BANK = [
    skill("gen_001", "general", "Explore Once", "Visit each location once...", "Always."),
    skill("dyn_001", "general", "Check Lamp", "Turn on the lamp", "Look tasks."),
    skill("gen_002", "general"),
    skill("loo_001", "task_specific", "Lamp First", "Find the desklamp first.", "At start.",
          category="look_at_obj_in_light"),
    skill("err_001", "mistake", desc="Looping.", why="No memory.", how="Track visits."),
    skill("err_002", "mistake", why="x", how="y"),
    skill("err_003", "mistake", desc="Wrong object", why="z"),
]


def test_tv5_selection_drops_empty_and_keeps_bank_order():
    cfg = PromptConfig(top_k_general=2)
    got = select_skills(TV5_BANK, "alfworld", "look_at_obj_in_light", cfg)
    # dyn_001 is not moved first (D-R2); gen_002 and err_002 are empty (D-K4).
    assert [s["skill_id"] for s in got] == ["gen_001", "dyn_001", "loo_001", "err_001", "err_003"]


def test_tv5_block_our_format_exact():
    got = render_skills_block(select_skills(TV5_BANK, "alfworld", "look_at_obj_in_light", PromptConfig(top_k_general=2)))
    assert got == (
        "### General Principles\n"
        "- **Explore Once**: Visit each location once...\n  _Apply when: Always._\n"
        "- **Check Lamp**: Turn on the lamp\n  _Apply when: Look tasks._\n\n"
        "### Look At Object In Light Skills\n"
        "- **Lamp First**: Find the desklamp first.\n  _Apply when: At start._\n\n"
        "### Mistakes to Avoid\n"
        "- **Don't**: Looping.\n  _Why it happens: No memory._\n  **Instead**: Track visits.\n"
        "- **Don't**: Wrong object\n  _Why it happens: z_")


def test_selection_caps_and_category_rules():
    cfg = PromptConfig(top_k_general=1, max_mistakes=1)
    got = select_skills(TV5_BANK, "alfworld", "heat", cfg)
    assert [s["skill_id"] for s in got] == ["gen_001", "err_001"]  # no heat skills: section omitted
    assert "Skills\n" not in render_skills_block(got)
    assert select_skills(TV5_BANK, "alfworld", "heat", PromptConfig(skills=False)) == []
    assert render_skills_block([]) == ""
    # An official bank has no pick_two bucket: its pick_and_place skills are used instead.
    bank = [skill("pic_001", "task_specific", "Grab", "Hold it.", category="pick_and_place")]
    assert [s["skill_id"] for s in select_skills(bank, "alfworld", "pick_two_obj_and_place", cfg)] == ["pic_001"]


def test_tv6_pair1_exact():
    msgs = render_step_messages(tv6(), 1, "", PromptConfig())
    assert msgs == [
        {"role": "system", "content": f"{ALF_HEADER} Your task is to: put a plate in box 1."},
        {"role": "user", "content": (
            "## Current Progress\n\nYour current observation is: You are in the middle of a room. You see a "
            "countertop 1.\nYour admissible actions of the current situation are: ['go to countertop 1'\n"
            " 'inventory'\n 'look'].\n\n" + ALF_TURN)}]


def test_tv6_pair4_synthetic_done_exact():
    traj = tv6()
    adm = synthetic_done_admissible(traj, 0)
    assert adm == ["done", "look", "examine box 1", "inventory", "go to countertop 1"]  # pinned sample
    user = render_step_messages(traj, 4, "", PromptConfig(history_length=2), adm)[1]["content"]
    # Absolute step numbers (ours): observations 2 and 3, not 1 and 2.
    assert user == (
        "## Current Progress\n\nPrior to this step, you have already taken 3 step(s). Below are the most "
        "recent 2 observations and the corresponding actions you took: [Observation 2: 'You arrive at "
        "countertop 1. You see a plate 1.', Action 2: 'take plate 1 from countertop 1']\n[Observation 3: "
        "'You pick up the plate 1 from the countertop 1.', Action 3: 'move plate 1 to box 1']\n"
        "You are now at step 4 and your current observation is: You move the plate 1 to the box 1.\n"
        "Your admissible actions of the current situation are: ['done'\n 'look'\n "
        "'examine box 1'\n 'inventory'\n 'go to countertop 1'].\n\n" + ALF_TURN)


def test_skills_block_at_first_step_and_empty_admissible_line_omitted():
    traj = tv6()
    traj.steps[0].admissible_actions = []
    msgs = render_step_messages(traj, 1, "### General Principles\n- **A**: B", PromptConfig())
    assert msgs[0]["content"].endswith("\n\n## Retrieved Relevant Experience\n\n### General Principles\n- **A**: B")
    assert "admissible" not in msgs[1]["content"].split("\n\n")[1]


def test_tv12_history_length_zero_uses_no_history_template():
    user = render_step_messages(tv6(), 3, "", PromptConfig(history_length=0))[1]["content"]
    assert user.startswith("## Current Progress\n\nYour current observation is: You pick up the plate 1 from "
                           "the countertop 1.\nYour admissible")
    assert "Prior to this step" not in user


def test_k_out_of_range_raises():
    with pytest.raises(ValueError, match="k=5 out of range 1..4"):
        render_step_messages(tv6(), 5, "", PromptConfig())


def test_webshop_admissible_and_targets():
    assert render_admissible(["search[<your query>]", "click[b1]"], "webshop") == (
        "Your admissible actions of the current situation are: [\n'search[<your query>]',\n'click[b1]',\n].")
    assert render_admissible(["help"], "alfworld") == ""
    assert render_target("T", "click[b1]", "webshop") == "<think>T</think>\n<action>click[b1]</action>"
    assert render_target("T", "<answer>Paris</answer>", "search") == "<think>T</think>\n<answer>Paris</answer>"


def test_search_history_shows_information():
    steps = [Step(0, None, ""), Step(1, "<search>q1</search>", "Doc 1: x"), Step(2, "<answer>x</answer>", "", done=True)]
    traj = Trajectory("traj-s", "search", "nq/1", "what is x?", "direct_retrieval", "success", 1.0, steps, "s.txt", "t", 0)
    msgs = render_step_messages(traj, 2, "", PromptConfig(history_length=2))
    assert msgs[0]["content"].endswith(" Your question: what is x?")
    assert "Step 1: <search>q1</search> <information>Doc 1: x</information>\nYou are now at step 2." in msgs[1]["content"]


def test_synthetic_done_invariants_and_sizes():
    base = tv6()
    real = set(base.steps[-1].admissible_actions)
    for seed in range(5):
        adm = synthetic_done_admissible(tv6(f"traj-{seed}"), seed)
        assert adm.count("done") == 1 and len(adm) <= 10 and set(adm) - {"done"} <= real
    base.steps[-1].admissible_actions = [f"a{i}" for i in range(12)] + ["done"]
    big = synthetic_done_admissible(base, 0)
    assert len(big) == 10 and big.count("done") == 1 and len(set(big)) == 10
    assert synthetic_done_admissible(base, 0) == big  # per-trajectory seed: reproducible


def test_synthetic_done_preconditions():
    cfg = DistillConfig()
    assert needs_synthetic_done(tv6(), cfg)
    assert not needs_synthetic_done(tv6(), DistillConfig(synthetic_done=False))
    failed = tv6()
    failed.outcome = "failure"
    assert not needs_synthetic_done(failed, cfg)
    with pytest.raises(ValueError, match="synthetic done needs a successful trajectory"):
        synthetic_done_admissible(failed, 0)
    bare = tv6()
    bare.steps[-1].admissible_actions = []
    assert not needs_synthetic_done(bare, cfg)


def test_category_fallbacks_for_official_banks_and_textworld():
    from pipeline.bank import rows as skillbank
    from pipeline.prompts import select_skills
    bank = [dict(skillbank.make_row("task_specific", "pick_and_place", {"title": "Carry", "principle": "Take it there."}),
                 env="textworld"),
            dict(skillbank.make_row("task_specific", "examine", {"title": "Lamp", "principle": "Use the lamp."}),
                 env="textworld")]
    for category, title in (("put_away_objects", "Carry"), ("pick_two_obj_and_place", "Carry"),
                            ("look_at_obj_in_light", "Lamp")):
        assert [r["title"] for r in select_skills(bank, "textworld", category, PromptConfig())] == [title]
    assert select_skills(bank, "textworld", "cooking", PromptConfig()) == []

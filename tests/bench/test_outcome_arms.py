"""The outcome experiment's five arms differ only where they should (config, distill prompt, SFT
prompt and target on one state), get the SFT seeds they should, and the skill-use figures count
thinks by their wording."""
from types import SimpleNamespace

import pytest

from bench import outcome_arms as oa
from pipeline import quality
from pipeline.core.config import PipelineConfig, to_dict
from pipeline.core.records import Step, Trajectory
from pipeline.prompts import EXPERIENCE_HEADING
from pipeline.stages import distill

BANK = [
    {"skill_id": "g1", "env": "textworld", "kind": "general", "category": "", "title": "Survey before moving",
     "principle": "Read every exit the room lists before choosing a direction", "when_to_apply": ""},
    {"skill_id": "c1", "env": "textworld", "kind": "task_specific", "category": "find_coin",
     "title": "Sweep rooms systematically", "principle": "Visit each unexplored neighbour once, then backtrack",
     "when_to_apply": "the coin is not in sight"},
    {"skill_id": "x1", "env": "textworld", "kind": "task_specific", "category": "cooking",
     "title": "Read the recipe", "principle": "Examine the cookbook before gathering ingredients",
     "when_to_apply": ""},
]


def _traj() -> Trajectory:
    steps = [Step(0, None, "You are in the kitchen. To the east is a hallway.", ["look around", "move east"]),
             Step(1, "move east", "You are in the hallway. You see a coin.", ["take coin", "move west"]),
             Step(2, "take coin", "You take the coin. You won!", [], 10.0, True)]
    return Trajectory("t1", "textworld", "coin-train-3", "find the coin", "find_coin", "success", 10.0, steps,
                      "traces/t1.txt", "skillrl_txt", 0)


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _diff(a, b):
    fa, fb = _flat(to_dict(a)), _flat(to_dict(b))
    return {k: (fa[k], fb[k]) for k in fa if fa[k] != fb[k]}


def test_five_arms_with_distinct_runs_and_unknown_arm_error():
    assert [a.name for a in oa.ARMS] == ["base", "actions", "thinks", "skills", "gated"]
    assert [a.run_id("r") for a in oa.ARMS] == ["r", "r-actions", "r-noskills", "r", "r-gated"]
    assert [a.trained for a in oa.ARMS] == [False, True, True, True, True]
    assert oa.DECIDING == ("actions", "skills", "gated")
    with pytest.raises(ValueError, match="unknown arm 'skill'; known: base, actions, thinks, skills, gated"):
        oa.arm("skill")


def test_seed_plan_of_each_arm():
    assert {a.name: a.seeds(3) for a in oa.ARMS} == {"base": [], "actions": [0, 1, 2], "thinks": [0],
                                                     "skills": [0, 1, 2], "gated": [0, 1, 2]}
    assert oa.arm("gated").seeds(1) == [0] and oa.arm("thinks").seeds(5) == [0]


def test_own_stages_gated_reruns_the_bank_the_others_share_it():
    assert oa.arm("actions").own_stages == oa.arm("thinks").own_stages == (
        "distill", "build_pairs", "usefulness", "export")
    assert oa.arm("gated").own_stages == ("skills", "distill", "build_pairs", "usefulness", "export")
    assert oa.arm("skills").own_stages[0] == "parse" and oa.arm("base").own_stages == ()


def test_arm_configs_differ_only_in_think_skills_and_gate_switches():
    base = PipelineConfig()
    base.llm.max_tokens, base.llm.retry_failed = 400, False  # the run's own settings are kept in every arm
    base.usefulness.policy = "quarantine"  # the default outside the test suite: every arm sets its own
    cfgs = {a.name: oa.arm_config(a, base) for a in oa.ARMS}
    assert base.distill.reasoning == "llm" and base.prompt.skills  # the base config is not changed
    assert base.usefulness.policy == "quarantine"
    skills = cfgs["skills"]
    assert skills.usefulness.policy == "off" and cfgs["gated"].usefulness.policy == "quarantine"
    assert _diff(cfgs["base"], skills) == {}
    assert _diff(cfgs["actions"], skills) == {"distill.reasoning": ("none", "llm"),
                                              "build_pairs.empty_think": ("flag", "quarantine")}
    assert _diff(cfgs["thinks"], skills) == {"prompt.skills": (False, True)}
    assert _diff(cfgs["gated"], skills) == {"usefulness.policy": ("quarantine", "off")}
    assert all(c.llm.max_tokens == 400 and c.llm.retry_failed is False for c in cfgs.values())


def _distill_user(a):
    cfg = oa.arm_config(a)
    run = SimpleNamespace(ctx=SimpleNamespace(config=cfg), tally=quality.Tally(cfg.quality.flag_rules))
    job = distill.episode_job(_traj(), run, BANK)
    return job, [m["content"] for r in job.requests for m in r.messages]


def test_distill_prompts_differ_only_in_the_skills_block():
    """The real distill job of one trajectory per arm: the thinks arm's prompt reads '(none)'
    where the skills arm shows the bank; the actions arm asks nothing and gets empty thinks."""
    job_s, skills = _distill_user(oa.arm("skills"))
    job_t, thinks = _distill_user(oa.arm("thinks"))
    job_a, actions = _distill_user(oa.arm("actions"))
    assert job_s.item.skill_ids == ["g1", "c1"] and job_t.item.skill_ids == []
    assert len(skills) == len(thinks) == 2 and skills[0] == thinks[0]  # same system message
    assert "Sweep rooms systematically" in skills[1] and "Survey before moving" in skills[1]
    assert "Read the recipe" not in skills[1]  # another category's skill
    from pipeline.prompts import render_skills_block
    shown = render_skills_block(BANK[:2])
    assert shown in skills[1] and skills[1].replace(shown, "(none)") == thinks[1]
    assert actions == [] and job_a.item.given == {0: "", 1: ""} and job_a.item.given_by == "none"
    assert _distill_user(oa.arm("gated"))[1] == skills  # the gate acts on the bank, not on distill's prompt


def test_sft_prompts_and_targets_differ_only_in_think_and_skills_block():
    t = _traj()
    got = {a.name: oa.sft_prompt(a, t, 2, BANK, "The coin is here, so taking it ends the task.") for a in oa.ARMS}
    skills = got["skills"]["messages"]
    assert got["base"]["messages"] == skills and got["actions"]["messages"] == skills
    assert got["gated"] == got["skills"]  # on the same bank: the gate changes the bank, not the prompt
    thinks = got["thinks"]["messages"]
    assert thinks[1] == skills[1]  # the step prompt (history, observation, admissible list)
    assert EXPERIENCE_HEADING not in thinks[0]["content"]
    from pipeline.prompts import render_skills_block
    block = render_skills_block(BANK[:2])
    assert skills[0]["content"] == thinks[0]["content"] + f"\n\n{EXPERIENCE_HEADING}\n\n" + block
    assert "You see a coin." in skills[1]["content"] and "'take coin'" in skills[1]["content"]
    assert got["base"]["target"] is None
    assert got["actions"]["target"] == "<think></think>\n<action>take coin</action>"
    assert got["thinks"]["target"] == got["skills"]["target"] == (
        "<think>The coin is here, so taking it ends the task.</think>\n<action>take coin</action>")


def test_skill_use_counts_bank_wording_beyond_the_context():
    steps = [{"think": "I should sweep each unexplored neighbour before going back.", "category": "find_coin",
              "context": "find the coin move east"},
             # shares only 'coin' and 'east', which the context already has
             {"think": "The coin must be east, so I move east.", "category": "find_coin",
              "context": "find the coin move east"},
             {"think": "", "category": "find_coin", "context": "find the coin"},
             # cooking's skill is not shown for find_coin: wording of another category does not count
             {"think": "Examine the cookbook recipe first.", "category": "find_coin", "context": "find the coin"}]
    assert oa.skill_use(steps, BANK, "textworld") == {"steps": 4, "with_think": 3, "using": 1, "rate": 0.3333}
    assert oa.skill_use(steps[2:3], BANK, "textworld")["rate"] is None
    # the first think shares three words with the find_coin skill: sweep, unexplored, neighbour
    assert oa.skill_use(steps, BANK, "textworld", min_shared=3)["using"] == 1
    assert oa.skill_use(steps, BANK, "textworld", min_shared=4)["using"] == 0
    assert oa.think_of("<think> sweep rooms </think>\n<action>move east</action>") == "sweep rooms"
    assert oa.think_of("move east") == ""


def test_pair_steps_use_the_observation_of_the_pairs_step():
    t = _traj()
    pairs = [{"trajectory_id": "t1", "step_index": 2, "think": "x", "category": "find_coin", "action": "take coin"}]
    assert oa.pair_steps(pairs, {"t1": t}) == [
        {"think": "x", "category": "find_coin", "context": "find the coin You are in the hallway. You see a coin. "
                                                            "take coin"}]


def test_where_skills_used_splits_success_by_citation():
    cite = "<think>Sweep each unexplored neighbour systematically.</think><action>move east</action>"
    plain = "<think>Go east.</think><action>move east</action>"
    eps = [{"task": "find the coin", "category": "find_coin", "won": True, "outputs": [cite, plain],
            "actions": ["move east", "take coin"]},
           {"task": "find the coin", "category": "find_coin", "won": True, "outputs": [plain],
            "actions": ["move east"]},
           {"task": "find the coin", "category": "find_coin", "won": False, "outputs": [plain, "garbage"],
            "actions": ["move east", ""]}]
    assert oa.where_skills_used(eps, BANK, "textworld") == {
        "steps": 5, "citing_steps": 1, "step_rate": 0.2, "episodes_citing": 1, "wins_citing": 1,
        "success_citing": 1.0, "episodes_not_citing": 2, "wins_not_citing": 1, "success_not_citing": 0.5}
    assert oa.where_skills_used([], BANK, "textworld")["step_rate"] is None

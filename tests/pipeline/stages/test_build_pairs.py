"""Stage validate through runner.run_stage: TV6 ("ours") and one case per rule, exact reasons."""
import json

import pytest

from pipeline.core.config import BuildPairsConfig
from pipeline.core.records import Step, Trajectory
from pipeline.stages.export import dataset_card
from pipeline.stages.build_pairs import think_words
from tests.helpers.build_pairs_data import SKILL, distilled, reasons, run_validate
from tests.helpers.prompt_data import ALF_HEADER, ALF_TURN, tv6


def one_step(env="alfworld", action="go to countertop 1", adm=("go to countertop 1", "look"), obs="You see a room."):
    steps = [Step(0, None, obs, list(adm), line=3), Step(1, action, "ok", [], 1.0, True, line=7)]
    return Trajectory(f"traj-{env}", env, "inst-1", "find x.", "other", "success", 1.0, steps, "src.txt", "fmt", 0, 1)


def test_tv6_ours(tmp_path):
    traj = tv6()
    rows, q, manifest = run_validate(tmp_path, [traj], [distilled(traj, {0: "T1", 1: "T2", 2: "T3", 3: "T4"}, True)])
    assert [r["step_index"] for r in rows] == [1, 2, 4]
    # Pair 3's target "move plate 1 to box 1" is not in [go to box 1, look, done] (TV6 ours).
    assert reasons(q) == ["not_admissible"] and q[0]["line"] == 11 and q[0]["raw"].endswith(
        "<action>move plate 1 to box 1</action>")
    first, last = rows[0], rows[2]
    assert first["instruction"] == (
        f"{ALF_HEADER} Your task is to: put a plate in box 1.\n\n## Current Progress\n\nYour current "
        "observation is: You are in the middle of a room. You see a countertop 1.\nYour admissible actions "
        "of the current situation are: ['go to countertop 1'\n 'inventory'\n 'look'].\n\n" + ALF_TURN)
    assert first["output"] == "<think>T1</think>\n<action>go to countertop 1</action>"
    assert first["step_id"] == "traj-tv6/s1" and first["source_line"] == 5 and first["flags"] == []
    assert [m["role"] for m in first["messages"]] == ["system", "user", "assistant"]
    assert last["synthetic"] and last["action"] == "done" and last["source_line"] == 11
    assert last["output"] == "<think>T4</think>\n<action>done</action>"
    assert "[Observation 2: 'You arrive at countertop 1. You see a plate 1.', Action 2:" in last["instruction"]
    assert "['done'\n 'look'\n 'examine box 1'\n 'inventory'\n 'go to countertop 1']." in last["instruction"]
    assert manifest["counts"]["units_in"] == 4 and manifest["counts"]["in"] == 1


def test_not_admissible_flag_policy_keeps_pair(tmp_path):
    traj = tv6()
    rows, q, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: "a", 1: "b", 2: "c"})], not_admissible="flag")
    assert q == [] and [r["flags"] for r in rows] == [[], [], ["not_admissible"]]


@pytest.mark.parametrize("think,reason", [("I will <action>look</action>", "think_has_tags"),
                                          ("我要去 countertop", "think_has_cjk"), ("   ", "empty_think")])
def test_reasoning_rules(tmp_path, think, reason):
    traj = one_step()
    _, q, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: think})])
    assert reasons(q) == [reason] and q[0]["item_id"].startswith("pair-")


def test_empty_think_flag_policy(tmp_path):
    traj = one_step()
    rows, _, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: ""})], empty_think="flag")
    assert rows[0]["flags"] == ["empty_think"] and rows[0]["output"] == "<think></think>\n<action>go to countertop 1</action>"


def test_missing_think_and_stray_index(tmp_path):
    traj = one_step()
    _, q, m = run_validate(tmp_path, [traj], [distilled(traj, {5: "x"})])
    assert reasons(q) == ["unexpected_think", "missing_think"] and m["counts"]["units_in"] == 2


def test_missing_trajectory_and_missing_skills(tmp_path):
    traj, ghost = one_step(), one_step("webshop")
    drows = [distilled(ghost, {0: "x"}), distilled(traj, {0: "x"}, skills=["gen-404"])]
    rows, q, m = run_validate(tmp_path, [traj], drows)
    assert rows == [] and reasons(q) == ["missing_trajectory", "missing_skills"]
    assert q[0]["item_id"] == "traj-webshop" and m["counts"]["units_in"] == 2


def test_normalised_action_fixed_from_real_list(tmp_path):
    traj = one_step(action="Go to  Countertop 1")
    rows, _, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: "T1"})])
    assert rows[0]["action"] == "go to countertop 1" and rows[0]["flags"] == ["action_normalised"]


def test_no_admissible_list_is_flagged(tmp_path):
    traj = one_step(adm=())
    rows, _, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: "T1"})])
    assert rows[0]["flags"] == ["no_admissible_list"] and "admissible actions of" not in rows[0]["instruction"]


def test_bad_format_when_action_carries_tags(tmp_path):
    traj = one_step(action="go <action>x", adm=())
    _, q, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: "T1"})])
    assert reasons(q) == ["bad_format"]


@pytest.mark.parametrize("action,adm,expect", [
    ("search[red running shoes]", ["search[<your query>]"], None),     # format only, list untouched (D-W2)
    ("click[8]", ["click[7]", "click[8]"], None),                       # real option kept (TV11 ours)
    ("click[B07ABC123]", ["click[7]", "click[8]"], "not_admissible"),   # never invented (D-W1)
    ("buy it now", ["click[buy now]"], "bad_action_format"),
])
def test_webshop_actions(tmp_path, action, adm, expect):
    traj = one_step("webshop", action, adm)
    rows, q, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: "pick"})])
    if expect is None:
        assert q == [] and rows[0]["action"] == action and rows[0]["flags"] == []
        assert "search[red running shoes]" not in rows[0]["instruction"]
    else:
        assert reasons(q) == [expect]


def test_search_answer_leakage_only_outside_evidence(tmp_path):
    leak = one_step("search", "<answer>March 16, 2018</answer>", (), obs="")
    _, q, _ = run_validate(tmp_path / "a", [leak], [distilled(leak, {0: "know it"}, skills=["gen-1"])])
    assert reasons(q) == ["leakage"]  # the skill text contains the answer
    ok = one_step("search", "<answer>March 16, 2018</answer>", (), obs="Doc 1: released March 16, 2018")
    rows, q, _ = run_validate(tmp_path / "b", [ok], [distilled(ok, {0: "from doc"})])
    assert q == [] and rows[0]["output"] == "<think>from doc</think>\n<answer>March 16, 2018</answer>"


def test_length_truncates_history_then_quarantines(tmp_path):
    steps = [Step(0, None, "start", ["go a", "go b"]), Step(1, "go a", "x" * 4000, ["go b"]),
             Step(2, "go b", "end", ["go a"]), Step(3, "go a", "won", [], 10.0, True)]
    traj = Trajectory("traj-long", "alfworld", "e1", "go.", "pick_and_place", "success", 10.0, steps, "f", "t", 0)
    rows, q, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: "a", 1: "b", 2: "c"})], max_tokens=600)
    # Pair 2 shows the 4000-char observation as its current state: nothing left to drop.
    assert reasons(q) == ["truncated_no_target"]
    assert [r["step_index"] for r in rows] == [1, 3] and rows[1]["flags"] == ["history_truncated"]
    assert rows[1]["messages"][1]["content"].startswith("## Current Progress\n\nYour current observation is: end")


def test_unknown_policy_is_rejected(tmp_path):
    traj = one_step()
    with pytest.raises(ValueError, match="build_pairs.leakage: must be one of quarantine, flag"):
        run_validate(tmp_path, [traj], [distilled(traj, {0: "T1"})], leakage="fix")


def test_invalid_action_in_source_is_never_a_target(tmp_path):
    traj = one_step()
    traj.metadata = json.dumps({"invalid_actions": [{"index": 1, "line": 7, "reason": "no <action> tag"}]})
    _, q, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: "T1"})])
    assert reasons(q) == ["invalid_action_in_source"] and "no <action> tag" in q[0]["detail"] and q[0]["line"] == 7


# Rule short_think: 46 of 64 <think> blocks of the small embedded distill model were numbers or
# punctuation ("1.5-2.3", "123456789"); they are quarantined by default, flagged on request.
DEFAULT_MIN = BuildPairsConfig().min_think_words


def test_short_think_defaults_are_quarantine_and_three_words():
    assert (BuildPairsConfig().short_think, DEFAULT_MIN) == ("quarantine", 3)


@pytest.mark.parametrize("think,words", [("1.5-2.3", 0), ("4.6", 0), ("123456789", 0), (",.15,", 0), ("T1", 0),
                                         ("go to", 2), ("go to the desk first", 5), ("die Tür öffnen", 3)])
def test_think_words_counts_runs_of_letters(think, words):
    assert think_words(think) == words


@pytest.mark.parametrize("think,flags", [("1.5-2.3", ["short_think"]), ("so far", ["short_think"]),
                                         ("go to the desk first", [])])
def test_short_think_flag_policy(tmp_path, think, flags):
    traj = one_step()
    rows, q, m = run_validate(tmp_path, [traj], [distilled(traj, {0: think})], min_think_words=DEFAULT_MIN,
                              short_think="flag")
    assert q == [] and rows[0]["flags"] == flags and rows[0]["think"] == think
    assert m["counters"]["flags"] == ({"short_think": 1} if flags else {})


def test_short_think_is_quarantined_by_default(tmp_path):
    traj = one_step()
    rows, q, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: "1.5-2.3"})], min_think_words=DEFAULT_MIN)
    assert rows == [] and reasons(q) == ["short_think"]
    assert q[0]["detail"] == "reasoning has 0 words of letters (< build_pairs.min_think_words=3): '1.5-2.3'"
    assert q[0]["raw"] == "<think>1.5-2.3</think>\n<action>go to countertop 1</action>"


def test_blank_think_is_empty_not_short(tmp_path):
    traj = one_step()
    rows, _, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: " "})], empty_think="flag",
                              min_think_words=DEFAULT_MIN)
    assert rows[0]["flags"] == ["empty_think"]


def test_short_think_flag_is_counted_in_the_dataset_card(tmp_path):
    traj = one_step()
    rows, _, _ = run_validate(tmp_path, [traj], [distilled(traj, {0: "4.6"})], min_think_words=DEFAULT_MIN,
                              short_think="flag")
    card = dataset_card([dict(r, split="train") for r in rows], [SKILL], "r1", 0.1, 0)
    assert "| short_think | 1 |" in card.splitlines()


def test_unknown_short_think_policy_is_rejected(tmp_path):
    traj = one_step()
    with pytest.raises(ValueError, match="build_pairs.short_think: must be one of quarantine, flag"):
        run_validate(tmp_path, [traj], [distilled(traj, {0: "T1"})], short_think="fix")


def cabinet_run():
    """An ALFWorld trajectory whose second step recorded the thought ``go to cabinet 2``: the
    source's own echo of its first action (what ``distill.source_thoughts = prefer`` passes on)."""
    adm = ["go to cabinet 2", "open cabinet 2", "look"]
    steps = [Step(0, None, "You see a cabinet 2.", adm, line=3),
             Step(1, "go to cabinet 2", "The cabinet 2 is closed.", adm, line=5),
             Step(2, "open cabinet 2", "You open the cabinet 2.", [], 1.0, True, thought="go to cabinet 2", line=7)]
    return Trajectory("traj-cab", "alfworld", "inst-9", "find a spraybottle.", "other", "success", 1.0, steps,
                      "src.txt", "fmt", 0, 1)


def test_a_think_that_restates_an_action_is_quarantined_as_in_distill(tmp_path):
    traj = cabinet_run()
    thinks = {0: "I need to find the spraybottle and it may be in cabinet 2", 1: "go to cabinet 2"}
    rows, q, manifest = run_validate(tmp_path, [traj], [distilled(traj, thinks)])
    assert [r["step_index"] for r in rows] == [1]
    assert reasons(q) == ["think_is_action"] and q[0]["line"] == 7
    assert q[0]["detail"] == ("the think for step 1 'go to cabinet 2' only restates 'go to cabinet 2'; "
                              "say why this action is taken now")
    assert q[0]["raw"] == "<think>go to cabinet 2</think>\n<action>open cabinet 2</action>"
    assert manifest["counts"]["quarantine_reasons"] == {"think_is_action": 1}
    assert manifest["counts"]["units_in"] == 2 and manifest["counts"]["quarantined"] == 1


def test_think_is_action_only_counts_when_quality_flags_it(tmp_path):
    traj = cabinet_run()
    thinks = {0: "I need to find the spraybottle and it may be in cabinet 2", 1: "go to cabinet 2"}
    rows, q, manifest = run_validate(tmp_path, [traj], [distilled(traj, thinks)], flag_rules=["think_is_action"])
    assert q == [] and [r["flags"] for r in rows] == [[], ["think_is_action", "recorded_thought"]]
    assert manifest["counters"]["flags"] == {"recorded_thought": 1, "think_is_action": 1}

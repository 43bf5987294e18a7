"""Test vectors of the SkillRL reference pipeline (TV1..TV11: tiny inputs with the reference's expected
outputs) that are not pinned in a module test, with the "ours" values where we deliberately differ.

Elsewhere: TV1 tests/pipeline/formats/test_skillrl_txt.py::test_tv1_ours_exact; TV3 tests/pipeline/stages/test_remove_loops.py;
TV4 tests/pipeline/envs/test_envs.py; TV6 tests/pipeline/stages/test_build_pairs.py::test_tv6_ours; TV7 (parse) also
tests/pipeline/formats/test_skillrl_search_txt.py; TV5 tests/pipeline/test_prompts.py; TV8/TV9 the LLM stages.
"""
import pytest

import pipeline.stages.build_pairs as build_pairs_stage
from pipeline.core.config import PipelineConfig, PromptConfig
from pipeline.prompts import render_step_messages
from pipeline.core.records import Step, Trajectory
from pipeline.selection import select
from pipeline.stages.build_pairs import action_format_ok, match_admissible
from tests.helpers.build_pairs_data import distilled, reasons, run_validate


# ---------------------------------------------------------------------------------- TV2
def _t(env, outcome, n_actions, file):
    steps = [Step(i, None if i == 0 else "a", "o") for i in range(n_actions + 1)]
    return Trajectory(f"{env}/{file}", "alfworld", env, "t", "c", outcome, 0.0, steps, f"r/{env}/{file}", "f", 0)


def test_tv2_selection_ours():
    trajs = [_t("env000", "success", 5, "t0"), _t("env000", "success", 3, "t1"), _t("env000", "success", 4, "t2"),
             _t("env001", "success", 4, "t0"), *[_t("env001", "failure", 2, f"t{i}") for i in (1, 2, 3)],
             _t("env002", "success", 2, "t0"), _t("env002", "success", 2, "t1"), _t("env002", "failure", 2, "t2"),
             _t("env003", "success", 2, "t0"), _t("env003", "success", 2, "t1"),
             _t("env004", "success", 2, "t0"), _t("env004", "failure", 2, "t1"), _t("env004", "failure", 2, "t2"),
             *[_t("env005", "failure", 2, f"t{i}") for i in (3, 1, 0, 2)]]
    kept, dropped = select(trajs, PipelineConfig().parse)
    # orig kept env000 (3 successes), env001 (its 3 fails) and env005 (3 fails) only. Ours: every
    # env is kept per trajectory (D-P5): mixed env001/env002/env004 keep both outcomes, env003's two
    # successes stay, env005 keeps its first 3 failures by file name.
    assert [t.trajectory_id for t in kept] == [
        "env000/t0", "env000/t1", "env000/t2", "env001/t0", "env001/t1", "env001/t2", "env001/t3",
        "env002/t0", "env002/t1", "env002/t2", "env003/t0", "env003/t1", "env004/t0", "env004/t1", "env004/t2",
        "env005/t1", "env005/t0", "env005/t2"]
    assert dropped == {"env005/t3": "failure #4 of instance 'env005': max_per_instance=3"}


def test_tv2_success_ties_break_by_file_name():
    trajs = [_t("e", "success", 3, "b"), _t("e", "success", 3, "a"), _t("e", "success", 2, "c"),
             _t("e", "success", 3, "d")]
    _, dropped = select(trajs, PipelineConfig().parse)
    assert dropped == {"e/d": "success #4 of instance 'e': max_per_instance=3"}  # kept: c (2), then a, b (3)


# --------------------------------------------------------------------------------- TV10
REAL_PRODUCT_PAGE = ["click[back to search]", "click[< prev]", "click[description]", "click[features]",
                     "click[reviews]", "click[buy now]", "click[x-large]", "click[navy]", "click[8]", "click[9.5]",
                     "click[pack of 2]", "click[xs2]", "click[b07xyz1234]"]


@pytest.mark.parametrize("action,ours", [
    ("click[8]", "click[8]"),                        # orig: click[B07ABC123] (fabricated ASIN)
    ("click[XL]", None),                             # orig: click[x-large] (a guess, not the real item)
    ("click[Product_B09PNKWT1]", None),              # orig: click[B07ABC123]
    ("click[product_b09pnkwt1]", None),
    ("click[color dropdown]", None),
    ("click[Navy Blue]", None),                      # orig: click[navy]
    ("click[men's relaxed fit jeans 32w x 30l]", None),
    ("click[Shade: Caramel]", None),                 # orig: click[beige]
    ("click[multicolor]", None),                     # orig: click[white]
    ("click[2nd result]", None),                     # orig: click[B08DEF456]
    ("click[9.5]", "click[9.5]"),
    ("click[pack of 2]", "click[pack of 2]"),
    ("click[Buy Now]", "click[buy now]"),            # normalised onto the real item
    ("click[B07XYZ1234]", "click[b07xyz1234]"),
    ("click[xs2]", "click[xs2]"),
])
def test_tv10_ours_maps_only_onto_real_items(action, ours):
    assert action_format_ok(action, "webshop")
    assert match_admissible(action, REAL_PRODUCT_PAGE) == ours


def test_tv10_search_is_format_checked_only():
    # orig: Search[red shoes] -> None (pair removed, capital S). Ours: a valid search (format only;
    # its admissible entry is the placeholder search[<your query>], never edited: D-W2).
    assert action_format_ok("Search[red shoes]", "webshop") and not action_format_ok("red shoes", "webshop")


# --------------------------------------------------------------------------------- TV11
INITIAL = "'WebShop' [SEP] 'Instruction:' [SEP] 'i need red running shoes' [SEP] 'Search'"
PRODUCT = "'Back to Search' [SEP] '< Prev' [SEP] 'size' [SEP] '7' [SEP] '8' [SEP] 'color' [SEP] 'red' [SEP] 'Buy Now'"
PRODUCT_ADM = ["click[back to search]", "click[< prev]", "click[description]", "click[features]", "click[reviews]",
               "click[7]", "click[8]", "click[red]", "click[buy now]"]


def tv11() -> Trajectory:
    rows = [  # (action, observation, admissible): TV11's table in our step convention
        (None, INITIAL, ["search[<your query>]"]),
        ("search[red running shoes]", "'Back to Search' [SEP] 'Page 1 (Total results: 50)' [SEP] 'B01AAA1111'",
         ["click[back to search]", "click[next >]", "click[b01aaa1111]"]),
        ("click[next >]", "'Back to Search' [SEP] 'Page 2 (Total results: 50)' [SEP] 'B02BBB2222'",
         ["click[back to search]", "click[< prev]", "click[next >]", "click[b02bbb2222]"]),
        ("click[next >]", "'Back to Search' [SEP] 'Page 3 (Total results: 50)' [SEP] 'B03QQQ1111'",
         ["click[back to search]", "click[< prev]", "click[next >]", "click[b03qqq1111]"]),
        ("click[b03qqq1111]", PRODUCT, PRODUCT_ADM),
        ("click[8]", "You have selected 8. " + PRODUCT, PRODUCT_ADM),
        ("click[description]", "'Back to Search' [SEP] '< Prev' [SEP] 'Description:' [SEP] 'Light shoes.'",
         ["click[back to search]", "click[< prev]"]),
        ("click[buy now]", "Thank you for shopping with us!", []),
    ]
    steps = [Step(i, a, o, adm, line=10 * i + 1) for i, (a, o, adm) in enumerate(rows)]
    steps[-1].done, steps[-1].reward = True, 10.0
    return Trajectory("traj-tv11", "webshop", "fixed_11", "i need red running shoes", "footwear", "success", 10.0,
                      steps, "ws.txt", "skillrl_txt", 0, 1)


def test_tv11_ours_drop_whole(tmp_path):
    t = tv11()
    rows, q, m = run_validate(tmp_path, [t], [distilled(t, {i: f"think {i}" for i in range(7)})])
    # click[buy now] is not admissible on the description page: the whole trajectory goes (default)
    assert rows == [] and reasons(q) == ["trajectory_rejected"] * 6 + ["not_admissible"]
    assert q[6]["raw"] == "<think>think 6</think>\n<action>click[buy now]</action>" and q[6]["line"] == 71
    assert m["counts"]["units_in"] == 7 and m["counts"]["quarantined"] == 7


def test_tv11_ours_truncate(tmp_path):
    t = tv11()
    rows, q, _ = run_validate(tmp_path, [t], [distilled(t, {i: f"think {i}" for i in range(7)})],
                              webshop_reject="truncate")
    assert [r["action"] for r in rows] == ["search[red running shoes]", "click[next >]", "click[next >]",
                                           "click[b03qqq1111]", "click[8]", "click[description]"]
    assert all(r["flags"] == ["trajectory_truncated"] for r in rows) and reasons(q) == ["not_admissible"]
    first = rows[0]["instruction"]
    # nothing inserted, no label leakage: the real list is shown unchanged (orig appended the query)
    assert "are: [\n'search[<your query>]',\n]." in first and "search[red running shoes]" not in first


# --------------------------------------------------------------------------------- TV12
def _search_traj() -> Trajectory:
    steps = [Step(0, None, ""), Step(1, "<search>film release date</search>", "Doc 1: released March 16, 2018"),
             Step(2, "<answer>March 16, 2018</answer>", "", [], 1.0, True)]
    return Trajectory("traj-tv12", "search", "env3_77", "when did it come out?", "direct_retrieval", "success", 1.0,
                      steps, "77.txt", "skillrl_search_txt", 0)


def test_tv12_unpaired_turn_is_an_error():
    # orig dropped a trailing human turn silently; ours builds pairs from structured steps and a
    # request past the last turn raises.
    t = _search_traj()
    with pytest.raises(ValueError, match="out of range"):
        render_step_messages(t, len(t.steps) + 1, "", PromptConfig())


def test_tv12_search_turn_shows_question_and_evidence():
    system, user = render_step_messages(_search_traj(), 2, "", PromptConfig())
    assert system["content"].endswith("Your question: when did it come out?")
    # D-T2: the history carries the retrieved evidence, which orig dropped
    evidence = "<search>film release date</search> <information>Doc 1: released March 16, 2018</information>"
    assert evidence in user["content"]


def test_tv12_history_length_zero_uses_the_no_history_template():
    steps = [Step(0, None, "room", ["go a"]), Step(1, "go a", "at a", ["go b"]),
             Step(2, "go b", "at b", [], 10.0, True)]
    t = Trajectory("traj-h0", "alfworld", "e", "go.", "pick_and_place", "success", 10.0, steps, "f", "t", 0)
    _, user = render_step_messages(t, 2, "", PromptConfig(history_length=0))
    assert "Prior to this step" not in user["content"] and "You are now at step" not in user["content"]
    assert user["content"].startswith("## Current Progress\n\nYour current observation is: at a")

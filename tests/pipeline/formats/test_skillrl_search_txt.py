"""SkillRL Search txt reader: D-S1 (final action kept), D-S2 (last anchored
reward), D-S3 (data_source order; env_instance without .txt). Fixtures are the reference's example inputs."""
import json
import os

import pytest

from pipeline.envs.search import data_source_from_stem
from pipeline.formats.discover import detect_format, read_file
from tests.helpers.paths import FIXTURES

FIX = os.path.join(FIXTURES, "formats", "search", "env3")
Q = "when did the movie i can only imagine come out?"
S0 = "<search>I Can Only Imagine film release date</search>"
S1 = "<search>I Can Only Imagine 2018 film</search>"


def test_tv7_ours_exact():
    path = os.path.join(FIX, "77.txt")
    assert detect_format(path, open(path, "rb").read()) == "skillrl_search_txt"
    (t,) = list(read_file(path))
    assert (t.env, t.env_instance, t.task, t.category) == ("search", "env3_77", Q, "direct_retrieval")
    assert (t.outcome, t.reward, t.source_format) == ("success", 1.0, "skillrl_search_txt")
    assert [s.action for s in t.steps] == [None, S0, S1, "<answer>March 16, 2018</answer>"]
    assert [s.observation for s in t.steps] == [
        "", "Doc 1: released March 16, 2018", "Doc 1: I Can Only Imagine is a 2018 American Christian drama film.", ""]
    assert [(s.reward, s.done) for s in t.steps] == [(0.0, False), (0.0, False), (0.0, False), (1.0, True)]
    assert [s.line for s in t.steps] == [2, 4, 5, 7]
    assert json.loads(t.metadata)["data_source"] == "nq" and json.loads(t.metadata)["data_source_from"] == "stem_ranges"


def test_tv7_variant_repeated_final_action_is_kept_d_s1_d_s2():
    (t,) = list(read_file(os.path.join(FIX, "78.txt")))
    # orig: 2 steps, no terminal step; ours: the repeat is its own terminal step
    assert [s.action for s in t.steps[1:]] == [S0, S1, S1]
    assert (t.steps[-1].done, t.steps[-1].reward, t.outcome, t.reward) == (True, 0.0, "failure", 0.0)
    # "Reward: 9.9" inside a retrieved document is not the episode reward (D-S2)
    assert t.steps[1].observation == "Doc 1: released March 16, 2018\nReward: 9.9 stars on one review site"


@pytest.mark.parametrize("stem,source", [("0", "nq"), ("80", "nq"), ("81", "popqa"), ("160", "popqa"),
                                         ("161", "2wikimultihopqa"), ("480", "musique"), ("481", "bamboogle"),
                                         ("-3", "bamboogle"), ("test1", None), ("0081", "popqa")])
def test_tv7_infer_data_source_ranges(stem, source):
    # the reference table; a non-integer stem is None here, not "unknown"
    assert data_source_from_stem(stem) == source


def test_data_source_line_wins_and_missing_question_is_quarantined(tmp_path):
    text = open(os.path.join(FIX, "77.txt"), encoding="utf-8").read()
    p = tmp_path / "nq_run" / "5.txt"
    p.parent.mkdir()
    p.write_text("Data Source: hotpotqa\n" + text, encoding="utf-8")
    (t,) = list(read_file(str(p)))
    assert (json.loads(t.metadata)["data_source"], t.category, t.env_instance) == (
        "hotpotqa", "multi_hop_reasoning", "nq_run_5")
    bad = tmp_path / "bad.txt"
    bad.write_text(text.replace("Your question:", "Question text:"), encoding="utf-8")
    (q,) = list(read_file(str(bad), fmt="skillrl_search_txt"))
    assert (q.reason, q.line) == ("no_question", 1)

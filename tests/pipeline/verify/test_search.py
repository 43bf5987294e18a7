"""Search/QA rules on real ReAct HotpotQA logs (tests/fixtures/verify/SOURCE.md)."""
from __future__ import annotations

import dataclasses
import json
import os

from pipeline.core.records import Trajectory
from pipeline.formats.discover import read_file
from pipeline.verify.search import SearchChecker, exact_match, f1_score
from tests.helpers.paths import FIXTURES

HERE = os.path.join(FIXTURES, "verify")


def trajs(name: str) -> list[Trajectory]:
    return [t for t in read_file(os.path.join(HERE, name)) if isinstance(t, Trajectory)]


def test_correct_wrong_and_halted_agents_of_one_reflexion_trial():
    correct, wrong, halted = trajs("reflexion_hotpotqa_trial.txt")
    assert [t.outcome for t in (correct, wrong, halted)] == ["success", "failure", "failure"]
    assert SearchChecker().check(correct, {}).findings == []
    v = SearchChecker().check(wrong, {"qa_min_f1": 1.0})
    assert [(f.rule, f.kind) for f in v.findings] == [("wrong_answer", "goal")]
    assert v.findings[0].detail == ("answer 'the end of World War II' vs gold 'a failed coup attempt': exact match "
                                    "false, F1 0.00 < 1")
    assert [(f.rule, f.index) for f in SearchChecker().check(halted, {}).findings] == [
        ("no_answer", len(halted.steps) - 1)]


def test_gold_answer_decides_over_a_recorded_success():
    """A success whose answer misses the gold is not one; F1 at or above qa_min_f1 is accepted."""
    correct = trajs("reflexion_hotpotqa_trial.txt")[0]
    meta = json.loads(correct.metadata)
    moved = dataclasses.replace(correct, metadata=json.dumps({**meta, "gold_answer": "1999 or 2004"}))
    assert SearchChecker().check(moved, {"qa_min_f1": 1.0}).goal_reached is False
    assert SearchChecker().check(moved, {"qa_min_f1": 0.4}).goal_reached is True  # F1 0.5 ("2004" of 3 tokens)


def test_fireact_success_and_the_answer_scores():
    (t,) = trajs("fireact_hotpotqa_first.jsonl")
    v = SearchChecker().check(t, {})
    assert (v.findings, v.goal_reached) == ([], True)  # "Episode finished, reward = True"
    assert exact_match("The Badr Hari", "badr hari") and f1_score("Badr Hari", "Hari") == 2 / 3
    assert f1_score("yes", "no") == 0.0


def test_an_action_outside_the_syntax_is_flagged():
    (t,) = trajs("fireact_hotpotqa_first.jsonl")
    steps = [dataclasses.replace(s, action="browse[the web]") if s.index == 1 else s for s in t.steps]
    v = SearchChecker().check(dataclasses.replace(t, steps=steps), {})
    assert [(f.index, f.rule, f.kind) for f in v.findings] == [(1, "not_in_grammar", "impossible")]

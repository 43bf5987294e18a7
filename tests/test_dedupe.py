"""Loop removal: spec TV3 (ours), D-D1/D-D2, and the real Reflexion ALFWorld loop."""
import json

import pytest

from pipeline.formats.discover import read_file
from pipeline.records import Step, Trajectory
from pipeline.stages.dedupe import dedupe_trajectory


def traj(actions, observations=None, rewards=None, done=None):
    obs = observations or [f"after {a}" for a in actions]
    steps = [Step(index=i, action=a, observation=o, reward=(rewards or {}).get(i, 0.0), done=i in (done or ()))
             for i, (a, o) in enumerate(zip(actions, obs))]
    return Trajectory("traj-x", "alfworld", "e", "t", "c", "failure", 0.0, steps, "u", "f", 0)


@pytest.mark.parametrize("actions,kept", [
    ("None A B A B C", [0, 1, 2, 5]),
    ("None A A A B", [0, 1, 4]),
    ("None A B C A B C D", [0, 1, 2, 3, 7]),
    ("None A B A C A B A C", [0, 1, 2, 3, 4]),
    ("None A B B A", [0, 1, 2, 4]),
])
def test_tv3_no_op_loops(actions, kept):
    acts = [None if a == "None" else a for a in actions.split()]
    t, spans = dedupe_trajectory(traj(acts))
    removed = sorted(set(range(len(acts))) - set(kept))
    assert t.removed_step_indices == removed
    assert [s.action for s in t.steps] == [acts[i] for i in kept]
    assert [s.index for s in t.steps] == list(range(len(kept)))  # renumbered contiguously


def test_tv3_webshop_next_page_kept():
    acts = [None, "search[q]", "click[next >]", "click[next >]", "click[b03qqq1111]"]
    obs = ["start", "Page 1 ...", "Page 2 ...", "Page 3 ... B03QQQ1111", "product page"]
    t, spans = dedupe_trajectory(traj(acts, obs))
    assert len(t.steps) == 5 and spans == [] and t.removed_step_indices == []


def test_tv3_winning_duplicate_kept():
    acts = [None, "go to desk 1", "use desklamp 1", "use desklamp 1"]
    obs = ["start", "On the desk 1 ...", "Nothing happens.", "Nothing happens."]
    t, _ = dedupe_trajectory(traj(acts, obs, rewards={3: 10.0}, done={3}))
    assert [s.action for s in t.steps] == acts  # same observation even, but terminal and rewarded


def test_reasoning_steps_never_count():
    acts = [None, "go to desk 1", "think: where next?", "go to desk 1", "think: where next?"]
    obs = ["s", "On the desk.", "OK.", "On the desk.", "OK."]
    t, _ = dedupe_trajectory(traj(acts, obs))
    assert [s.action for s in t.steps] == [None, "go to desk 1", "think: where next?", "think: where next?"]
    assert t.removed_step_indices == [3]


def test_reflexion_stoveburner_loop_collapses():
    a = next(read_file("data/samples/reflexion-fewshot-failures/alfworld_reflexion_few_shot_examples.txt"))
    t, spans = dedupe_trajectory(a)
    assert spans == [[2], [7], [8], [9]]  # the repeated `look`, then examine stoveburner 1 x4 -> x1
    assert [s.action for s in t.steps] == [None, "look", "go to countertop 1", "take mug 1 from countertop 1",
                                           "go to stoveburner 1", "examine stoveburner 1"]
    assert json.loads(t.metadata)["dedupe"] == {"removed_spans": [[2, 2], [7, 7], [8, 8], [9, 9]]}
    assert t.steps[1].thought == a.steps[1].thought  # kept copy keeps its own fields


def test_invalid_action_annotations_follow_their_steps():
    acts = [None, "look", "look", "go to desk 1", "bad action"]
    t = traj(acts, ["s", "room", "room", "desk", "Nothing happens."])
    t.metadata = json.dumps({"invalid_actions": [{"index": 2, "line": 9, "reason": "r2"},
                                                 {"index": 4, "line": 20, "reason": "r4"}]})
    new, spans = dedupe_trajectory(t)
    assert spans == [[2]] and [s.action for s in new.steps] == [None, "look", "go to desk 1", "bad action"]
    meta = json.loads(new.metadata)
    assert meta["invalid_actions"] == [{"index": 3, "line": 20, "reason": "r4"}]
    assert meta["dedupe"]["removed_invalid_actions"] == [{"index": 2, "line": 9, "reason": "r2"}]

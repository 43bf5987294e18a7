"""Loop removal: spec TV3 (ours), D-D1/D-D2, and the real Reflexion ALFWorld loop."""
import json

import pytest

from pipeline.formats.discover import read_file
from pipeline.core.records import Step, Trajectory
from pipeline.stages.remove_loops import remove_loops_trajectory


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
    t, spans = remove_loops_trajectory(traj(acts))
    removed = sorted(set(range(len(acts))) - set(kept))
    assert t.removed_step_indices == removed
    assert [s.action for s in t.steps] == [acts[i] for i in kept]
    assert [s.index for s in t.steps] == list(range(len(kept)))  # renumbered contiguously


def test_tv3_webshop_next_page_kept():
    acts = [None, "search[q]", "click[next >]", "click[next >]", "click[b03qqq1111]"]
    obs = ["start", "Page 1 ...", "Page 2 ...", "Page 3 ... B03QQQ1111", "product page"]
    t, spans = remove_loops_trajectory(traj(acts, obs))
    assert len(t.steps) == 5 and spans == [] and t.removed_step_indices == []


def test_tv3_winning_duplicate_kept():
    acts = [None, "go to desk 1", "use desklamp 1", "use desklamp 1"]
    obs = ["start", "On the desk 1 ...", "Nothing happens.", "Nothing happens."]
    t, _ = remove_loops_trajectory(traj(acts, obs, rewards={3: 10.0}, done={3}))
    assert [s.action for s in t.steps] == acts  # same observation even, but terminal and rewarded


def test_reasoning_steps_never_count():
    acts = [None, "go to desk 1", "think: where next?", "go to desk 1", "think: where next?"]
    obs = ["s", "On the desk.", "OK.", "On the desk.", "OK."]
    t, _ = remove_loops_trajectory(traj(acts, obs))
    assert [s.action for s in t.steps] == [None, "go to desk 1", "think: where next?", "think: where next?"]
    assert t.removed_step_indices == [3]


def test_reflexion_stoveburner_loop_collapses():
    a = next(read_file("data/samples/reflexion-fewshot-failures/alfworld_reflexion_few_shot_examples.txt"))
    t, spans = remove_loops_trajectory(a)
    assert spans == [[2], [7], [8], [9]]  # the repeated `look`, then examine stoveburner 1 x4 -> x1
    assert [s.action for s in t.steps] == [None, "look", "go to countertop 1", "take mug 1 from countertop 1",
                                           "go to stoveburner 1", "examine stoveburner 1"]
    assert json.loads(t.metadata)["remove_loops"] == {"removed_spans": [[2, 2], [7, 7], [8, 8], [9, 9]]}
    assert t.steps[1].thought == a.steps[1].thought  # kept copy keeps its own fields


def test_invalid_action_annotations_follow_their_steps():
    acts = [None, "look", "look", "go to desk 1", "bad action"]
    t = traj(acts, ["s", "room", "room", "desk", "Nothing happens."])
    t.metadata = json.dumps({"invalid_actions": [{"index": 2, "line": 9, "reason": "r2"},
                                                 {"index": 4, "line": 20, "reason": "r4"}]})
    new, spans = remove_loops_trajectory(t)
    assert spans == [[2]] and [s.action for s in new.steps] == [None, "look", "go to desk 1", "bad action"]
    meta = json.loads(new.metadata)
    assert meta["invalid_actions"] == [{"index": 3, "line": 20, "reason": "r4"}]
    assert meta["remove_loops"]["removed_invalid_actions"] == [{"index": 2, "line": 9, "reason": "r2"}]


def _table_case():
    """Rows that exercise every branch of the columnar path: loops, reasoning, a winning repeat,
    reader annotations, earlier removals, a row that ends too short and one left untouched."""
    from pipeline.formats.common import trajectories_table
    rows = [
        traj([None, "look", "look", "think: hmm", "go to desk 1", "bad", "bad"], ["s", "r", "r", "OK.", "d", "x", "x"]),
        traj([None, "Look ", "look", "take mug 1"], ["s", "Room  A", "room a", "got it"], rewards={3: 10.0}, done={3}),
        traj([None, "open fridge 1", "open fridge 1"], ["s", "open", "open"]),
        traj([None, "go to desk 1", "examine desk 1"], ["s", "desk", "on desk"]),
        traj([None, "click[next >]", "click[next >]"], ["s", "page 2", "page 3"]),
    ]
    rows[0].metadata = json.dumps({"invalid_actions": [{"index": 6, "line": 30, "reason": "r"},
                                                       {"index": 5, "line": 20, "reason": "r"}]})
    rows[3].removed_step_indices = [7]
    for i, t in enumerate(rows):
        t.trajectory_id = f"traj-{i}"
    return trajectories_table(rows)


@pytest.mark.parametrize("min_actions", [1, 2, 3])
def test_columnar_dedupe_equals_row_path(min_actions):
    """remove_loops_table (used by the stage) must give exactly the rows, quarantine and counts of the
    row-dict reference path, including the too_short quarantine JSON."""
    from pipeline.stages.remove_loops import remove_loops_rows, remove_loops_table
    table = _table_case()
    kept, qrows, shortened, removed = remove_loops_table(table, min_actions)
    ref_kept, ref_q, n_in, ref_short, ref_removed = remove_loops_rows(table.to_pylist(), min_actions)
    assert kept.to_pylist() == ref_kept
    assert [q.__dict__ for q in qrows] == [q.__dict__ for q in ref_q]
    assert (shortened, removed, n_in) == (ref_short, ref_removed, 5)
    assert kept.schema.equals(table.schema, check_metadata=True)
    # and the values themselves (row 0: "look" repeat and the "bad" repeat removed, steps 2 and 6)
    first = kept.to_pylist()[0]
    assert first["removed_step_indices"] == [2, 6]
    assert [s["index"] for s in first["steps"]] == [0, 1, 2, 3, 4]
    assert json.loads(first["metadata"])["invalid_actions"] == [{"index": 4, "line": 20, "reason": "r"}]
    # actions left: 3, 2 ("Look " == "look" on a same-after-normalising room), 1, 2, 2 (next page differs)
    assert [q.item_id for q in qrows] == {1: [], 2: ["traj-2"], 3: ["traj-1", "traj-2", "traj-3", "traj-4"]}[min_actions]
    assert (shortened, removed) == (3, 4)

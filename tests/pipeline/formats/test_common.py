"""formats.common: the columnar trajectory table equals the row-dict conversion."""
from pipeline.formats.common import trajectories_table, trajectory_row
from pipeline.formats.discover import read_file
from pipeline.core.records import TRAJECTORY_SCHEMA, Step, Trajectory, to_table


def test_trajectories_table_equals_row_conversion():
    """Real records (SkillRL txt with a thought-free reset step) plus edge values: None action,
    thought and line, empty admissible list, earlier removed indices, non-ASCII text."""
    real = [t for t in read_file("data/samples/skillrl-rollouts/env000/test1.txt") if isinstance(t, Trajectory)]
    odd = Trajectory("traj-odd", "webshop", "s1", "buy é", "other", "failure", -1.5,
                     [Step(0, None, "start", []), Step(1, "click[b]", "página", ["click[b]"], 0.5, True, "why", None)],
                     "u.json", "chat_json", 3, None, [4, 2], '{"k": "ü"}')
    trajs = real + [odd]
    table = trajectories_table(trajs)
    assert table.schema.equals(TRAJECTORY_SCHEMA, check_metadata=True)
    assert table.equals(to_table([trajectory_row(t) for t in trajs], TRAJECTORY_SCHEMA))
    row = table.to_pylist()[-1]
    assert row["steps"][1] == {"index": 1, "action": "click[b]", "observation": "página",
                               "admissible_actions": ["click[b]"], "reward": 0.5, "done": True,
                               "thought": "why", "line": None}
    assert row["removed_step_indices"] == [4, 2] and row["source_line"] is None
    assert len(real) == 1 and table.column("steps")[0].as_py()[0]["action"] is None


def test_trajectories_table_empty():
    assert trajectories_table([]).num_rows == 0

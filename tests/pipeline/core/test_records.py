"""records.to_table is strict at every level: nested struct keys are checked like top-level ones."""
import pyarrow as pa
import pytest

from pipeline.formats.common import trajectory_row
from pipeline.core.records import SFT_PAIR_SCHEMA, TRAJECTORY_SCHEMA, Step, Trajectory, to_table


def traj_row():
    t = Trajectory("traj-1", "alfworld", "env0", "put a mug", "put", "success", 10.0,
                   [Step(0, None, "You are in a room."), Step(1, "go to desk 1", "On the desk, you see a mug.",
                                                              ["go to desk 1"], 10.0, True, None, 4)],
                   "a.txt", "skillrl_txt", 0, 1)
    return trajectory_row(t)


def test_complete_nested_rows_round_trip():
    row = traj_row()
    assert to_table([row], TRAJECTORY_SCHEMA).to_pylist() == [row]


def test_unknown_key_inside_a_list_of_structs_raises():
    row = traj_row()
    row["steps"][1]["score"] = 3.5  # Arrow alone drops it silently
    with pytest.raises(KeyError, match=r"row 0\.steps\[1\]: fields do not match schema: unknown=\['score'\] missing=\[\]"):
        to_table([row], TRAJECTORY_SCHEMA)


def test_missing_key_inside_a_list_of_structs_raises():
    row = traj_row()
    del row["steps"][0]["line"]  # Arrow alone turns it into null
    with pytest.raises(KeyError, match=r"row 0\.steps\[0\]: .*unknown=\[\] missing=\['line'\]"):
        to_table([row], TRAJECTORY_SCHEMA)


def test_message_struct_in_an_sft_pair_is_checked():
    row = {name: None for name in SFT_PAIR_SCHEMA.names}
    row["messages"] = [{"role": "user", "content": "hi"}, {"role": "assistant", "text": "ok"}]
    with pytest.raises(KeyError, match=r"row 0\.messages\[1\]: .*unknown=\['text'\] missing=\['content'\]"):
        to_table([row], SFT_PAIR_SCHEMA)


def test_non_nullable_fields_reject_none_at_every_level():
    inner = pa.struct([pa.field("k", pa.string(), nullable=False), ("v", pa.int64())])
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), ("items", pa.list_(inner))])
    assert to_table([{"id": "a", "items": [{"k": "x", "v": None}]}], schema).num_rows == 1
    with pytest.raises(ValueError, match=r"row 0\.items\[0\]\.k: None in a non-nullable field"):
        to_table([{"id": "a", "items": [{"k": None, "v": 1}]}], schema)
    with pytest.raises(ValueError, match=r"row 1\.id: None in a non-nullable field"):
        to_table([{"id": "a", "items": []}, {"id": None, "items": []}], schema)
    with pytest.raises(TypeError, match=r"row 0\.items\[0\]: expected an object"):
        to_table([{"id": "a", "items": ["x"]}], schema)

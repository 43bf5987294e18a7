"""ReAct ALFWorld prompt JSON reader on the shipped sample (real ReAct expert transcripts)."""
import json

from pipeline.formats.discover import read_file
from pipeline.core.records import QuarantineRow

SAMPLE = "data/samples/react-alfworld/alfworld_3prompts_react_sample.json"


def test_react_heat_entry_exact():
    ts = list(read_file(SAMPLE))
    assert [t.env_instance for t in ts] == ["put_0", "heat_1", "examine_1"]
    t = ts[1]
    assert (t.env, t.task, t.category, t.outcome, t.reward) == ("alfworld", "put a hot apple in fridge.", "heat", "success", 10.0)
    assert len(t.steps) == 9 and t.source_line == 3 and t.record_index == 1
    # think lines are never steps: they become the next real action's thought
    assert all(not (s.action or "").startswith("think") for s in t.steps)
    assert t.steps[1].action == "go to fridge 1" and t.steps[1].observation == "The fridge 1 is closed."
    assert t.steps[1].thought.startswith("To solve the task, I need to find and take an apple, then heat it with microwave")
    assert t.steps[-1].action == "put apple 1 in/on fridge 1" and t.steps[-1].done and t.steps[-1].reward == 10.0
    assert json.loads(t.metadata) == {"key": "react_heat_1", "outcome_source": "curated", "variant": "react"}
    assert all(s.admissible_actions == [] for s in t.steps)
    assert ts[2].category == "look_at_obj_in_light"  # "examine the pen with the desklamp."


def test_truncated_dict_keeps_earlier_entries(tmp_path):
    text = open(SAMPLE, encoding="utf-8").read()
    p = tmp_path / "cut.json"
    p.write_text(text[: text.index('"react_examine_1"') + 40], encoding="utf-8")
    items = list(read_file(str(p)))
    assert [type(i).__name__ for i in items] == ["Trajectory", "Trajectory", "QuarantineRow"]
    assert items[2].reason == "invalid_json" and items[2].line == 4

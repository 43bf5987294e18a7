"""The reference's "bring your own JSON" (its parse output): the ALFWorld and Search
example records as the reference writes them, read back with our fixes (D-P3, D-P4)."""
import json
import os

from pipeline.formats.discover import detect_format, read_file
from tests.helpers.paths import FIXTURES

PATH = os.path.join(FIXTURES, "formats", "byo", "processed_trajectories.json")


def test_reference_parse_output_read_back():
    assert detect_format(PATH, open(PATH, "rb").read()) == "byo_json"
    alf, srch = list(read_file(PATH))
    assert (alf.env, alf.env_instance, alf.task, alf.category, alf.outcome, alf.reward) == (
        "alfworld", "env005", "put a clean plate in box", "clean", "success", 10.0)
    assert [s.action for s in alf.steps] == [None, "go to countertop 1", "move plate 1 to box 1"]  # "None" -> null
    assert alf.steps[2].admissible_actions == ["go to cabinet 1, examine box 1, look"]  # as the reference wrote it
    assert json.loads(alf.metadata)["type"] == "all_success"
    assert (srch.env, srch.category, srch.outcome) == ("search", "direct_retrieval", "success")
    # evidence recovered from memory_context
    assert [s.observation for s in srch.steps] == [
        "", "Doc 1: released March 16, 2018", "Doc 1: I Can Only Imagine is a 2018 American Christian drama film.", ""]
    assert srch.steps[-1].done and srch.record_index == 1000


def test_bad_inner_trajectory_is_quarantined(tmp_path):
    bad_step = {"step_id": "Step -1", "action": "None", "reward": "x"}
    entry = {"env_id": "env1", "task": "t", "type": "all_fail", "trajectories": [[bad_step], "oops"]}
    p = tmp_path / "p.json"
    p.write_text(json.dumps([entry]), encoding="utf-8")
    assert [i.reason for i in read_file(str(p), fmt="byo_json")] == ["bad_record", "bad_record"]

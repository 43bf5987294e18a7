"""Readers never lose records silently and never accept non-finite rewards.

Silent loss: content after a JSON file's top-level value used to be dropped unseen (the reader
stopped at the closing bracket), and one JSONL line nested 100k deep ended the file as one
line-less ``reader_error`` (every later line lost). Non-finite numbers: a reward/score of NaN or
inf decided the outcome silently (NaN -> failure, inf -> success). Inputs are the shipped
samples, edited.
"""
import json
import re

import pytest

from pipeline.formats.discover import read_file
from pipeline.core.records import QuarantineRow, Trajectory

DEEP = "[" * 100_000 + "]" * 100_000


def chat(task, action, **extra):
    return {"messages": [{"role": "user", "content": f"Your task is to: {task}."},
                         {"role": "assistant", "content": f"Thought: go.\nAction: {action}"}], **extra}


def summary(items):
    """(kind, detail) per item: trajectories by their first line, quarantine rows by reason + line."""
    return [(i.reason, i.line) if isinstance(i, QuarantineRow) else ("traj", i.source_line) for i in items]


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


# ---------------------------------------------------------------- silent loss in readers

def test_jsonl_line_nested_too_deeply_costs_only_that_line(tmp_path):
    p = write(tmp_path, "a.jsonl", "\n".join([json.dumps(chat("put a mug on desk", "go to desk 1")), DEEP,
                                               json.dumps(chat("put a pen on desk", "go to desk 2"))]) + "\n")
    items = list(read_file(p))
    assert summary(items) == [("traj", 1), ("invalid_json", 2), ("traj", 3)]
    assert items[1].detail == "invalid JSON line: nested too deeply to decode" and items[1].raw.startswith("[[[[")
    assert items[2].steps[1].action == "go to desk 2"


def test_json_list_followed_by_a_second_document_quarantines_each_of_its_records(tmp_path):
    first = json.dumps([chat("put a mug on desk", "go to desk 1")], indent=1)
    second = json.dumps([chat("put a pen on desk", "go to desk 2"), {"note": "x"}], indent=1)
    text = first + "\n" + second + "\n"
    p = write(tmp_path, "two_docs.json", text)
    items = list(read_file(p))
    line2 = first.count("\n") + 2  # the second document's "[" line; its members start one line down
    note = text[:text.index('{\n  "note"')].count("\n") + 1
    assert summary(items) == [("traj", 2), ("trailing_json", line2 + 1), ("trailing_json", note)]
    assert json.loads(items[1].raw) == chat("put a pen on desk", "go to desk 2")
    assert json.loads(items[2].raw) == {"note": "x"} and "element 1 of a JSON array" in items[2].detail


def test_single_record_followed_by_another_and_by_garbage(tmp_path):
    a, b = json.dumps(chat("put a mug on desk", "go to desk 1"), indent=2), json.dumps(chat("x", "y"), indent=2)
    p = write(tmp_path, "one.json", a + "\n" + b + "\n\nthis is not json {\n")
    items = list(read_file(p))
    n_a, n_b = a.count("\n") + 1, b.count("\n") + 1
    assert summary(items) == [("traj", 1), ("trailing_json", n_a + 1), ("invalid_json", n_a + n_b + 2)]
    assert json.loads(items[1].raw) == chat("x", "y") and items[2].raw == "this is not json {\n"


def test_react_prompt_object_followed_by_a_trailing_object(tmp_path):
    sample = open("data/samples/react-alfworld/alfworld_3prompts_react_sample.json", encoding="utf-8").read()
    n_entries = len(json.loads(sample))
    extra = {"react_put_9": "You are in a room.\nYour task is to: put a pen on desk.\n> go to desk 1\nOK."}
    p = write(tmp_path, "prompts.json", sample.rstrip() + "\n" + json.dumps(extra) + "\n")
    items = list(read_file(p))
    assert [type(i).__name__ for i in items] == ["Trajectory"] * n_entries + ["QuarantineRow"]
    assert (items[-1].reason, items[-1].line) == ("trailing_json", sample.rstrip().count("\n") + 2)
    assert json.loads(items[-1].raw) == extra and items[-1].detail.startswith("a JSON dict after the end")


def test_byo_json_with_trailing_garbage_keeps_entries_and_quarantines_the_rest(tmp_path):
    sample = open("tests/fixtures/formats/byo/processed_trajectories.json", encoding="utf-8").read().rstrip()
    p = write(tmp_path, "byo.json", sample + "\n]]garbage\n")
    items = list(read_file(p))
    before = list(read_file("tests/fixtures/formats/byo/processed_trajectories.json"))
    assert [(i.record_index, i.task, i.reward) for i in items[:-1]] == \
        [(i.record_index, i.task, i.reward) for i in before] and len(before) > 1
    assert (items[-1].reason, items[-1].line, items[-1].raw) == ("invalid_json", sample.count("\n") + 2, "]]garbage\n")


def test_bad_members_of_a_json_list_cost_only_themselves(tmp_path):
    """A member nested too deeply, or with a bad token inside balanced brackets, is one
    invalid_json row with its line; the members after it are still read."""
    recs = [json.dumps(chat("put a mug on desk", "go to desk 1")), DEEP,
            '{"messages": [{"role": "user", "content": "x"}, oops]}', json.dumps(chat("put a pen on desk", "go to desk 2"))]
    p = write(tmp_path, "deep.json", "[\n" + ",\n".join(recs) + "\n]\n")
    items = list(read_file(p))
    assert summary(items) == [("traj", 2), ("invalid_json", 3), ("invalid_json", 4), ("traj", 5)]
    assert items[1].detail.startswith("member 1: invalid JSON: nested too deeply to decode")
    assert items[2].detail.startswith("member 2: invalid JSON: Expecting value") and items[2].raw.startswith('{"messages"')
    assert (items[3].record_index, items[3].steps[1].action) == (3, "go to desk 2")


# ---------------------------------------------------------------- non-finite numbers

@pytest.mark.parametrize("reward", ["NaN", "Infinity", "-Infinity", "1e999999"])
def test_chat_record_reward_must_be_finite(tmp_path, reward):
    good = json.dumps(chat("put a pen on desk", "go to desk 2", reward=1.0))
    bad = json.dumps(chat("put a mug on desk", "go to desk 1", reward=0.5)).replace("0.5", reward)
    p = write(tmp_path, "r.jsonl", bad + "\n" + good + "\n")
    items = list(read_file(p))
    assert summary(items) == [("non_finite_reward", 1), ("traj", 2)]
    assert "is not a finite number" in items[0].detail and "go to desk 1" in items[0].raw
    assert items[1].reward == 1.0


def test_chat_closing_observation_with_an_overflowing_reward(tmp_path):
    rec = chat("put a mug on desk", "go to desk 1")
    rec["messages"].append({"role": "user", "content": "Observation: done, reward = 1" + "0" * 400})
    p = write(tmp_path, "r.jsonl", json.dumps(rec) + "\n")
    assert summary(read_file(p)) == [("non_finite_reward", 1)]


@pytest.mark.parametrize("value", ["NaN", '"nan"', "1e999999"])
def test_byo_step_reward_must_be_finite(tmp_path, value):
    src = "tests/fixtures/formats/byo/processed_trajectories.json"
    entries = json.load(open(src, encoding="utf-8"))
    entries[0]["trajectories"][0][-1]["reward"] = "@@"
    p = write(tmp_path, "byo.json", json.dumps(entries, indent=2).replace('"@@"', value))
    items, before = list(read_file(p)), list(read_file(src))
    assert [i.reason if isinstance(i, QuarantineRow) else "traj" for i in items] == \
        ["non_finite_reward"] + ["traj"] * (len(before) - 1)
    assert "step" in items[0].detail and items[0].line == 2


def test_skillrl_txt_reward_header_that_overflows(tmp_path):
    text = open("data/samples/skillrl-rollouts/env000/test1.txt", encoding="utf-8").read()
    text = text.replace("| Reward: 10.000 | Done: True", "| Reward: 1e999999 | Done: True")
    (tmp_path / "env000").mkdir()
    p = write(tmp_path, "env000/test1.txt", text)
    (row,) = list(read_file(p))
    assert (row.reason, row.line) == ("non_finite_reward", 118) and "step 6 reward inf" in row.detail


def test_skillrl_search_reward_line_that_overflows(tmp_path):
    text = open("tests/fixtures/formats/search/env3/77.txt", encoding="utf-8").read()
    assert "Reward: 1.0" in text
    (tmp_path / "env3").mkdir()
    p = write(tmp_path, "env3/77.txt", text.replace("Reward: 1.0", "Reward: 1e999999"))
    assert [i.reason for i in read_file(p)] == ["non_finite_reward"]


def test_webshop_score_that_overflows(tmp_path):
    text = open("data/samples/react-webshop/webshop_react_episodes_sample.txt", encoding="utf-8").read()
    text = text.replace("Your score (min 0.0, max 1.0): 0.75", "Your score (min 0.0, max 1.0): 7" + "5" * 400, 1)
    p = write(tmp_path, "log.txt", text)
    items = list(read_file(p))
    assert [i.reason if isinstance(i, QuarantineRow) else i.env_instance for i in items] == [
        "fixed_0", "fixed_1", "non_finite_reward", "fixed_7"]
    assert items[2].line == 142 and re.search(r"step \d+ reward inf", items[2].detail)
    assert all(isinstance(i, Trajectory) for i in (items[0], items[1], items[3]))

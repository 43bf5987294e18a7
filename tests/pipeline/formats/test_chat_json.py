"""Chat JSON/JSONL reader: ETO conversations (shipped sample), OpenAI messages, ShareGPT."""
import json

from pipeline.formats.discover import detect_format, read_file

ETO = "data/samples/eto-alfworld/alfworld_sft_sample.json"


def test_eto_record_exact():
    a, b, c, d = list(read_file(ETO))
    assert a.env_instance == ("data/json_2.1.1/train/pick_and_place_simple-ToiletPaper-None-ToiletPaperHanger-406/"
                              "trial_T20190908_122807_136741")
    assert (a.task, a.category, a.outcome, a.reward, len(a.steps)) == (
        "put a toiletpaper in toiletpaperhanger.", "pick_and_place", "success", 10.0, 6)
    assert a.steps[0].observation.startswith("You are in the middle of a room. Looking quickly around you, you see a bathtubbasin 1")
    assert "Your task is to" not in a.steps[0].observation
    assert (a.steps[1].action, a.steps[1].observation) == ("go to toiletpaperhanger 1", "On the toiletpaperhanger 1, you see nothing.")
    assert a.steps[1].thought.startswith("I need to place a toilet paper roll on the toilet paper hanger.")
    assert a.steps[-1].action == "put toiletpaper 1 in/on toiletpaperhanger 1" and a.steps[-1].observation == ""
    assert [s.line for s in a.steps[:2]] == [16, 20]
    assert json.loads(a.metadata)["outcome_source"] == "assumed"
    assert (b.task, b.category, len(b.steps) - 1) == ("heat some egg and put it in diningtable.", "heat", 7)
    assert (c.task, c.category, len(c.steps) - 1) == ("heat some mug and put it in coffeemachine.", "heat", 6)
    assert (d.task, d.category, len(d.steps) - 1) == ("look at statue under the desklamp.", "look_at_obj_in_light", 3)


def test_gamefile_wins_over_text(tmp_path):
    rec = {"id": "x", "game_file": "data/json_2.1.1/train/pick_two_obj_and_place-Pen-None-Desk-1/trial_1",
           "conversations": [{"role": "user", "content": "Your task is to: put some pen on desk."},
                             {"role": "assistant", "content": "Thought: go.\nAction: go to desk 1"}]}
    p = tmp_path / "r.json"
    p.write_text(json.dumps([rec]), encoding="utf-8")
    (t,) = list(read_file(str(p)))
    assert t.category == "pick_two_obj_and_place"  # the text alone says pick_and_place


def test_messages_jsonl_with_reward_and_sharegpt(tmp_path):
    line1 = {"messages": [{"role": "user", "content": "Are both bands from the same country?"},
                          {"role": "assistant", "content": "Thought: search.\nAction: search[band A]"},
                          {"role": "user", "content": "Observation: Band A is from Norway."},
                          {"role": "assistant", "content": "Thought: done.\nAction: finish[yes]"},
                          {"role": "user", "content": "Observation: Episode finished, reward = False"}]}
    share = {"conversations": [{"from": "human", "value": "Your task is to: cool some mug and put it in cabinet."},
                               {"from": "gpt", "value": "<think>find it</think><action>go to fridge 1</action>"}]}
    p = tmp_path / "hotpotqa.jsonl"
    p.write_text(json.dumps(line1) + "\n" + "{not json\n" + json.dumps(share) + "\n", encoding="utf-8")
    assert detect_format(str(p), p.read_bytes()) == "chat_json"
    a, q, c = list(read_file(str(p)))
    assert (a.env, a.task, a.outcome, a.reward, a.category) == (
        "search", "Are both bands from the same country?", "failure", 0.0, "comparison")
    # QA actions share SkillRL Search's tag syntax (envs.search.normalise_action)
    assert [s.action for s in a.steps[1:]] == ["<search>band A</search>", "<answer>yes</answer>"] and a.steps[2].done
    assert (q.reason, q.line) == ("invalid_json", 2)
    assert (c.env, c.category, c.steps[1].action, c.steps[1].thought, c.source_line) == (
        "alfworld", "cool", "go to fridge 1", "find it", 3)


FIREACT = "tests/fixtures/formats/real/fireact_hotpotqa_head.jsonl"


def test_jsonl_with_a_cut_first_line_keeps_the_good_lines(tmp_path):
    # the tester's repro: line 1 cut to its first 300 bytes; detection used to look only at
    # line 1 and read the file as one JSON document (1 invalid_json row, the 3 good lines lost)
    lines = open(FIREACT, encoding="utf-8").read().split("\n")
    lines[0] = lines[0][:300]
    p = tmp_path / "cut.jsonl"
    p.write_text("\n".join(lines), encoding="utf-8")
    items = list(read_file(str(p)))
    assert [(i.reason, i.line) if hasattr(i, "reason") else (i.source_line, i.record_index) for i in items] == [
        ("invalid_json", 1), (2, 1), (3, 2), (4, 3)]
    assert items[0].detail == "invalid JSON line: Unterminated string starting at (column 298)"
    assert items[1].task == "In which American football game was Malcolm Smith named Most Valuable player?"
    assert items[1].steps[1].action == "<search>Malcolm Smith Most Valuable Player</search>"


def test_is_jsonl_probe():
    from pipeline.formats.chat_json import is_jsonl
    rec = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    assert is_jsonl(json.dumps(rec) + "\n")
    assert is_jsonl('{"messages": [\n' + json.dumps(rec) + "\n" + json.dumps(rec) + "\n")
    # one document: pretty-printed, or with one inner object per line (only the last, with no
    # trailing comma, parses alone: 1 of 4 lines, not a majority)
    assert not is_jsonl(json.dumps(rec, indent=2))
    assert not is_jsonl('{"messages": [\n{"role": "user", "content": "q"},\n{"role": "assistant", "content": "a"}\n]}')
    assert not is_jsonl('{"messages": [\n' + json.dumps(rec) + "\n")  # 1 good line of 2: too few to tell


def test_read_given_text_with_escaped_bytes():
    """An escaped ``Source.text`` as discover.read_file passes it (invalid bytes decoded with
    surrogateescape): JSONL loses only the lines holding one; a JSON document is one not_utf8 row
    at its line."""
    from pipeline.formats import chat_json
    from pipeline.formats.common import Source
    raw = open(FIREACT, "rb").read().replace(b"Kimberly Ann Hart", b"Kimberly Ann H\xe4rt", 1)
    items = list(chat_json.read(Source(FIREACT, text=raw.decode("utf-8", "surrogateescape"), escaped=True)))
    assert [(i.reason, i.line) if hasattr(i, "reason") else i.record_index for i in items] == [0, 1, 2, ("not_utf8", 4)]
    assert "Kimberly Ann H\ufffdrt" in items[3].raw
    doc = '[\n  {"messages": [\n    {"role": "user", "content": "caf\udce9"}]}\n]'
    (q,) = list(chat_json.read(Source("doc.json", text=doc, escaped=True)))
    assert (q.reason, q.line, q.detail) == ("not_utf8", 3, "invalid UTF-8 (bytes E9) in a JSON document")

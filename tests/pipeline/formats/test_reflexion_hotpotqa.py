"""Reflexion HotpotQA logs: CORRECT / INCORRECT / HALTED sections on a real excerpt (see
tests/fixtures/formats/real/SOURCE.md), Search/Finish mapped to SkillRL Search tags."""
import json
import os

from pipeline.formats.discover import detect_format, read_file
from tests.helpers.paths import FIXTURES

PATH = os.path.join(FIXTURES, "formats", "real", "reflexion_hotpotqa_excerpt.txt")


def test_sections_label_outcomes():
    assert detect_format(PATH, open(PATH, "rb").read(65536)) == "reflexion_hotpotqa"
    ts = list(read_file(PATH))
    assert [(t.outcome, t.reward, json.loads(t.metadata)["section"], json.loads(t.metadata)["trial"]) for t in ts] == [
        ("success", 1.0, "CORRECT", 1), ("failure", 0.0, "INCORRECT", 1), ("failure", 0.0, "HALTED", 1),
        ("success", 1.0, "CORRECT", 2)]
    assert [t.source_line for t in ts] == [8, 29, 45, 71]
    assert all(t.env == "search" and t.category == "multi_hop_reasoning" for t in ts)


def test_correct_agent_exact():
    t = next(read_file(PATH))
    assert t.task == "Jaclyn Stapp is married to the former frontman of a band that disbanded in what year?"
    assert [s.action for s in t.steps] == [None, "<search>Jaclyn Stapp</search>", "<search>Creed</search>",
                                           "<search>Creed (band)</search>", "<answer>2004</answer>"]
    assert t.steps[1].thought == ("I need to search Jaclyn Stapp and the former frontman of a band, find the year "
                                  "the band disbanded, then find the answer.")
    assert t.steps[1].observation.startswith("Jaclyn Nesheiwat Stapp (born July 29, 1980) is a beauty queen")
    assert t.steps[4].observation == "Answer is CORRECT" and t.steps[4].done and t.steps[4].line == 23
    assert json.loads(t.metadata)["gold_answer"] == "2004"


def test_halted_agent_has_no_terminal_step_and_trial2_reflection():
    ts = list(read_file(PATH))
    halted = ts[2]
    assert halted.steps[-1].action == "<search>John Quincy Adams</search>" and not halted.steps[-1].done
    assert json.loads(halted.metadata)["halted"] is True and json.loads(halted.metadata)["gold_answer"] == "Bath, Maine"
    retry = ts[3]
    # the reflection suffix is cut from the task and kept in metadata; same question -> same instance
    assert retry.task.startswith('The creator of "Wallace and Gromit" also created what animation comedy')
    assert "You have attempted" not in retry.task
    refl = json.loads(retry.metadata)["reflections"]
    assert len(refl) == 1 and refl[0].startswith("I got stuck in a loop where I kept trying to search 'Nick Park'")
    assert retry.steps[-1].action == "<answer>Creature Comforts</answer>"


BASE = os.path.join(FIXTURES, "formats", "real", "reflexion_hotpotqa_base_excerpt.txt")


def _cut(tmp_path, src, keep):
    """``src`` cut after its first ``keep`` characters (a log whose writer stopped mid-way)."""
    p = tmp_path / "cut.txt"
    p.write_text(open(src, encoding="utf-8").read()[:keep], encoding="utf-8")
    return str(p)


def _summary(path):
    return [(i.reason, i.line) if i.__class__.__name__ == "QuarantineRow" else (i.outcome, i.source_line)
            for i in read_file(path)]


def test_cut_after_an_action_is_truncated_not_a_success(tmp_path):
    # the tester's repro on the base log (no gold lines): cut right after the CORRECT block's
    # "Action 2:" line; the block used to be kept as a success ending in a done <search> step
    text = open(BASE, encoding="utf-8").read()
    end = text.index("\n", text.index("Action 2: Search[Nick Park]")) + 1
    assert _summary(_cut(tmp_path, BASE, end)) == [("truncated_record", 3)]
    (q,) = list(read_file(_cut(tmp_path, BASE, end)))
    assert q.detail == "last agent block is cut short: the block does not end with the observation of its last action"
    assert q.raw.splitlines()[-1] == "Action 2: Search[Nick Park]"


def test_complete_logs_keep_their_last_block_and_cuts_lose_only_it(tmp_path):
    assert _summary(BASE) == [("success", 3), ("failure", 15)]
    base = open(BASE, encoding="utf-8").read()
    # base log: the final "Answer is CORRECT" cut mid-word, and a file whose last line is cut
    assert _summary(_cut(tmp_path, BASE, base.index("Answer is CORRECT") + 12)) == [("truncated_record", 3)]
    assert _summary(_cut(tmp_path, BASE, len(base) - 1)) == [("success", 3), ("truncated_record", 15)]
    # gold-style log: every complete block ends with "Correct answer:"; cut just before trial 2's
    gold = open(PATH, encoding="utf-8").read()
    cut = _cut(tmp_path, PATH, gold.rindex("Correct answer:"))
    assert _summary(cut) == [("success", 8), ("failure", 29), ("failure", 45), ("truncated_record", 71)]
    (q,) = [i for i in read_file(cut) if i.__class__.__name__ == "QuarantineRow"]
    assert q.detail.endswith("no 'Correct answer:' line, which closes every complete block of this log")
    # the gold line itself cut (no final newline)
    assert _summary(_cut(tmp_path, PATH, len(gold) - 4))[-1] == ("truncated_record", 71)

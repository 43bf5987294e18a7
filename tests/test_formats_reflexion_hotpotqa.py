"""Reflexion HotpotQA logs: CORRECT / INCORRECT / HALTED sections on a real excerpt (see
tests/fixtures/formats/real/SOURCE.md), Search/Finish mapped to SkillRL Search tags."""
import json
import os

from pipeline.formats.discover import detect_format, read_file

PATH = os.path.join(os.path.dirname(__file__), "fixtures", "formats", "real", "reflexion_hotpotqa_excerpt.txt")


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

"""Reflexion few-shot failure logs: ALFWorld and WebShop transcripts, labelled STATUS: FAIL."""
import json

from pipeline.formats.discover import read_file

D = "data/samples/reflexion-fewshot-failures/"


def test_alfworld_failures():
    a, b = list(read_file(D + "alfworld_reflexion_few_shot_examples.txt"))
    assert (a.task, a.category, a.outcome, a.reward, len(a.steps)) == (
        "heat some mug and put it in coffeemachine.", "heat", "failure", 0.0, 10)
    assert [s.action for s in a.steps[-4:]] == ["examine stoveburner 1"] * 4
    assert a.steps[-1].observation == "On the stoveburner 1, you see a pan 2." and a.steps[-1].line == 27
    assert json.loads(a.metadata)["plan"].startswith("I was stuck in a loop in which I continually examined stoveburner 1")
    assert (b.task, b.category, b.env_instance) == ("look at bowl under the desklamp.", "look_at_obj_in_light",
                                                     "alfworld_reflexion_few_shot_examples/1")
    empties = [s.index for s in b.steps if s.action == ""]  # `> ` lines are real (invalid) actions
    assert empties == [12, 15, 16] and b.steps[12].observation == "Nothing happens."


def test_webshop_failures():
    a, b = list(read_file(D + "webshop_reflection_few_shot_examples.txt"))
    assert a.env == "webshop" and a.outcome == "failure" and a.category == "other"
    assert a.task == "i am looking for dairy free and apple variety pack of chips, and price lower than 30.00 dollars"
    assert [s.action for s in a.steps[1:]] == ["search[dairy free and apple variety pack of chips]", "click[B008D2X8C4]",
                                               "click[variety pack]", "click[0.8 ounce (pack of 24)]", "click[Buy Now]"]
    assert a.steps[2].thought == ("The first two items are not what I want. The third item is the dairy free and "
                                  "apple variety pack of chips I want.")
    assert a.steps[-1].done and a.steps[-1].observation == ""
    assert b.steps[4].action == "click[Next >]" and b.steps[4].observation == "Invalid action!"
    assert json.loads(b.metadata)["status"] == "FAIL"

"""ReAct WebShop notebook log: episodes, graded score reward, success threshold."""
import json

from pipeline.formats.discover import read_file

SAMPLE = "data/samples/react-webshop/webshop_react_episodes_sample.txt"


def test_episodes_exact():
    ts = list(read_file(SAMPLE))
    assert [(t.env_instance, t.outcome, t.reward) for t in ts] == [
        ("fixed_0", "failure", 0.0), ("fixed_1", "success", 1.0), ("fixed_2", "failure", 0.75), ("fixed_7", "success", 1.0)]
    t = ts[1]
    assert t.task == "i want a noise cancelling cosycost usb microphone, and price lower than 50.00 dollars"
    assert [s.action for s in t.steps] == [None, "search[noise cancelling cosycost usb microphone]",
                                           "click[B0972Q1T8T]", "click[Buy Now]"]
    assert t.steps[2].thought == ("The first item B0972Q1T8T is noise cancelling cosycost usb microphone and "
                                  "it is less than 50 dollars.")
    assert t.steps[3].observation == "Your score (min 0.0, max 1.0): 1.0" and t.steps[3].line == 91
    assert t.steps[0].observation.startswith("Webshop\nInstruction:\ni want a noise")
    assert ts[3].category == "beauty_health"  # "styling cream"
    assert json.loads(ts[0].metadata)["purchased"] is False


def test_threshold_is_config():
    ts = list(read_file(SAMPLE, success_threshold=0.7))
    assert [t.outcome for t in ts] == ["failure", "success", "success", "success"]

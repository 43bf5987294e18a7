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


def _edited(tmp_path, edit):
    lines = open(SAMPLE, encoding="utf-8").read().split("\n")
    edit(lines)
    p = tmp_path / "log.txt"
    p.write_text("\n".join(lines), encoding="utf-8")
    return [(i.reason, i.line) if hasattr(i, "reason") else i.env_instance for i in read_file(str(p))], p


def test_damaged_index_line_is_quarantined_not_dropped(tmp_path):
    # the tester's repro: episode 2's index line "2" -> "2a"; the whole episode used to vanish
    # (3 units in, 3 out); now it is one bad_record row at its first line, so counts reconcile
    got, p = _edited(tmp_path, lambda ls: ls.__setitem__(96, "2a"))
    assert got == ["fixed_0", "fixed_1", ("bad_record", 97), "fixed_7"]
    q = [i for i in read_file(str(p)) if hasattr(i, "reason")][0]
    assert q.raw.startswith("2a\nAction: reset\nObservation: \nWebshop \nInstruction:  \n")
    assert q.raw.splitlines()[-1] == "3 0.5833333333333334 0.3333333333333333 0.0"  # its summary line


def test_text_between_episodes_and_at_the_ends_is_quarantined(tmp_path):
    def edit(ls):
        ls.insert(95, "stray note")  # after episode 1's closing rule (line 95), before the next
        ls.insert(0, "preamble")
        ls.append("trailer")  # after the file's final newline: line 197 + 2 inserted + 1 blank + 1
    got, _ = _edited(tmp_path, edit)
    assert got == [("bad_record", 1), "fixed_0", "fixed_1", ("bad_record", 97), "fixed_2", "fixed_7",
                   ("bad_record", 201)]

"""The dataset card's usefulness lines: the think histogram and the bank table."""
from pipeline.usefulness.card import bank_lines, histogram


def test_histogram_counts_each_gain_in_its_bin():
    hist = dict(histogram([-0.5, -0.01, 0.0, 0.03, 0.3, 0.9]))
    assert sum(hist.values()) == 6
    assert hist["(-1.00, -0.20]"] == 1 and hist["(-0.05, +0.00]"] == 2 and hist["(+0.20, +1.00]"] == 2


def test_bank_table_sorts_by_score_and_says_why_a_score_lies_below_its_interval():
    rows = [{"title": "Cool in Fridge", "kind": "task_specific",
             "usefulness": {"score": 0.04, "lo": 0.01, "hi": 0.07, "n": 4, "method": "alone"}},
            {"title": "Filter by Price", "kind": "general",
             "usefulness": {"score": -0.5, "lo": -0.01, "hi": 0.03, "n": 8, "method": "alone+actionset"}},
            {"title": "Unscored", "kind": "general", "usefulness": None}]
    lines = bank_lines(rows)
    assert lines[2] == "| Filter by Price | general | -0.500 (capped: asks for actions the env lacks) | [-0.010, +0.030] | 8 |"
    assert lines[3] == "| Cool in Fridge | task_specific | +0.040 | [+0.010, +0.070] | 4 |"
    assert len([ln for ln in lines if ln.startswith("| ")]) == 3 and "minus the share" in lines[-1]
    assert bank_lines(rows[:1])[-1].startswith("| Cool in Fridge") and bank_lines(rows[2:]) == ["No bank item was scored."]

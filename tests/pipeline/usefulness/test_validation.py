"""AUROC and precision/recall against labels, and what each rule adds to the score."""
import pytest

from pipeline.usefulness.validation import auroc, confusion, evaluate, rule_extras


def test_auroc_counts_pairs_and_ties_half():
    assert auroc([0.9, 0.1, 0.5], [True, False, False]) == 1.0
    assert auroc([0.1, 0.9], [True, False]) == 0.0
    assert auroc([0.5, 0.5], [True, False]) == 0.5
    assert auroc([0.3], [True]) is None


def test_confusion_precision_and_catch_rates():
    labels = ["helps", "helps", "empty", "harmful"]
    c = confusion([True, False, True, False], labels)
    assert c == {"kept": 2, "rejected": 2, "precision": 0.5, "recall": 0.5, "catch_precision": 0.5,
                 "catch_recall": 0.5}


def test_evaluate_combines_rules_and_score():
    labels = ["helps", "empty", "harmful", "helps"]
    report = evaluate([0.2, 0.0, -0.1, 0.05], [False, False, False, True], labels, threshold=0.0)
    assert report["auroc"] == 1.0
    assert report["score"]["kept"] == 2 and report["score"]["precision"] == 1.0
    assert report["rules"]["rejected"] == 1 and report["rules"]["catch_precision"] == 0.0
    assert report["both"] == pytest.approx({"kept": 1, "rejected": 3, "precision": 1.0, "recall": 0.5,
                                            "catch_precision": 0.6667, "catch_recall": 1.0})


def test_rule_extras_counts_only_what_the_score_keeps():
    extras = rule_extras([["a"], ["a", "b"], []], [0.3, -0.2, 0.1], ["harmful", "empty", "helps"], 0.0)
    assert extras == {"a": {"hits": 2, "extra_helps": 0, "extra_empty": 0, "extra_harmful": 1},
                      "b": {"hits": 1, "extra_helps": 0, "extra_empty": 0, "extra_harmful": 0}}

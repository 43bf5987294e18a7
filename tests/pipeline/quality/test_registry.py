"""The content-rule registry: every rule's examples through the stages' own checks, every reason
reachable and registered, a new rule picked up by a stage, the generated reference, the phrase
lists and their provenance."""
from __future__ import annotations

import ast
import datetime
import importlib
import inspect
import os

import pytest

from pipeline import quality
from pipeline.bank.judge import ItemJudge
from pipeline.core.config import QualityConfig
from pipeline.core.records import Step, Trajectory
from pipeline.quality import docs, phrases
from pipeline.quality.registry import Check, Registry, Rule, Target, passes, rejects
from pipeline.quality.rulebook import REGISTRY
from pipeline.quality.violation import Violation
from pipeline.stages import distill
from tests.helpers.paths import REPO

EXAMPLES = [(r.name, n, e) for r in REGISTRY.rules for n, e in enumerate(r.examples)]


@pytest.mark.parametrize("rule,n,example", EXAMPLES, ids=[f"{r}-{n}" for r, n, _ in EXAMPLES])
def test_every_rule_rejects_and_passes_its_examples(rule, n, example):
    """Each example runs through every check of its target (env and kind as given): a rejected
    one gets a violation with the rule's reason, a passed one none."""
    reasons = [v.reason for v in REGISTRY.run_example(example)]
    assert (rule in reasons) is example.reject, (example.output, reasons)


def test_each_rule_has_an_example_of_each_verdict_on_a_target_that_checks_it():
    for r in REGISTRY.rules:
        targets = {c.target for c in REGISTRY.checks_of(r.name)}
        assert {e.target for e in r.examples} <= targets, r.name
        assert any(e.reject for e in r.examples) and any(not e.reject for e in r.examples), r.name
    assert len(REGISTRY.rules) == 33 and len(EXAMPLES) >= 66


def test_every_reason_is_checked_on_a_target_a_stage_judges():
    """A registered reason has a check, on a target whose declared judge runs that target."""
    for r in REGISTRY.rules:
        assert REGISTRY.checks_of(r.name), f"{r.name} has no check"
    for t in REGISTRY.targets:
        assert t.run_by and t.stages, t.name
        for dotted in t.run_by:
            module, _, name = dotted.rpartition(".")
            fn = getattr(importlib.import_module(module), name)
            assert f'run("{t.name}"' in inspect.getsource(fn), f"{dotted} does not judge target {t.name}"


def _violation_reasons(path: str) -> set[str]:
    """The reasons a module writes as ``Violation("<reason>", ...)``."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") ==
            "Violation" and n.args and isinstance(n.args[0], ast.Constant)}


def test_every_reason_the_rules_can_give_is_registered_and_declared():
    """Every reason a rule module writes is a registered rule given by some check, and every
    registered rule is written somewhere (no reason only one side knows)."""
    folder = os.path.join(REPO, "pipeline", "quality")
    written = set().union(*(_violation_reasons(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".py")))
    declared = {r for c in REGISTRY.checks for r in c.reasons}
    assert written == declared == set(REGISTRY.reasons())


def test_a_check_that_gives_an_undeclared_reason_fails():
    reg = REGISTRY.copy()
    reg.add_check(Check("think.wrong", "think", ("no_words",), lambda s: [Violation("off_topic", "x")]))
    traj = _traj(["go to desk 1"])
    with pytest.raises(RuntimeError, match=r"think.wrong gave undeclared reasons \['off_topic'\]"):
        distill.think_violations([{"step_index": 0, "think": "The pen may be on desk 1."}], _entries(traj), traj,
                                 QualityConfig(off_topic_threshold=-1), registry=reg)


def test_registry_declarations_are_checked():
    reg = REGISTRY.copy()
    with pytest.raises(ValueError, match="rule no_words is registered already"):
        reg.add_rule(REGISTRY.rule("no_words"))
    with pytest.raises(ValueError, match=r"unregistered reasons \['nope'\]"):
        reg.add_check(Check("think.nope", "think", ("nope",), lambda s: []))
    with pytest.raises(ValueError, match="unknown target 'poem'"):
        reg.add_check(Check("poem.x", "poem", ("no_words",), lambda s: []))
    with pytest.raises(ValueError, match="needs an output it rejects and one it passes"):
        Rule("lonely", "no examples", (rejects("think", "x"),))
    with pytest.raises(ValueError, match="policy 'warn'"):
        Rule("x", "y", (rejects("think", "a"), passes("think", "b")), policy="warn")


def _traj(actions: list[str], task: str = "examine the pen with the desklamp") -> Trajectory:
    steps = [Step(0, None, "You are in the middle of a room. You see a desk 1.")]
    steps += [Step(i, a, "On the desk 1, you see a pen 1.") for i, a in enumerate(actions, 1)]
    return Trajectory("t", "alfworld", "e", task, "look_at_obj_in_light", "success", 1.0, steps, "u", "f", 0)


def _entries(traj: Trajectory) -> dict[int, dict]:
    return {e["step_index"]: e for e in distill.step_entries(traj, None)}


#: A throwaway rule: a think written in capitals.
SHOUTING = Rule("shouting", "a think is written in capital letters", (
    rejects("think", "I GO TO THE DESK FOR THE PEN.", actions=["go to desk 1"]),
    passes("think", "I go to the desk for the pen.", actions=["go to desk 1"])))


def _shouting(s) -> list[Violation]:
    return [Violation("shouting", f"the think for step {i} shouts") for i, t in s.pairs if t.isupper()]


def test_a_new_rule_is_one_registration_and_distill_runs_it():
    """Adding a rule: register it (its examples, its check on target ``think``) in a registry;
    distill's answer check, given that registry, quarantines with it, and the default is untouched."""
    reg = REGISTRY.copy()
    reg.register(SHOUTING, Check("think.shouting", "think", ("shouting",), _shouting, reads="each think"))
    assert [e.reject for e in SHOUTING.examples] == [("shouting" in [v.reason for v in reg.run_example(e)])
                                                     for e in SHOUTING.examples] == [True, False]
    traj = _traj(["go to desk 1"])
    check = distill.content_check(list(_entries(traj).values()), traj, QualityConfig(off_topic_threshold=-1),
                                  quality.Tally(), registry=reg)
    assert check([{"step_index": 0, "think": "THE PEN MAY BE ON DESK 1, SO I GO THERE."}]) == \
        "shouting: the think for step 0 shouts"
    assert check([{"step_index": 0, "think": "The pen may be on desk 1, so I go there."}]) is None
    assert "shouting" not in REGISTRY.reasons() and reg.rules_for("think")[-1].name == "think.shouting"


def test_a_new_bank_rule_reaches_the_item_judge():
    reg = REGISTRY.copy()
    reg.register(Rule("shouting_title", "a skill title in capitals", (
        rejects("bank_item", {"title": "GO", "principle": "p", "when_to_apply": "w"}),
        passes("bank_item", {"title": "Go", "principle": "p", "when_to_apply": "w"}))),
        Check("bank.shouting_title", "bank_item", ("shouting_title",),
              lambda s: [Violation("shouting_title", f"{s.name}.title shouts")] if s.value("title").isupper() else []))
    items = [{"title": "Check Every Drawer", "principle": "Open each drawer once before moving on to the shelves.",
              "when_to_apply": "When the object is not in view."},
             {"title": "CHECK EVERY DRAWER", "principle": "Open each drawer once before moving on to the shelves.",
              "when_to_apply": "When the object is not in view."}]
    per = ItemJudge("general", QualityConfig(off_topic_threshold=-1), env="alfworld").judge(items, registry=reg)
    assert [[v.message() for v in vs] for vs in per] == [[], ["shouting_title: skills[1].title shouts"]]


def test_a_violation_carries_its_item_index():
    """``duplicate_mistake`` and ``off_topic`` of an answer name their item by index, not in the text."""
    cause = "The agent did not remember where the mug is located in the kitchen."
    items = [{"description": "Forgot the mug.", "why_it_happens": cause, "how_to_avoid": "Note each object seen."},
             {"description": "Lost track.", "why_it_happens": "Did not look.", "how_to_avoid": "Open every drawer."},
             {"description": "Forgot the cup.", "why_it_happens": cause.replace("mug", "cup"),
              "how_to_avoid": "Check the cabinets once."}]
    [dup] = REGISTRY.run("bank_answer", REGISTRY.target("bank_answer").from_example(
        rejects("bank_answer", items, kind="mistake")))
    assert (dup.reason, dup.item) == ("duplicate_mistake", 2)
    per = ItemJudge("mistake", QualityConfig(off_topic_threshold=-1)).judge(items)
    assert [[v.reason for v in vs] for vs in per] == [[], [], ["duplicate_mistake"]]


def test_the_think_checks_run_in_distills_order():
    """The order decides the quarantine reason of an answer with several violations."""
    assert [c.name for c in REGISTRY.rules_for("think", "alfworld")] == [
        "think.degenerate", "think.reused", "think.future_leak", "think.false_comparison", "think.false_game_fact",
        "think.ungrounded", "think.restated_action", "think.prompt_echo", "think.lists_observation",
        "think.alignment", "think.example_copy", "think.cut_off", "think.off_topic"]
    assert "think.false_game_fact" not in [c.name for c in REGISTRY.rules_for("think", "webshop")]
    assert [c.name for c in REGISTRY.rules_for("bank_answer", "alfworld", "general")] == ["bank.off_topic"]


def test_the_rule_reference_is_generated_from_the_registry():
    with open(os.path.join(REPO, docs.DEFAULT_PATH), encoding="utf-8") as f:
        committed = f.read()
    assert committed == docs.render(REGISTRY), "run: python -m pipeline.quality.docs"


def test_every_phrase_list_says_where_it_comes_from_and_is_used():
    assert phrases.files() == ["alfworld_facts.toml", "bank_phrases.toml", "feelings.toml", "textworld_facts.toml",
                               "vague.toml", "webshop_controls.toml"]
    sources = "".join(open(os.path.join(REPO, "pipeline", "quality", f), encoding="utf-8").read()
                      for f in ("alignment.py", "bankrules.py", "gamefacts.py", "vague.py"))
    total = 0
    for f in phrases.files():
        for table in phrases.tables(f):
            found = phrases.entries(f, table)
            total += len(found)
            assert all(p.source and p.stage and p.commit and p.added >= datetime.date(2026, 1, 1) for p in found)
            assert f'"{f}", "{table}"' in sources, f"{f} [{table}] is read by no rule"
    assert total == 81


def test_a_phrase_entry_without_its_source_is_refused(tmp_path, monkeypatch):
    from importlib import resources
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.toml").write_text('[[t]]\npattern = "a"\nseen = ""\nsource = ""\nstage = "skills"\n'
                                              'added = 2026-12-04\ncommit = "0d025d8"\n')
    monkeypatch.setattr(resources, "files", lambda package: tmp_path)
    phrases.entries.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"x.toml \[t\] entry 0: missing or wrong \['source'\]"):
            phrases.entries("x.toml", "t")
    finally:
        phrases.entries.cache_clear()


def test_targets_build_their_subjects_from_examples():
    assert isinstance(REGISTRY.target("think"), Target)
    subject = REGISTRY.target("memory").from_example(passes("memory", {"contextual_description": "x"}, kind="failure",
                                                            task="t", actions=["go to desk 1"]))
    assert (subject.env, subject.kind, [s.action for s in subject.traj.steps]) == ("alfworld", "failure",
                                                                                  [None, "go to desk 1"])
    assert isinstance(Registry().reasons(), tuple)

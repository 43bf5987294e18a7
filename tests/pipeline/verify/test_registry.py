"""The checker registry: built-ins in order, user checkers by register() or entry point first."""
from __future__ import annotations

import importlib.metadata

import pytest

from pipeline import verify
from pipeline.verify import BUILTIN, Checker, Verdict, checker_classes, register, rule_names


class ToyChecker(Checker):
    """A user's checker for a toy environment (loaded through an entry point below)."""
    name = "toy"
    RULES = {"no_toys": "the agent must not play"}

    def applies(self, traj):
        return traj.env == "toy"

    def check(self, traj, options):
        return Verdict(self.name)


def test_builtin_checkers_and_their_rules():
    assert [c.name for c in checker_classes()] == ["skillrl_admissible", "alfworld", "webshop", "search", "textworld"]
    rules = rule_names()
    assert set(rules["alfworld"]) == {"not_in_grammar", "unknown_receptacle", "unknown_object", "not_at_receptacle",
                                      "receptacle_closed", "object_not_there", "holds_two", "not_held",
                                      "wrong_appliance", "env_rejected", "observation_contradicts", "goal_not_reached"}
    assert set(rules["webshop"]) == {"not_in_grammar", "click_not_shown", "search_no_box", "env_rejected",
                                     "goal_not_reached"}


def test_an_entry_point_checker_is_asked_first_and_its_rules_are_known(monkeypatch):
    ep = importlib.metadata.EntryPoint(name="toy", value=f"{__name__}:ToyChecker", group=verify.ENTRY_POINT_GROUP)
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: [ep] if kw.get("group") == verify.ENTRY_POINT_GROUP else real(**kw))
    assert [c.name for c in checker_classes()][:2] == ["toy", "skillrl_admissible"]
    assert rule_names()["toy"] == {"no_toys": "the agent must not play"}
    from pipeline.core.config import from_dict
    from pipeline.runconfig import check_verify_rules
    check_verify_rules(from_dict({"verify": {"flag_rules": ["toy.no_toys"]}}).verify)  # known: no ConfigError


def test_register_replaces_by_name_and_refuses_a_non_checker():
    class MyWebshop(ToyChecker):
        name = "webshop"
    register(MyWebshop)
    try:
        names = [c for c in checker_classes()]
        assert names[0] is MyWebshop and BUILTIN[2] not in names
    finally:
        verify._REGISTERED.pop("webshop")
    with pytest.raises(TypeError, match="is not a Checker subclass with a name"):
        register(dict)

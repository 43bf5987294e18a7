"""WebShop rules on real ReAct episodes (tests/fixtures/verify/SOURCE.md)."""
from __future__ import annotations

import os

from pipeline.core.records import Trajectory
from pipeline.formats.discover import read_file
from pipeline.verify.webshop import WebshopChecker, clickables
from tests.helpers.paths import FIXTURES

EPISODES = {t.env_instance: t for t in read_file(os.path.join(FIXTURES, "verify", "react_webshop_episodes.txt"))
            if isinstance(t, Trajectory)}


def found(session: str) -> list[tuple[int, str, str]]:
    return [(f.index, f.rule, f.kind) for f in WebshopChecker().check(EPISODES[session], {"success_threshold": 1.0})
            .findings]


def test_a_clean_purchase_has_no_finding():
    v = WebshopChecker().check(EPISODES["fixed_1"], {"success_threshold": 1.0})
    assert (v.findings, v.goal_reached) == ([], True)


def test_no_purchase_and_a_low_score_do_not_reach_the_goal():
    assert found("fixed_0") == [(4, "goal_not_reached", "goal")]
    v = WebshopChecker().check(EPISODES["fixed_2"], {"success_threshold": 1.0})
    assert v.findings[0].detail == "purchase scored 0.75 < 1" and v.goal_reached is False
    assert WebshopChecker().check(EPISODES["fixed_2"], {"success_threshold": 0.5}).findings == []


def test_refused_clicks_are_explained_by_the_page():
    """fixed_193 clicks [1B] where the page shows [1b]: refused, the case matters."""
    assert found("fixed_193")[:2] == [(4, "env_rejected", "rejected"), (4, "click_not_shown", "rejected")]
    assert {"1b", "1B"} & clickables(EPISODES["fixed_193"].steps[2].observation) == {"1b"}
    # fixed_3: [Next >] is shown, yet refused: only the environment's own answer explains it
    assert found("fixed_3")[0] == (4, "env_rejected", "rejected")


def test_search_without_a_box_and_actions_outside_the_grammar():
    assert (2, "search_no_box", "rejected") in found("fixed_280")  # the first search left an empty page
    assert (9, "not_in_grammar", "rejected") in found("fixed_132")  # exit[exit]
    assert EPISODES["fixed_132"].steps[9].action == "exit[exit]"


def test_a_click_the_page_does_not_show_is_impossible_when_the_record_shows_it_answered():
    t = EPISODES["fixed_1"]
    steps = list(t.steps)
    steps[2] = steps[2].__class__(**{**steps[2].__dict__, "action": "click[B0NOTSHOWN]"})
    v = WebshopChecker().check(Trajectory(**{**t.__dict__, "steps": steps}), {"success_threshold": 1.0})
    assert [(f.index, f.rule, f.kind) for f in v.findings] == [(2, "click_not_shown", "impossible")]

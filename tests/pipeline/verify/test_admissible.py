"""SkillRL rollout dumps: the action must be in the admissible list of its state."""
from __future__ import annotations

import dataclasses
import os

from pipeline.core.records import Trajectory
from pipeline.formats.discover import read_file
from pipeline.verify.admissible import AdmissibleChecker, admitted
from tests.helpers.paths import REPO


def sample(name: str) -> Trajectory:
    path = os.path.join(REPO, "data", "samples", "skillrl-rollouts", "env000", name)
    return next(t for t in read_file(path) if isinstance(t, Trajectory))


def test_the_synthetic_samples_take_objects_their_lists_do_not_offer():
    """The shipped synthetic rollouts list only 'go to' actions, yet take and move a cup: the
    record shows both taking effect, so they are impossible (not refusals to cut)."""
    t = sample("test1.txt")
    v = AdmissibleChecker().check(t, {})
    assert [(f.index, f.rule, f.kind) for f in v.findings] == [(4, "not_admissible", "impossible"),
                                                                (6, "not_admissible", "impossible")]
    assert t.steps[4].action == "take cup 3 from countertop 2"


def test_a_refused_action_is_a_rejected_step():
    t = sample("test1.txt")
    steps = [dataclasses.replace(s, action="open fridge 9", observation="Nothing happens.") if s.index == 2 else s
             for s in t.steps]
    v = AdmissibleChecker().check(dataclasses.replace(t, steps=steps), {})
    assert (2, "not_admissible", "rejected") in [(f.index, f.rule, f.kind) for f in v.findings]


def test_membership_ignores_case_and_spaces_and_any_search_query_matches():
    assert admitted("Go to  desk 4", ["go to desk 4"]) and not admitted("go to desk 5", ["go to desk 4"])
    assert admitted("search[red shoes]", ["search[<your query>]", "click[back to search]"])


def test_textworld_express_rollouts_from_the_engine():
    """A gold rollout of the engine, written as a rollout dump, with one command outside its
    admissible list answered as the engine answers it: a refusal, kind rejected."""
    import pytest
    pytest.importorskip("textworld_express")
    from pipeline.envs.sim.textworld import EnvTask, TextWorldExpressEnv
    from pipeline.verify.textworld import gold_trajectory
    with TextWorldExpressEnv() as env:
        gold = gold_trajectory(env, EnvTask("twc", 3))
        env.reset(EnvTask("twc", 3))
        refusal = env.step("put flour in shelf").observation
    t = dataclasses.replace(gold, source_format="skillrl_txt")
    assert AdmissibleChecker().check(t, {}).findings == []
    bad = dataclasses.replace(t.steps[0], index=1, action="put flour in shelf", observation=refusal)
    t = dataclasses.replace(t, steps=[t.steps[0], bad] + [dataclasses.replace(s, index=s.index + 1) for s in t.steps[1:]])
    assert refusal == "Unknown action: I'm not sure what you mean."
    assert [(f.index, f.rule, f.kind) for f in AdmissibleChecker().check(t, {}).findings] == [
        (1, "not_admissible", "rejected")]

"""TextWorld Express: the engine is the truth; gold rollouts replay clean, changed ones do not."""
from __future__ import annotations

import dataclasses

import pytest

from pipeline.core.records import Trajectory
from pipeline.verify.textworld import TextworldChecker, gold_trajectory, task_of

pytest.importorskip("textworld_express")


@pytest.fixture(scope="module")
def played():
    from pipeline.envs.sim.textworld import EnvTask, TextWorldExpressEnv
    with TextWorldExpressEnv() as env:
        yield [gold_trajectory(env, EnvTask("twc", seed)) for seed in (0, 1)]


def test_gold_rollouts_replay_with_no_finding(played):
    checker = TextworldChecker()
    try:
        verdicts = [checker.check(t, {}) for t in played]
    finally:
        checker.close()
    assert [(v.findings, v.goal_reached) for v in verdicts] == [([], True), ([], True)]


def test_a_dropped_step_and_an_invalid_action_are_caught(played):
    t = played[0]
    dropped = dataclasses.replace(t, steps=[t.steps[0]] + [dataclasses.replace(s, index=s.index - 1)
                                                             for s in t.steps[2:]])
    invalid = dataclasses.replace(t, steps=t.steps[:1] + [dataclasses.replace(t.steps[1], action="eat the table")]
                                  + t.steps[2:])
    checker = TextworldChecker()
    try:
        first = [(f.index, f.rule) for f in checker.check(dropped, {}).findings][:1]
        bad = [(f.index, f.rule, f.kind) for f in checker.check(invalid, {}).findings]
    finally:
        checker.close()
    assert first[0][1] in ("env_rejected", "observation_mismatch")
    assert bad[:2] == [(1, "env_rejected", "impossible"), (1, "observation_mismatch", "impossible")]


def test_the_game_comes_from_task_key_or_instance():
    t = Trajectory("x", "textworld", "coin-dev-7", "", "find_coin", "failure", 0.0, [], "", "", 0)
    assert (task_of(t).game, task_of(t).fold, task_of(t).seed) == ("coin", "dev", 7)
    assert task_of(dataclasses.replace(t, env_instance="env000")) is None
    v = TextworldChecker().check(dataclasses.replace(t, env_instance="env000"), {})
    assert not v.checked and v.note.startswith("no game to rebuild")

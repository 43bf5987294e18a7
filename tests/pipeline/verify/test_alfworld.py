"""ALFWorld rules on real records (tests/fixtures/verify/SOURCE.md names each one)."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

from pipeline.core.records import Trajectory
from pipeline.formats.discover import read_file
from pipeline.verify import alfworld_text as tx
from pipeline.verify.alfworld import AlfworldChecker
from tests.helpers.paths import FIXTURES

HERE = os.path.join(FIXTURES, "verify")


def records(name: str) -> dict[str, Trajectory]:
    """The trajectories of fixture ``name`` by source id (ETO ``id``, ReAct key, else instance)."""
    out = {}
    for t in read_file(os.path.join(HERE, name)):
        if isinstance(t, Trajectory):
            meta = json.loads(t.metadata)
            out[meta.get("id") or meta.get("key") or t.env_instance] = t
    return out


ETO = records("eto_alfworld_records.json")


def findings(t: Trajectory) -> list[tuple[int, str]]:
    return [(f.index, f.rule) for f in AlfworldChecker().check(t, {}).findings]


def with_actions(t: Trajectory, **actions: str) -> Trajectory:
    """``t`` with the actions of some steps replaced (``s3="go to toaster 1"``); observations kept."""
    steps = [dataclasses.replace(s, action=actions.get(f"s{s.index}", s.action)) for s in t.steps]
    return dataclasses.replace(t, steps=steps)


def test_alfworld_9_heats_an_egg_it_never_took_on_a_table_the_room_does_not_have():
    v = AlfworldChecker().check(ETO["alfworld_9"], {})
    assert [(f.index, f.rule, f.kind) for f in v.findings] == [
        (1, "unknown_receptacle", "impossible"), (5, "not_held", "impossible"),
        (6, "unknown_receptacle", "impossible"), (6, "observation_contradicts", "impossible"),
        (7, "unknown_receptacle", "impossible"), (7, "not_held", "impossible"), (7, "goal_not_reached", "goal")]
    assert v.findings[0].detail == ("'dining table 1' is not a receptacle of this room (the room has 'diningtable 1'; "
                                    "the game needs the exact name)")
    assert v.findings[0].repair == "go to diningtable 1"
    assert v.findings[1].detail == "the agent holds nothing, not 'egg 1'"
    assert v.findings[3].detail == ("egg 1 lay on 'diningtable 1' and was not taken, but the observation no longer "
                                    "lists it")
    assert v.goal_reached is False


@pytest.mark.parametrize("rid", ["alfworld_0", "alfworld_53"])
def test_clean_eto_records_reach_their_goal_with_no_finding(rid):
    v = AlfworldChecker().check(ETO[rid], {})
    assert (v.findings, v.goal_reached) == ([], True)


def test_real_game_transcripts_give_no_finding():
    """ReAct's transcripts are real game output: opening the fridge from the middle of the room
    is allowed, and "OK." after the room line is not a receptacle."""
    react = records("react_alfworld_prompts.json")
    assert {k: (findings(t), AlfworldChecker().check(t, {}).goal_reached) for k, t in react.items()} == {
        "react_heat_0": ([], True), "act_examine_0": ([], True)}


def test_goal_not_reached_when_the_heat_step_is_missing():
    assert findings(ETO["alfworld_6"]) == [(9, "goal_not_reached")]  # puts a cup it never heated in the fridge


def test_unknown_object_not_in_grammar_holds_two_and_contradictions_on_real_records():
    assert findings(ETO["alfworld_12"])[:2] == [(1, "unknown_receptacle"), (2, "unknown_object")]
    assert findings(ETO["alfworld_48"]) == [(6, "not_in_grammar")]  # 'look at alarmclock under desklamp'
    assert findings(ETO["alfworld_55"])[0] == (7, "holds_two")
    assert findings(ETO["alfworld_23"]) == [(16, "observation_contradicts")]  # the held saltshaker listed on drawer 1


def test_env_rejected_reads_nothing_happens():
    failures = records("alfworld_reflexion_few_shot_examples.txt")
    t = failures["alfworld_reflexion_few_shot_examples/1"]
    assert [(i, r) for i, r in findings(t) if r == "env_rejected"] == [(4, "env_rejected"), (12, "env_rejected"),
                                                                        (15, "env_rejected"), (16, "env_rejected")]
    assert t.steps[4].action == "go to drawer 3" and t.steps[4].observation == "Nothing happens."


def test_rules_no_real_record_breaks_on_a_changed_clean_record():
    """alfworld_53 (go to sinkbasin 1, take mug 1, go to microwave 1, heat mug 1, go to
    coffeemachine 1, put mug 1) and alfworld_0, with the actions of some steps replaced."""
    mug = ETO["alfworld_53"]
    # the heat is refused, so the mug is not hot when it is put in the coffeemachine
    assert findings(with_actions(mug, s3="go to toaster 1")) == [(4, "not_at_receptacle"), (6, "goal_not_reached")]
    assert findings(with_actions(mug, s3="go to coffeemachine 1", s4="heat mug 1 with coffeemachine 1"))[0] == \
        (4, "wrong_appliance")
    closed = findings(with_actions(mug, s5="go to microwave 1", s6="put mug 1 in/on microwave 1"))
    assert closed == [(6, "receptacle_closed"), (6, "goal_not_reached")]  # the microwave was seen closed
    paper = with_actions(ETO["alfworld_0"], s2="go to toiletpaperhanger 1", s3="take toiletpaper 1 from toiletpaperhanger 1")
    assert findings(paper)[0] == (3, "object_not_there")


def test_command_templates_and_names():
    assert tx.parse_command("put mug 1 in/on coffeemachine 1") == tx.Command("put", ("mug 1", "coffeemachine 1"))
    assert tx.parse_command("move mug 1 to coffeemachine 1") == tx.Command("put", ("mug 1", "coffeemachine 1"))
    assert tx.parse_command("look at alarmclock under desklamp") is None
    assert tx.items("a cup 3, an egg 1, and a fork 2") == ["cup 3", "egg 1", "fork 2"]
    assert tx.goal_names("heat some egg and put it in diningtable.") == ("egg", "diningtable")
    assert tx.goal_names("look at bowl under the desklamp.") == ("bowl", "desklamp")
    assert tx.goal_names("find two pen and put them in garbagecan.") == ("pen", "garbagecan")
    assert tx.goal_names("find some apple and put it in sidetable.") == ("apple", "sidetable")  # ReAct put_1

"""pipeline.quality.metrics: each data-quality figure on a small input with a known value."""
from __future__ import annotations

import json

import pytest

from pipeline.quality import metrics
from tests.helpers.llm_stage_data import cool_apple, heat_mug


def pair(tid, k, think, action, env="alfworld", category="cool", skills=("s1",), instr=None):
    return {"trajectory_id": tid, "step_index": k, "think": think, "action": action, "env": env,
            "category": category, "skill_ids_used": list(skills), "instruction": instr or f"{tid}/{k}",
            "output": f"<think>{think}</think>", "synthetic": False}


COOL, HEAT = cool_apple(), heat_mug()
TRAJS = {COOL.trajectory_id: COOL, HEAT.trajectory_id: HEAT}
SKILLS = {"s1": "Verify Temperature Tools. Check the appliance state before transforming an object.",
          "s2": "Search Receptacles Systematically. Open closed containers in a fixed order."}


def test_skill_use_rate_counts_only_words_beyond_task_observation_and_action():
    pairs = [
        # shares "appliance" + "state" with s1 and neither is in task/observation/action: uses a skill
        pair(COOL.trajectory_id, 4, "check the appliance state, then cool apple", "cool apple 1 with fridge 1"),
        # "fridge", "apple", "cool" are in the task/action: no skill language
        pair(COOL.trajectory_id, 3, "go to the fridge to cool the apple", "go to fridge 1"),
        # only one shared word ("containers") with s2: below min_shared=2
        pair(HEAT.trajectory_id, 1, "look in containers", "go to cabinet 1", category="heat", skills=("s2",)),
        pair(HEAT.trajectory_id, 2, "no skills shown here", "take mug 1 from cabinet 1", category="heat", skills=()),
    ]
    assert metrics.skill_use_rate(pairs, SKILLS, TRAJS, 2) == {"rate": round(1 / 3, 4), "pairs_with_skills": 3,
                                                                "using": 1, "min_shared": 2}
    assert metrics.skill_use_rate(pairs, SKILLS, TRAJS, 1)["using"] == 2
    assert metrics.skill_use_rate([], SKILLS, TRAJS, 2)["rate"] is None


def test_skill_block_diversity():
    pairs = [pair("a", 1, "t", "x", skills=("s1",)), pair("a", 2, "t", "x", skills=("s1",)),
             pair("b", 1, "t", "x", category="heat", skills=("s1", "s2")),
             pair("c", 1, "t", "x", category="heat", skills=("s2", "s1"))]
    got = metrics.skill_block_diversity(pairs, {})
    assert got == {"blocks": 3, "per_category": {"alfworld/cool": 1, "alfworld/heat": 2}, "tasks": 3,
                   "blocks_per_task": 1.0}


def test_trajectory_completeness_needs_the_goal_and_the_final_action():
    assumed = heat_mug("traj-assumed")
    assumed.metadata = json.dumps({"outcome_source": "assumed"})
    trajs = dict(TRAJS, **{assumed.trajectory_id: assumed})
    pairs = [pair(COOL.trajectory_id, 5, "t", "go to countertop 1"),
             pair(COOL.trajectory_id, 6, "t", "put apple 1 in/on countertop 1"),  # final action 6 exported
             pair(HEAT.trajectory_id, 1, "t", "go to cabinet 1"),                 # final action 3 missing
             pair(assumed.trajectory_id, 3, "t", "heat mug 1 with microwave 1")]  # goal only assumed
    assert metrics.trajectory_completeness(pairs, trajs) == {"rate": 0.5, "pairs": 4, "complete_pairs": 2}


def test_terminal_action_coverage():
    pairs = [pair("a", 6, "t", "put apple 1 in/on countertop 1"), pair("b", 1, "t", "go to cabinet 1"),
             pair("w", 3, "t", "click[Buy Now]", env="webshop"), pair("v", 1, "t", "search[red shoes]", env="webshop"),
             pair("q", 1, "t", "<answer>Paris</answer>", env="search"), pair("tw", 1, "t", "take coin", env="textworld")]
    assert metrics.terminal_action_coverage(pairs) == {
        "alfworld": {"trajectories": 2, "with_terminal": 1, "rate": 0.5},
        "search": {"trajectories": 1, "with_terminal": 1, "rate": 1.0},
        "webshop": {"trajectories": 2, "with_terminal": 1, "rate": 0.5}}


@pytest.mark.parametrize("action,kind", [("go to desk 1", "go"), ("click[Buy Now]", "click"), ("search[x y]", "search"),
                                         ("<answer>Paris</answer>", "answer"), ("", "")])
def test_action_type(action, kind):
    assert metrics.action_type(action) == kind


def test_action_entropy_bits():
    pairs = [pair("a", 1, "t", a) for a in ("go to desk 1", "go to bed 1", "take pen 1 from desk 1",
                                            "put pen 1 in/on bed 1")]
    pairs.append(pair("w", 1, "t", "click[buy now]", env="webshop"))
    assert metrics.action_entropy(pairs) == {"alfworld": {"bits": 1.5, "types": 3},
                                            "webshop": {"bits": 0.0, "types": 1}}


def test_think_length_and_duplicates():
    pairs = [pair("a", 1, "one two three", "x"), pair("a", 2, "one", "x"), pair("a", 3, "a b c d e", "x"),
             pair("a", 3, "a b c d e", "x")]
    assert metrics.think_length(pairs) == {"mean": 3.5, "median": 4.0, "min": 1, "max": 5}
    assert metrics.duplicate_pair_rate(pairs) == 0.25
    assert metrics.duplicate_pair_rate([]) is None
    assert metrics.think_length([])["mean"] is None


def test_all_metrics_keys():
    got = metrics.all_metrics([pair(COOL.trajectory_id, 6, "t", "put apple 1 in/on countertop 1")], SKILLS, TRAJS, 2)
    assert sorted(got) == ["action_entropy", "duplicate_pair_rate", "pairs", "skill_block_diversity", "skill_use",
                           "terminal_action_coverage", "think_length", "trajectory_completeness"]
    assert got["trajectory_completeness"]["rate"] == 1.0


def test_export_writes_the_metrics_to_the_manifest_and_the_card(tmp_path):
    """Stage export on a dedupe artifact (cool_apple) and two of its pairs: the manifest carries
    the figures, the card says how many pairs survive and why the others did not."""
    import os

    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.config import PipelineConfig
    from pipeline.core.records import SFT_PAIR_SCHEMA, SKILL_SCHEMA, to_table
    from pipeline.engine.runner import run_stage
    from pipeline.stage.stage import StageContext
    from tests.helpers.llm_stage_data import write_trajectories
    from tests.helpers.build_pairs_data import SKILL, pair as export_pair

    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [COOL])
    pairs = [dict(export_pair(i, COOL.env_instance, category="cool"), trajectory_id=COOL.trajectory_id, step_index=k,
                  action=a, think="verify before answering, then act")
             for i, (k, a) in enumerate([(5, "go to countertop 1"), (6, "put apple 1 in/on countertop 1")])]
    store.write("build_pairs", to_table(pairs, SFT_PAIR_SCHEMA), [],
                {"fingerprint": "v-fp", "counts": {"units_in": 3, "out": 2, "quarantine_reasons": {"short_think": 1}}})
    store.write("usefulness", to_table(pairs, SFT_PAIR_SCHEMA), [],
                {"fingerprint": "u-fp", "counts": {"units_in": 2, "out": 2, "quarantine_reasons": {}}})
    store.write("skills", to_table([SKILL], SKILL_SCHEMA), [], {"fingerprint": "a-fp"})
    res = run_stage("export", StageContext(store, PipelineConfig()), log=lambda s: None)
    m = res.manifest["counters"]["quality_metrics"]
    # SKILL ("Check Twice: Verify before answering; ...") shares "verify" + "answering" with the thinks
    assert m["skill_use"] == {"rate": 1.0, "pairs_with_skills": 2, "using": 2, "min_shared": 2}
    assert m["trajectory_completeness"] == {"rate": 1.0, "pairs": 2, "complete_pairs": 2}
    assert m["terminal_action_coverage"] == {"alfworld": {"trajectories": 1, "with_terminal": 1, "rate": 1.0}}
    assert m["action_entropy"] == {"alfworld": {"bits": 1.0, "types": 2}}
    card = open(os.path.join(res.uri, "DATASET_CARD.md"), encoding="utf-8").read()
    assert ("2 pairs survive. Distill: ? of ? trajectories distilled (quarantined: none). Pair building: 2 of 3 "
            "candidate pairs kept (quarantined: short_think 1).") in card
    assert "| skill-use rate | 1.0 (2 of 2) |" in card and "| terminal-action coverage, alfworld | 1.0 (1 of 1) |" in card

"""Rollouts in TextWorld Express: trajectory recording, SFT/RL prompt parity, txt and Parquet output."""
import json

import pytest

from pipeline.bank import rows as skillbank
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import ParseConfig, PipelineConfig, PromptConfig
from pipeline.envs.sim.textworld import EnvTask, TextWorldExpressEnv
from pipeline.core.records import DISTILLED_SCHEMA, SKILL_SCHEMA, TRAJECTORY_SCHEMA, to_table
from sft.rl.rollout import project_action, run_episodes
from sft.rl.rollout_io import rollout_output, write_txt_tree
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext
from tests.helpers.rollout_policies import ScriptedPolicy

GOLD = ["look around", "take clean brown shirt", "open wardrobe", "put clean brown shirt in wardrobe"]
BANK = [skillbank.make_row("general", "", {"title": "Look First", "principle": "Read the room before acting.",
                                           "when_to_apply": "At the start."}),
        skillbank.make_row("task_specific", "put_away_objects", {"title": "Open Containers",
                                                                 "principle": "Open a closed container before putting things in it."}),
        skillbank.make_row("task_specific", "cooking", {"title": "Read Recipe", "principle": "Read the cookbook."}),
        skillbank.make_row("mistake", "", {"description": "Repeating a failed action.", "how_to_avoid": "Try another."})]


@pytest.mark.parametrize("text, expected", [
    ("<think>go</think>\n<action>Take  Clean\nShirt</action>", ("take clean shirt", True)),
    ("<think>a</think><action>x</action><action>y</action>", ("x", True)),
    ("<action>open wardrobe</action>", ("open wardrobe", False)),             # no think: format invalid
    ("<think>想</think><action>look around</action>", ("look around", False)),  # CJK: invalid
    ("I would open the wardrobe now, then look", ("en the wardrobe now, then look", False)),  # last 30 chars
])
def test_project_action(text, expected):
    assert project_action(text) == expected


def play(env: TextWorldExpressEnv, prompt: PromptConfig) -> list:
    """twc seed 0 played twice with ``prompt``: the gold path (won) and 'inventory' x3 (step-capped failure)."""
    task = EnvTask("twc", 0)
    won = run_episodes([env], [task], ["g0"], ScriptedPolicy(GOLD), BANK, prompt, 10, "textworld")
    lost = run_episodes([env], [task], ["g0"], ScriptedPolicy(["inventory"]), BANK, prompt, 3, "textworld",
                        record_offset=1)
    return won + lost


@pytest.fixture(scope="module")
def tw_env():
    env = TextWorldExpressEnv(step_limit=20)
    yield env
    env.close()


@pytest.fixture(scope="module")
def episodes(tw_env):
    return play(tw_env, PromptConfig())


def test_episode_is_recorded_as_trajectory(episodes):
    won, lost = episodes
    t = won.trajectory
    assert [s.action for s in t.steps] == [None] + GOLD
    assert [s.reward for s in t.steps] == [0.0, 0.0, 0.0, 0.0, 10.0]
    assert (t.outcome, t.reward, t.category, t.env, t.env_instance) == ("success", 10.0, "put_away_objects",
                                                                         "textworld", "twc-train-0")
    assert t.steps[2].observation == "You take the clean brown shirt."
    assert json.loads(t.metadata)["scores"] == [0.0, 0.5, 0.5, 1.0]
    assert won.skill_ids == [BANK[0]["skill_id"], BANK[1]["skill_id"], BANK[3]["skill_id"]]
    assert (won.won, won.n_invalid) == (True, 0)
    # 'inventory' is admissible, so the failure has valid steps; it ends at the step cap
    assert (lost.won, len(lost.trajectory.steps), lost.trajectory.outcome, lost.n_invalid) == (False, 4, "failure", 0)
    # skills are shown from the FIRST step on (D-R1)
    first = won.samples[0].messages
    assert "## Retrieved Relevant Experience" in first[0]["content"] and "### Put Away Objects Skills" in first[0]["content"]
    assert first[1]["content"].startswith("## Current Progress\n\nYour current observation is: You are in the bedroom.")


def build_pairs(tmp_path, episodes, config: PipelineConfig) -> dict:
    """Run the build_pairs stage of a run on the trajectories of ``episodes`` (a think for every
    action) under ``config``; returns ``(store, {(trajectory_id, step_index): pair row})``."""
    store = ArtifactStore(str(tmp_path), "parity")
    trajs = [e.trajectory for e in episodes]
    distilled = [{"trajectory_id": t.trajectory_id, "env": t.env, "category": t.category,
                  "thinks": [{"step_index": i, "think": "I follow the plan."} for i in range(len(t.steps) - 1)],
                  "synthetic_done": False, "skill_ids_used": e.skill_ids, "memory_ids": [], "bank_version": "",
                  "model": "m", "prompt_sha": "p"} for e, t in zip(episodes, trajs)]
    for stage, rows, schema in (("verify", [t.to_row() for t in trajs], TRAJECTORY_SCHEMA),
                                ("skills", BANK, SKILL_SCHEMA), ("distill", distilled, DISTILLED_SCHEMA)):
        store.write(stage, to_table(rows, schema), [], {"fingerprint": f"{stage}-fp"})
    run_stage("build_pairs", StageContext(store, config), log=lambda s: None)
    return store, {(p["trajectory_id"], p["step_index"]): p for p in store.require("build_pairs").read_rows()}


def assert_same_prompts(pairs: dict, episodes) -> int:
    """Every RL step prompt equals its SFT pair's prompt in bytes and in token ids: the SFT side
    tokenized as build_pairs counts it (``pipeline.tokens``' embedded tokenizer), the RL side as
    the GRPO policy does (``sft.rl.policy.prompt_ids`` on the converted base model). Returns the
    number of prompts compared."""
    from transformers import AutoTokenizer

    from pipeline.tokens import embedded_tokenizer_dir
    from sft.base_model import ensure_base_model
    from sft.rl.policy import prompt_ids

    sft_tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir())
    rl_tok = AutoTokenizer.from_pretrained(str(ensure_base_model()))
    checked = 0
    for e in episodes:
        for s in e.samples:
            sft_prompt = [dict(m) for m in pairs[(e.trajectory.trajectory_id, s.k)]["messages"][:2]]
            assert json.dumps(sft_prompt).encode() == json.dumps(s.messages).encode()
            sft_ids = sft_tok.apply_chat_template(sft_prompt, tokenize=True, add_generation_prompt=True,
                                                  return_dict=True)["input_ids"]
            assert prompt_ids(rl_tok, s.messages) == list(sft_ids)
            checked += 1
    return checked


def test_sft_and_rl_prompts_are_identical(tmp_path, episodes):
    """Default prompt config: the build_pairs stage's SFT pairs carry the RL prompts' bytes and token ids."""
    _, pairs = build_pairs(tmp_path, episodes, PipelineConfig())
    assert assert_same_prompts(pairs, episodes) == 7  # 4 gold actions + 3 failed ones


def test_grpo_renders_with_the_runs_prompt_config(tmp_path, tw_env, episodes):
    """A run with a non-default prompt section: GRPO's config takes it from the run (not its own
    defaults), and its rollout prompts equal the run's SFT pairs in bytes and token ids."""
    from sft.rl.config import run_prompt_config, smoke

    run_prompt = PromptConfig(history_length=1, top_k_general=0, max_mistakes=0)
    store, pairs = build_pairs(tmp_path, episodes, PipelineConfig(prompt=run_prompt))
    cfg = smoke(output_dir=str(tmp_path / "grpo"), prompt=run_prompt_config(store))
    assert cfg.prompt == run_prompt != smoke(output_dir="x").prompt
    rl = play(tw_env, cfg.prompt)  # what sft.rl.grpo.train hands run_episodes
    assert [e.trajectory.trajectory_id for e in rl] == [e.trajectory.trajectory_id for e in episodes]
    assert assert_same_prompts(pairs, rl) == 7
    # the setting shows: one history pair only, and no general skill or mistake in the block
    last_user = rl[0].samples[-1].messages[1]["content"]  # action 4: one pair (3) instead of two (2, 3)
    assert "below are the most recent 1 observations" in last_user.lower()
    assert "Action 3: 'open wardrobe'" in last_user and "Action 2:" not in last_user
    assert "Look First" not in rl[0].samples[0].messages[0]["content"]
    assert "Look First" in episodes[0].samples[0].messages[0]["content"]


def test_txt_tree_parses_back_with_identical_steps(tmp_path, episodes):
    files = write_txt_tree(str(tmp_path / "tree"), episodes, PromptConfig())
    assert [f.split("tree/")[1] for f in files] == ["env000/test1.txt", "env000/test2.txt"]
    text = open(files[0], encoding="utf-8").read()
    assert text.startswith("=== Trajectory for Test 1, Env 0 ===\n\nStep -1 | Action: None | Reward: 0.000 | Done: False\n"
                           "Obs: You are an expert agent")
    assert "\n\nStep 03 | Action: put clean brown shirt in wardrobe | Reward: 10.000 | Done: True\nObs: " in text
    cfg = PipelineConfig(parse=ParseConfig(max_per_instance=100))
    store = ArtifactStore(str(tmp_path), "back")
    run_stage("parse", StageContext(store, cfg, input_path=str(tmp_path / "tree")), log=lambda s: None)
    parsed = sorted(store.require("parse").read_rows(), key=lambda r: r["source_uri"])
    assert len(parsed) == 2
    for row, ep in zip(parsed, episodes):
        assert len(row["steps"]) == len(ep.trajectory.steps)
        assert [s["action"] for s in row["steps"]] == [s.action for s in ep.trajectory.steps]
        assert [s["observation"] for s in row["steps"]] == [s.observation for s in ep.trajectory.steps]
        assert row["outcome"] == ep.trajectory.outcome and row["task"] == ep.trajectory.task


def test_parquet_artifact_round_trips(tmp_path, episodes):
    out = rollout_output(ArtifactStore(str(tmp_path), "r"), episodes, {"policy": "scripted"})
    assert out.manifest == {"stage": "rollout", "run_id": "r", "policy": "scripted"}
    assert (out.counts["in"], out.counts["out"], out.counts["quarantined"]) == (2, 2, 0)
    assert out.rows.to_pylist() == [e.trajectory.to_row() for e in episodes]

"""The scorer against plain full-sequence log-probabilities, and the think score on hand-built
states where the answer is known. Uses the real student base model (SmolLM2-135M, converted once)."""
import math

import pytest
import torch

from pipeline.core.usefulness_config import UsefulnessConfig
from pipeline.usefulness.load import open_scorer
from pipeline.usefulness.score import score_thinks, variant
from pipeline.usefulness.scorer import prefix_tree

TASK = "Your task is to: heat some egg and put it in garbagecan."
OBS = ("You pick up the egg 1 from the countertop 1. Your admissible actions of the current situation are: "
       "['go to microwave 1', 'go to fridge 1', 'go to garbagecan 1', 'go to cabinet 1', 'examine countertop 1'].")
MESSAGES = [{"role": "system", "content": "You are an expert agent in the ALFRED household environment. " + TASK},
            {"role": "user", "content": OBS + "\nNow it's your turn to take an action."}]
CANDIDATES = ["go to microwave 1", "go to fridge 1", "go to garbagecan 1", "go to cabinet 1", "examine countertop 1"]


@pytest.fixture(scope="module")
def scorer():
    return open_scorer(UsefulnessConfig(threads=1))


def test_prefix_tree_shares_prefixes_and_indexes_every_position():
    nodes, parents, depths, index = prefix_tree([[1, 2, 3], [1, 2, 4], [5, 6]])
    assert nodes == [1, 2, 5]          # "1 2" once; last tokens need no pass
    assert parents == [-1, 0, -1] and depths == [0, 1, 0]
    assert index == {(0, 0): 0, (0, 1): 1, (1, 0): 0, (1, 1): 1, (2, 0): 2}


def test_tree_logprobs_equal_full_sequence_logprobs(scorer):
    text = variant("The egg must be heated first.", "alfworld")
    got = scorer.shares(MESSAGES, [text], CANDIDATES).logprobs[0]
    prompt = scorer.prompt_ids(MESSAGES) + scorer._ids(text)
    for cand, lp in zip(scorer.candidate_ids(CANDIDATES, "</action>"), got):
        ids = torch.tensor([prompt + cand])
        with torch.inference_mode():
            logp = scorer.model(input_ids=ids).logits[0].float().log_softmax(-1)
        want = sum(float(logp[len(prompt) + j - 1, cand[j]]) for j in range(len(cand)))
        assert lp == pytest.approx(want, abs=2e-3)


def test_shares_are_a_distribution(scorer):
    result = scorer.shares(MESSAGES, [variant("", "alfworld"), variant("I go on.", "alfworld")], CANDIDATES)
    for row in result.shares:
        assert math.isclose(sum(row), 1.0, abs_tol=1e-9) and min(row) > 0


def test_a_think_naming_the_right_goal_raises_the_expert_more_than_thinks_toward_other_actions(scorer):
    # a 135M base scorer lifts every "go to" a little after any think (the empty think favours
    # "examine"), so the claim is the margin, not the sign of the wrong thinks' gains
    right, cabinet, fridge = score_thinks(scorer, MESSAGES, [
        "I hold the egg now and it has to be heated before it goes in the garbagecan; the microwave heats food.",
        "I should open the cabinet and look inside it for more eggs.",
        "I should go to the fridge and cool it."], "go to microwave 1", "alfworld", CANDIDATES)
    assert right.gain > 0.05 + max(cabinet.gain, fridge.gain)
    assert right.share_empty == cabinet.share_empty == fridge.share_empty  # one baseline per step


def test_a_think_naming_another_action_lowers_the_expert(scorer):
    (other,) = score_thinks(scorer, MESSAGES, ["I will examine the countertop 1 once more."], "go to microwave 1",
                            "alfworld", CANDIDATES)
    assert other.gain < 0 and other.share_think < other.share_empty / 2


def test_a_single_candidate_scores_zero(scorer):
    (s,) = score_thinks(scorer, MESSAGES, ["anything"], "go to microwave 1", "alfworld", ["go to microwave 1"])
    assert s.gain == 0.0 and s.candidates == 1


def test_a_lora_adapter_folder_is_a_scorer_merged_into_the_base_model(scorer, tmp_path):
    """An adapter as ``skillpipe sft fit`` saves one (no config.json, no tokenizer): a fresh LoRA
    (B = 0) merges into the base unchanged, so its shares are the base scorer's."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from pipeline.llm.hfmodel import ensure_base_model
    from pipeline.usefulness.scorer import ActionScorer

    base = AutoModelForCausalLM.from_pretrained(str(ensure_base_model()))
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"])).save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    adapted = ActionScorer(str(tmp_path), threads=1)
    texts = [variant("", "alfworld"), variant("The egg must be heated first.", "alfworld")]
    want = scorer.shares(MESSAGES, texts, CANDIDATES).shares
    got = adapted.shares(MESSAGES, texts, CANDIDATES).shares
    assert [[round(x, 5) for x in row] for row in got] == [[round(x, 5) for x in row] for row in want]
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        ActionScorer(str(tmp_path / "missing"))

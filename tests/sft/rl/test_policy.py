"""HFPolicy's batch layout: the common prompt prefix is prefilled once, outputs unchanged."""
import pytest

from sft.rl.policy import MIN_SHARED_PREFIX, common_prefix_length, shared_prefix_batch


def test_common_prefix_length():
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 9], [1, 2, 3]]) == 2
    # every row keeps one token for generate, even when one row is a prefix of another
    assert common_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2
    assert common_prefix_length([[5, 6], [7, 6]]) == 0
    assert common_prefix_length([[1, 2, 3]]) == 0


def test_shared_prefix_batch_puts_padding_between_prefix_and_suffix():
    rows, masks = shared_prefix_batch([[1, 2, 3, 4, 5], [1, 2, 6]], pad=0, prefix=2)
    assert rows == [[1, 2, 3, 4, 5], [1, 2, 0, 0, 6]]
    assert masks == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 1]]
    rows, masks = shared_prefix_batch([[1, 2, 3], [4]], pad=0, prefix=0)
    assert rows == [[1, 2, 3], [0, 0, 4]] and masks == [[1, 1, 1], [0, 0, 1]]


@pytest.mark.slow
def test_shared_prefix_generation_gives_the_same_greedy_tokens():
    """The embedded SmolLM2 base model, three prompts with one long system text and user texts
    of different lengths: greedy completions are token for token those of plain left padding."""
    import torch

    from sft.base_model import ensure_base_model
    from sft.rl.policy import HFPolicy, load_model, prompt_ids
    torch.set_num_threads(1)
    model, tok = load_model(str(ensure_base_model("")))
    system = ("You are an expert agent in a text game. Your task is to find the coin and take it. "
              "Rooms connect through doors to the north, south, east and west. Answer with one "
              "admissible action inside <action> </action> tags.")
    users = ["You are in the kitchen. You see a fridge. Admissible actions: move north, look around.",
             "You are in the corridor.",
             "You are in the pantry. You see a shelf and a coin on the floor, a hat rack and a chair. "
             "To the south you see the kitchen. Admissible actions: take coin, move south."]
    prompts = [[{"role": "system", "content": system}, {"role": "user", "content": u}] for u in users]
    shared = HFPolicy(model, tok, max_new_tokens=20, temperature=0.0).generate(prompts)
    plain = HFPolicy(model, tok, max_new_tokens=20, temperature=0.0, share_prefix=False).generate(prompts)
    assert common_prefix_length([prompt_ids(tok, p) for p in prompts]) >= MIN_SHARED_PREFIX
    assert [c.completion_ids for c in shared] == [c.completion_ids for c in plain]
    assert [c.prompt_ids for c in shared] == [prompt_ids(tok, p) for p in prompts]
    assert all(c.completion_ids and len(c.completion_ids) <= 20 for c in shared)
    model.train()
    torch.manual_seed(0)
    sampled = HFPolicy(model, tok, max_new_tokens=12, temperature=1.0).generate(prompts)
    assert model.training and len(sampled) == 3 and all(c.completion_ids for c in sampled)

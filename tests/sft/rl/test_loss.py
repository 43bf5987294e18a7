"""GRPO math: episode rewards, group advantages keyed by id (never by position), the loss."""
import math

import pytest
import torch

from sft.rl.loss import episode_reward, group_advantages, policy_loss

R3 = 1 / math.sqrt(3)  # (10/3) / std([10, 0, 10]) with std = sqrt(100/3): the textbook +-1/sqrt(3), 2/sqrt(3)


def test_interleaved_groups_are_normalised_by_id():
    rewards = [10.0, 0.0, 0.0, 10.0, 10.0, 0.0]
    gids = ["a", "b", "a", "b", "a", "b"]          # the trainer interleaves its slots exactly like this
    adv, stats = group_advantages(rewards, gids)
    assert adv == pytest.approx([R3, -R3, -2 * R3, 2 * R3, R3, -R3], abs=1e-6)
    assert stats["a"].indices == [0, 2, 4] and stats["b"].indices == [1, 3, 5]
    assert stats["a"].mean == pytest.approx(20 / 3) and stats["a"].std == pytest.approx(math.sqrt(100 / 3))
    assert not stats["a"].no_signal and not stats["b"].no_signal
    # grouping by position (reshape to rows of 3) would mix the groups and give other numbers
    by_position, _ = group_advantages(rewards, ["p", "p", "p", "q", "q", "q"])
    assert by_position != pytest.approx(adv, abs=1e-3)


def test_batch_order_does_not_change_advantages():
    rewards, gids = [3.0, 1.0, 7.0, 2.0], ["x", "y", "x", "y"]
    adv, _ = group_advantages(rewards, gids)
    perm = [2, 3, 0, 1]
    adv_p, _ = group_advantages([rewards[i] for i in perm], [gids[i] for i in perm])
    assert adv_p == pytest.approx([adv[i] for i in perm])


def test_all_zero_group_carries_no_signal():
    adv, stats = group_advantages([0.0, 10.0, 0.0, 0.0, 0.0, 10.0], ["z", "s", "z", "z", "s", "s"])
    assert [adv[i] for i in (0, 2, 3)] == [0.0, 0.0, 0.0]
    assert stats["z"].no_signal and (stats["z"].mean, stats["z"].std) == (0.0, 0.0)
    # the other group is unaffected: [10, 0, 10] -> +-1/sqrt(3), -2/sqrt(3)
    assert [adv[i] for i in (1, 4, 5)] == pytest.approx([R3, -2 * R3, R3], abs=1e-6)
    _, single = group_advantages([5.0], ["only"])
    assert single["only"].no_signal and single["only"].advantages == [0.0]


def test_unscaled_advantages_and_length_check():
    adv, _ = group_advantages([10.0, 0.0], ["g", "g"], scale=False)
    assert adv == [5.0, -5.0]
    with pytest.raises(ValueError, match="2 rewards but 1 group ids"):
        group_advantages([1.0, 2.0], ["g"])


def test_episode_reward():
    assert episode_reward(True, 1.0, 2) == pytest.approx(9.8)
    assert episode_reward(False, 0.75, 1, mode="score") == pytest.approx(0.65)
    assert episode_reward(False, 0.0, 3, penalty=0.0) == 0.0
    with pytest.raises(ValueError, match="reward mode"):
        episode_reward(True, 1.0, 0, mode="steps")


def test_policy_loss_token_mean_and_low_var_kl():
    logps = torch.tensor([[-1.0, -2.0], [-1.0, -5.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    adv = torch.tensor([1.0, 0.5])
    # ratio 1 and ref == policy: loss = -(1 + 1 + 0.5) / 3 tokens; padding ignored
    loss, m = policy_loss(logps, logps, logps, adv, mask, beta=0.1, epsilon=0.2)
    assert float(loss) == pytest.approx(-2.5 / 3) and m["tokens"] == 3.0 and m["kl_sum"] == 0.0
    ref = logps.clone()
    ref[0, 0] += math.log(2.0)                      # k3 = e^d - d - 1 = 1 - ln 2 at one token
    loss, m = policy_loss(logps, logps, ref, adv, mask, beta=0.1, epsilon=0.2, n_tokens=6)
    assert m["kl_sum"] == pytest.approx(1 - math.log(2.0))
    assert float(loss) == pytest.approx((-2.5 + 0.1 * (1 - math.log(2.0))) / 6)


def test_policy_loss_clips_large_ratios():
    old = torch.zeros(1, 1)
    new = torch.full((1, 1), math.log(2.0), requires_grad=True)  # ratio 2 > 1 + eps
    loss, m = policy_loss(new, old, None, torch.tensor([1.0]), torch.ones(1, 1), beta=0.0, epsilon=0.2)
    assert loss.item() == pytest.approx(-1.2) and m["clipped"] == 1.0
    loss.backward()
    assert float(new.grad) == 0.0  # clipped: no gradient pushes the ratio further

"""GRPO pieces that need no environment: episode rewards, group advantages, the policy loss.

Multi-turn, per-step scheme (SkillRL / verl-agent GRPO): every action of an episode
is one training sample (its own prompt, rendered from the trajectory so far, and its own
completion); the episode's outcome reward is normalised within its *group* - the G episodes of
one task in one step - and the resulting advantage is given to every step sample of the
episode. Groups are keyed by their group id, never by batch position (TRL's ``GRPOTrainer``
reshapes rewards to ``(-1, num_generations)`` by position, which does not hold for a variable
number of step samples per episode; that is why the rollout is ours, see ``sft.rl.grpo``).

Loss per completion token (TRL's GRPO / verl's defaults: clipped surrogate, ``low_var_kl``
(k3) KL to the reference policy, ``token-mean`` aggregation over all tokens of the step)::

    ratio = exp(logp - logp_old)
    loss  = -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A) + beta * k3 - entropy_coeff * H
    k3    = exp(ref - logp) - (ref - logp) - 1
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

WIN_REWARD = 10.0


def episode_reward(won: bool, score: float, n_invalid: int, mode: str = "won", penalty: float = 0.1) -> float:
    """Reward of one episode: ``10 * won`` (mode ``won``) or the engine's normalised score
    (mode ``score``), minus ``penalty`` per invalid step (the reference subtracts it
    at each invalid step's last token, we subtract it from the episode return so it enters the
    group-relative advantage). Raises ``ValueError`` for an unknown mode."""
    if mode == "won":
        base = WIN_REWARD * float(won)
    elif mode == "score":
        base = float(score)
    else:
        raise ValueError(f"reward mode must be 'won' or 'score', got {mode!r}")
    return base - penalty * n_invalid


@dataclass
class GroupStats:
    """Rewards and advantages of one group; ``no_signal`` when all rewards are equal (then every
    advantage is 0 and the group teaches nothing but the KL/entropy terms)."""
    group_id: str
    indices: list[int]
    rewards: list[float]
    advantages: list[float]
    mean: float
    std: float
    no_signal: bool

    def to_dict(self) -> dict[str, Any]:
        """Every field as a plain, JSON-ready dict (``dataclasses.asdict``)."""
        return asdict(self)


def group_advantages(rewards: list[float], group_ids: list[str], scale: bool = True,
                     eps: float = 1e-6) -> tuple[list[float], dict[str, GroupStats]]:
    """Group-relative advantages, keyed by group id (order in the batch is irrelevant).

    For the rewards ``r`` of one group: ``A = (r - mean(r)) / (std(r) + eps)`` with the unbiased
    std (``scale``; SkillRL's ``norm_adv_by_std_in_grpo``), or ``A = r - mean(r)`` without
    scaling. A group whose rewards are all equal (including a single-episode group) gets
    ``A = 0`` and ``no_signal = True``.

    Returns ``(advantages aligned with rewards, {group_id: GroupStats})`` (groups in first-seen
    order). Raises ``ValueError`` when the two lists differ in length.
    """
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards but {len(group_ids)} group ids")
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        members[g].append(i)
    adv = [0.0] * len(rewards)
    stats: dict[str, GroupStats] = {}
    for g, idx in members.items():
        r = [float(rewards[i]) for i in idx]
        n = len(r)
        mean = sum(r) / n
        std = (sum((x - mean) ** 2 for x in r) / (n - 1)) ** 0.5 if n > 1 else 0.0
        no_signal = all(x == r[0] for x in r)
        a = [0.0] * n if no_signal else [(x - mean) / (std + eps) if scale else x - mean for x in r]
        for i, v in zip(idx, a):
            adv[i] = v
        stats[g] = GroupStats(g, idx, r, a, mean, std, no_signal)
    return adv, stats


def policy_loss(logps, old_logps, ref_logps, advantages, mask, beta: float, epsilon: float,
                entropy=None, entropy_coeff: float = 0.0, n_tokens: float | None = None):
    """Summed GRPO loss of a micro-batch divided by ``n_tokens`` (token-mean over the whole step
    when ``n_tokens`` is the step's token count, so micro-batch gradients add up exactly).

    Shapes: ``logps``, ``old_logps``, ``ref_logps``, ``mask``, ``entropy``: ``(B, T)``;
    ``advantages``: ``(B,)``. ``ref_logps`` may be ``None`` when ``beta == 0``.
    Returns ``(loss, {"kl_sum", "clipped", "tokens"})`` with sums for logging.
    """
    import torch

    mask = mask.to(logps.dtype)
    ratio = torch.exp(logps - old_logps)
    a = advantages.unsqueeze(1)
    surrogate = torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * a)
    per_token = -surrogate
    kl = torch.zeros_like(logps)
    if beta and ref_logps is not None:
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl
    if entropy is not None and entropy_coeff:
        per_token = per_token - entropy_coeff * entropy
    denom = float(n_tokens) if n_tokens else mask.sum().clamp(min=1.0)
    loss = (per_token * mask).sum() / denom
    clipped = ((ratio - 1).abs() > epsilon).to(mask.dtype)
    return loss, {"kl_sum": float((kl.detach() * mask).sum()), "clipped": float((clipped * mask).sum()),
                  "tokens": float(mask.sum())}

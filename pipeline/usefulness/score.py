"""Usefulness of a think: how much it moves the scorer's belief towards the expert action.

For a step with prompt ``P`` (the SFT prompt of the pair), expert action ``a*`` and candidates
``C`` (:mod:`pipeline.usefulness.candidates`)::

    share(x) = softmax over c in C of log P_scorer(c | P, <think>x</think><action>)   at c = a*
    gain     = share(mask(think)) - share("")

``mask`` hides the action and its arguments (:mod:`pipeline.usefulness.mask`), so a think gains
only by what it says besides the answer. ``gain`` lies in [-1, 1]: above 0 the think makes the
expert action more likely than no reasoning does; below 0 it points elsewhere. This is the
"candidate share against an empty think" form; the plain log-probability of the action (against a
baseline that names the action) inverts on thinks that merely repeat the action's object, hence
the share and the mask. Related measures: REV (arXiv 2210.04982), LAS (arXiv 2010.04119),
Superfiltering (arXiv 2402.00530) score a rationale by the likelihood gain it gives a small model.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.usefulness.mask import mask_think
from pipeline.usefulness.scorer import ActionScorer

EMPTY = ""


def variant(think: str, env: str) -> str:
    """The assistant text between the prompt and the action: ``<think>{think}</think>`` then the
    action's opening (``\\n<action>``; search QA actions carry their own tags)."""
    return f"<think>{think}</think>\n" + ("" if env == "search" else "<action>")


def suffix(env: str) -> str:
    """What closes a candidate action: ``</action>``, nothing for search QA (tags included)."""
    return "" if env == "search" else "</action>"


@dataclass(frozen=True)
class ThinkScore:
    """One think's usefulness: ``gain`` = ``share_think - share_empty`` (module docstring), the
    number of candidates it was measured over, and the masked think the scorer read."""
    gain: float
    share_think: float
    share_empty: float
    candidates: int
    masked: str


def score_thinks(scorer: ActionScorer, messages: list[dict], thinks: list[str], action: str, env: str,
                 candidates: list[str]) -> list[ThinkScore]:
    """Scores of several ``thinks`` for one step (best-of-n shares the prompt and the empty
    baseline): ``messages`` = the pair's system and user turns, ``candidates[0] == action``.
    A step with a single candidate scores 0 for every think (nothing to choose between)."""
    masked = [mask_think(t, action, env) for t in thinks]
    if len(candidates) < 2:
        return [ThinkScore(0.0, 1.0, 1.0, len(candidates), m) for m in masked]
    result = scorer.shares(messages, [variant(EMPTY, env), *(variant(m, env) for m in masked)],
                           candidates, suffix(env))
    base = result.shares[0][0]
    return [ThinkScore(round(row[0] - base, 6), round(row[0], 6), round(base, 6), len(candidates), m)
            for row, m in zip(result.shares[1:], masked)]

"""WebShop rule checker: every click must be on the page the agent was shown.

Sources of the rules (read, not copied): WebShop's text environment
(``web_agent_site/envs/web_agent_text_env.py``) offers as actions ``search[...]`` only on a page
with a search bar and ``click[...]`` only on the page's clickables (its buttons, product links
and option values, the bracketed items of the text observation), and ends an episode on
``click[Buy Now]`` with the score; ReAct's WebShop wrapper (``WebShop.ipynb``) answers any other
action with "Invalid action!" and leaves the page as it was, answers ``think[...]`` with "OK."
without touching the environment, and prints ``Your score (min 0.0, max 1.0): <r>`` after a
purchase. "You have clicked <option>." selects an option on the same item page.

The page is the last observation that is a page (not "OK.", "Invalid action!" or "You have
clicked ..."). A step answered "Invalid action!" is ``env_rejected`` (kind ``rejected``), with
the page's explanation as a second finding of the same kind (``click_not_shown``,
``search_no_box``, ``not_in_grammar``). A click or search that the page does not allow but the
record shows as answered is kind ``impossible``. The goal is a purchase with a reward at or
above ``parse.success_threshold`` (``goal_not_reached`` otherwise: a dead end without purchase,
or a lower score).
"""
from __future__ import annotations

import re
from typing import Any

from pipeline.core.records import Trajectory
from pipeline.rules import is_reasoning
from pipeline.verify.base import Checker, Verdict

RULES = {
    "not_in_grammar": "an action other than search[...], click[...] or think[...]",
    "click_not_shown": "a click on something the current page does not show (an option the product does not "
                       "offer, a title instead of a product id)",
    "search_no_box": "a search on a page without a search box",
    "env_rejected": "the environment answered \"Invalid action!\"",
    "goal_not_reached": "no purchase, or a purchase scored below parse.success_threshold",
}

INVALID = "invalid action!"
_ACTION = re.compile(r"(search|click|think)\[(.*)\]", re.S | re.I)
_CLICKABLE = re.compile(r"\[([^\[\]]+)\]")
_SCORE = re.compile(r"your score \(min 0(?:\.0)?, max 1(?:\.0)?\):\s*([-+]?\d+(?:\.\d+)?)", re.I)
_NOT_A_PAGE = re.compile(r"^(?:ok\.?|invalid action!|you have clicked .*)$", re.I | re.S)


def _norm(text: str) -> str:
    return " ".join(text.split())


def clickables(page: str) -> set[str]:
    """The bracketed items of a page text, whitespace collapsed (``[Buy  Now]`` -> ``"Buy Now"``).
    Case is kept: the environment matches a click exactly (in ReAct's 300 episodes every click
    that differs from the page only in case, ``click[1B]`` on ``[1b]``, was answered
    "Invalid action!", and every accepted click matched exactly)."""
    return {_norm(m) for m in _CLICKABLE.findall(page)}


def is_think(action: str) -> bool:
    """Whether ``action`` cannot change the page by itself (``think[...]``)."""
    return action.strip().lower().startswith("think")


def is_page(observation: str) -> bool:
    """Whether ``observation`` shows a page (not a think's "OK.", a refusal or an option click)."""
    text = observation.strip()
    return bool(text) and not _NOT_A_PAGE.match(text)


class WebshopChecker(Checker):
    """The WebShop rules (module docstring) for a trajectory of text pages."""
    name = "webshop"
    RULES = RULES

    def applies(self, traj: Trajectory) -> bool:
        """WebShop with page text (a ReAct or Reflexion log), not a rollout dump or a memory."""
        return (traj.env == "webshop" and traj.source_format not in ("skillrl_txt", "skillrl_memory_json")
                and bool(traj.steps) and bool(clickables(traj.steps[0].observation or "")))

    def check(self, traj: Trajectory, options: dict[str, Any]) -> Verdict:
        """Findings per step (module docstring), then the purchase and its reward."""
        verdict = Verdict(self.name)
        page, score = traj.steps[0].observation or "", None
        for step in traj.steps[1:]:
            if step.action is None or is_reasoning(step):
                continue
            obs = step.observation or ""
            _step(page, step.index, step.action, obs, verdict)
            m = _SCORE.search(obs)
            if m:
                score = float(m[1])
            elif is_page(obs) or (not obs.strip() and not is_think(step.action)):
                page = obs  # an empty answer to a search is an empty page (no results, no search box)
        threshold = float(options.get("success_threshold", 1.0))
        verdict.goal_reached = score is not None and score >= threshold
        if not verdict.goal_reached:
            why = "no purchase" if score is None else f"purchase scored {score:g} < {threshold:g}"
            verdict.add(traj.steps[-1].index, "goal_not_reached", "goal", why)
        return verdict


def _step(page: str, index: int, action: str, obs: str, verdict: Verdict) -> None:
    """Findings of one action against the page it was taken on."""
    refused = obs.strip().lower() == INVALID
    kind = "rejected" if refused else "impossible"
    if refused:
        verdict.add(index, "env_rejected", kind, f"the environment answered \"Invalid action!\" to {action!r}")
    m = _ACTION.fullmatch(action.strip())
    if m is None:
        verdict.add(index, "not_in_grammar", kind, f"{action!r} is not search[...] or click[...]")
        return
    verb, arg = m[1].lower(), _norm(m[2])
    shown = clickables(page)
    if verb == "search" and "Search" not in shown:
        verdict.add(index, "search_no_box", kind, f"search on a page without a search box (it shows "
                    f"{_listed(shown)})")
    elif verb == "click" and arg not in shown:
        verdict.add(index, "click_not_shown", kind, f"click[{m[2]}] is not on the page (it shows {_listed(shown)})")


def _listed(shown: set[str], n: int = 8) -> str:
    items = sorted(shown)
    return ", ".join(f"[{s}]" for s in items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")

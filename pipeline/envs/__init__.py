"""Per-environment knowledge: task categories, environment detection, prompt constants.

``classify(env, task, hint)`` is the one category function used by every stage (the reference
had four that disagree). Each env module exposes ``ENV``, ``CATEGORIES``, ``HEADER``,
``TURN_INSTRUCTION`` and ``classify(task, hint=None)``.
"""
from __future__ import annotations

import re
from types import ModuleType

from pipeline.envs import alfworld, search, webshop

from pipeline.envs.sim import textworld

OTHER = "other"

REGISTRY: dict[str, ModuleType] = {m.ENV: m for m in (alfworld, webshop, search, textworld)}


def get(env: str) -> ModuleType:
    """The env module for ``env``; raises ``KeyError`` naming the known envs."""
    try:
        return REGISTRY[env]
    except KeyError:
        raise KeyError(f"unknown env {env!r}; known: {', '.join(sorted(REGISTRY))}") from None


def classify(env: str, task: str, hint: str | None = None) -> str:
    """Category of ``task`` in ``env`` (hint: ALFWorld game file / Search data_source).

    Returns an explicit ``"other"`` for an env without a classifier, so an unknown env is
    visible in counts instead of raising mid-run.
    """
    mod = REGISTRY.get(env)
    return mod.classify(task, hint) if mod else OTHER


# Signals in raw text, strongest first. ALFWorld commands are distinctive; WebShop uses
# click[...] and the store's buttons; Search/QA uses finish[...]/lookup[...] or <search> tags.
_ALFWORLD = re.compile(r"ALFRED|TextWorld|\bgo to \w+ \d+|\btake \w+ \d+ from\b|in/on|Your task is to:")
_WEBSHOP = re.compile(r"(?i)\bwebshop\b|click\[|\[Buy Now\]|\[Back to Search\]")
_SEARCH = re.compile(r"(?i)finish\[|lookup\[|<search>|<answer>|Episode finished, reward")


def detect_env(text: str, hint: str | None = None, lower: str | None = None) -> str:
    """Guess the environment of a record from its raw text.

    Args:
        text: any raw text of the record (prompt, transcript, observations).
        hint: an explicit env (``"alfworld"``, ...); a known value wins; ``"auto"``/``None`` = detect.
        lower: ``text.lower()`` when the caller already has it (a reader that lower-cases the
            whole file anyway), so it is not made again.

    Returns ``"alfworld"``, ``"webshop"``, ``"search"``, ``"textworld"`` or ``"other"``.
    """
    if hint and hint in REGISTRY:
        return hint
    # Plain substring tests first (same answers as the regexes, much faster on long prompts).
    low = text.lower() if lower is None else lower
    if "click[" in low or "[buy now]" in low or "[back to search]" in low or (
            "webshop" in low and _WEBSHOP.search(text)):
        return "webshop"
    if textworld.HEADER in text:  # our own rollouts of TextWorld Express (sft.rl.rollout)
        return "textworld"
    if "ALFRED" in text or "TextWorld" in text or "in/on" in text or "Your task is to:" in text:
        return "alfworld"
    if _ALFWORLD.search(text):
        return "alfworld"
    if _SEARCH.search(text):
        return "search"
    return OTHER


def action_effect(env: str, action: str) -> str:
    """What ``action`` does in ``env``, in a few words (the env module's ``action_effect``); ""
    for an env without one or an action it does not know."""
    describe = getattr(REGISTRY.get(env), "action_effect", None)
    return describe(action) if describe else ""

"""ALFWorld: task categories and the prompt constants shared by SFT export and the GRPO rollout.

Category rule: one word-boundary classifier replaces the reference's four disagreeing substring
classifiers (aggregation A, distillation D, online O, trainer T); the ALFWorld game-file task
type, when known, wins over the goal text.
"""
from __future__ import annotations

import re

ENV = "alfworld"

#: ALFWorld's six task types (game-file folder prefixes; ``_simple`` dropped for pick_and_place).
CATEGORIES = ("pick_and_place", "pick_two_obj_and_place", "look_at_obj_in_light",
              "clean", "heat", "cool")

#: First line of every SkillRL ALFWorld prompt (make_skillrl_rollouts.py ``HEADER``, a copy of
#: which is in tests/fixtures/tools/).
HEADER = "You are an expert agent operating in the ALFRED Embodied Environment."

#: The turn instruction that closes every SkillRL ALFWorld prompt, verbatim (including the space
#: before the second newline) from make_skillrl_rollouts.py ``TURN``.
TURN_INSTRUCTION = (
    "Now it's your turn to take an action.\nYou should first reason step-by-step about the "
    "current situation. This reasoning process MUST be enclosed within <think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action for current "
    "step and present it within <action> </action> tags.")

#: Game-file folder prefix -> category (ALFWorld json_2.1.1 layout, e.g.
#: ``train/pick_clean_then_place_in_recep-Plate-None-Cabinet-1/trial_...``).
GAMEFILE_TYPES = {
    "pick_and_place_simple": "pick_and_place",
    "pick_two_obj_and_place": "pick_two_obj_and_place",
    "look_at_obj_in_light": "look_at_obj_in_light",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
}

# Order matters (first match wins).
_RULES = (
    (re.compile(r"^look at .+ under the\b|^examine the .+ with the\b"), "look_at_obj_in_light"),
    (re.compile(r"\bclean\b"), "clean"),
    (re.compile(r"\b(?:heat|hot)\b"), "heat"),
    (re.compile(r"\b(?:cool|cold)\b"), "cool"),
    (re.compile(r"\btwo\b"), "pick_two_obj_and_place"),
)


def category_from_gamefile(game_file: str | None) -> str | None:
    """Category from an ALFWorld game-file path (any folder component), or ``None`` if unknown."""
    for part in (game_file or "").replace("\\", "/").split("/"):
        prefix = part.split("-", 1)[0]
        if prefix in GAMEFILE_TYPES:
            return GAMEFILE_TYPES[prefix]
    return None


def classify(task: str, hint: str | None = None) -> str:
    """ALFWorld category of a goal such as ``"put a hot apple in fridge."``.

    Args:
        task: the goal text (the ``Your task is to:`` line, with or without that prefix).
        hint: an ALFWorld game-file path; when it names a task type, it wins.

    Returns one of :data:`CATEGORIES`; any goal matching no rule is ``pick_and_place`` (the
    reference's fallback, which is also ALFWorld's plain put task). Never raises.
    """
    from_file = category_from_gamefile(hint)
    if from_file:
        return from_file
    goal = re.sub(r"^\s*your task is to:\s*", "", (task or "").strip().lower())
    for pattern, category in _RULES:
        if pattern.search(goal):
            return category
    return "pick_and_place"


#: What each ALFWorld command does, in words (its PDDL domain's operators, as the text game runs
#: them): a distill prompt names the effect of the action to explain, because the 1.5B teacher
#: otherwise explained an ``open drawer 4`` as the go that had already reached it.
_EFFECTS = tuple((re.compile(p, re.I), e) for p, e in (
    (r"go to (.+)", "walks to {0}"),
    (r"open (.+)", "opens {0}, where the agent already is, to see what is inside"),
    (r"close (.+)", "closes {0}"),
    (r"take (.+?) from (.+)", "picks up {0} from {1}"),
    (r"(?:put|move) (.+?) (?:in/on|in|on|to) (.+)", "puts {0}, which the agent holds, in or on {1}"),
    (r"heat (.+?) with (.+)", "heats {0} with {1}"),
    (r"cool (.+?) with (.+)", "cools {0} with {1}"),
    (r"clean (.+?) with (.+)", "cleans {0} with {1}"),
    (r"use (.+)", "turns on {0}"),
    (r"examine (.+)", "examines {0}"),
    (r"look", "describes the place where the agent is"),
    (r"inventory", "lists what the agent holds"),
    (r"done", "ends the episode, the goal achieved"),
))


def action_effect(action: str) -> str:
    """What ALFWorld command ``action`` does, in a few words ("open drawer 4" -> "opens drawer 4,
    where the agent already is, to see what is inside"); "" for a command it does not know."""
    text = " ".join((action or "").split())
    for pattern, effect in _EFFECTS:
        m = pattern.fullmatch(text)
        if m:
            return effect.format(*m.groups())
    return ""

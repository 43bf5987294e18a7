"""The ONE renderer of agent prompts: skill selection, skills block, step prompt, SFT target.

Used by the SFT stages (distill, build_pairs, export) and by the online GRPO rollout, so a model
sees byte-identical prompts in training and at serving time (the reference
rendered SFT prompts with different code than its RL env manager). Everything here is a pure
function of its arguments; the only randomness (the synthetic ``done`` sample) is seeded per
trajectory.

Prompt layout for action ``k`` (``k >= 1``; ``steps[k-1]`` is the state the agent sees)::

    system: <HEADER> Your task is to: <task>            (Search: "Your question: <task>")
            \\n\\n## Retrieved Relevant Experience\\n\\n<skills block>   (omitted when empty)
    user:   ## Current Progress\\n\\n
            Prior to this step, you have already taken <k-1> step(s). Below are the most recent
            <n> observations and the corresponding actions you took: <history lines>
            You are now at step <k> and your current observation is: <steps[k-1].observation>
            Your admissible actions of the current situation are: [<quoted list>].  (omitted if none)
            \\n<TURN_INSTRUCTION>

Where we deliberately differ from the reference: skills at EVERY step including the
first, the task on the header line, absolute history step numbers, RL's quoted admissible
format, and the no-history template at every step when ``history_length <= 0``.
"""
from __future__ import annotations

import random
from typing import Any

from pipeline.core.config import DistillConfig, PromptConfig
from pipeline.core.lineage import content_hash
from pipeline.core.records import Trajectory

from pipeline import envs as _envs

EXPERIENCE_HEADING = "## Retrieved Relevant Experience"
PROGRESS_HEADING = "## Current Progress"

#: The env whose wording (header line, turn instruction) envs without a module in pipeline.envs
#: get: TextWorld's generic text-game wording (our own).
GENERIC_ENV = "textworld"

#: Readable section labels for category keys (our own; unknown keys are title-cased).
CATEGORY_LABELS = {
    "pick_and_place": "Pick And Place",
    "pick_two_obj_and_place": "Pick Two Objects And Place",
    "look_at_obj_in_light": "Look At Object In Light",
    "multi_hop_reasoning": "Multi-Hop Reasoning",
}

#: Official SkillRL banks have no pick-two / split look-at buckets: when the bank holds no skill
#: of the exact category, these keys are used instead (to consume an official SkillRL bank).
CATEGORY_FALLBACKS = {
    "pick_two_obj_and_place": ("pick_and_place",),
    "look_at_obj_in_light": ("examine",),
    # TextWorld Express "twc" (put objects in their usual places) trained with an ALFWorld bank
    # (GRPOConfig.skill_bank_env): its nearest ALFWorld task type
    "put_away_objects": ("pick_and_place",),
}


# ----------------------------------------------------------------------------------- skills

def _text(row: dict[str, Any], key: str) -> str:
    return (row.get(key) or "").strip()


def _is_empty(row: dict[str, Any]) -> bool:
    """A skill without title/principle, or a mistake without description, is empty."""
    if row.get("kind") == "mistake":
        return not (_text(row, "description") or _text(row, "title"))
    return not (_text(row, "title") and _text(row, "principle"))


def select_skills(bank_rows: list[dict], env: str, category: str, cfg: PromptConfig) -> list[dict]:
    """The skills shown to the agent for one task, in display order (SFT and RL alike).

    Args:
        bank_rows: rows of ``records.SKILL_SCHEMA`` (``kind`` general | task_specific | mistake),
            in bank order.
        env: environment name; rows of another env's bank are skipped (rows with ``env`` "" fit all).
        category: the task's category key (``pipeline.envs.classify``).
        cfg: ``top_k_general`` caps general skills, ``max_mistakes`` caps mistakes,
            ``skills=False`` selects nothing.

    Returns general skills (first ``top_k_general`` in bank order: dynamic skills get no
    priority over the others), then every task-specific skill of ``category`` (or of its
    :data:`CATEGORY_FALLBACKS` when the bank has none of the exact key), then the first
    ``max_mistakes`` mistakes. Empty entries are dropped.
    """
    if not cfg.skills:
        return []
    # A run can hold banks of several envs: never show one env's skills to another.
    rows = [r for r in bank_rows if not _is_empty(r) and r.get("env") in (None, "", env)]
    general = [r for r in rows if r.get("kind") == "general"][:max(0, cfg.top_k_general)]
    specific = [r for r in rows if r.get("kind") == "task_specific" and r.get("category") == category]
    if not specific:
        for key in CATEGORY_FALLBACKS.get(category, ()):
            specific += [r for r in rows if r.get("kind") == "task_specific" and r.get("category") == key]
    mistakes = [r for r in rows if r.get("kind") == "mistake"][:max(0, cfg.max_mistakes)]
    return general + specific + mistakes


def category_label(category: str) -> str:
    """Section label of a category key: ``"look_at_obj_in_light"`` -> ``"Look At Object In Light"``."""
    return CATEGORY_LABELS.get(category) or category.replace("_", " ").title()


def _bullet(title: str, text: str) -> str:
    return f"- **{title}**: {text}"


def render_skills_block(skills: list[dict]) -> str:
    """Render selected skills as markdown sections (our format; text verbatim, only stripped).

    Sections, separated by a blank line and omitted when empty::

        ### General Principles
        - **<title>**: <principle>
          _Apply when: <when_to_apply>_                 (if non-empty)
        ### <Category Label> Skills                       (one per category, in order)
        ...same bullets...
        ### Mistakes to Avoid
        - **Don't**: <description>
          _Why it happens: <why_it_happens>_            (if non-empty)
          **Instead**: <how_to_avoid>                   (if non-empty)

    Unlike the reference, periods are not normalised, and ``when_to_apply`` /
    ``why_it_happens`` are kept. Returns ``""`` when ``skills`` is empty.
    """
    sections: list[list[str]] = []
    general = [s for s in skills if s.get("kind") == "general"]
    if general:
        sections.append(["### General Principles"] + [ln for s in general for ln in _skill_lines(s)])
    categories: list[str] = []
    for s in skills:
        if s.get("kind") == "task_specific" and s.get("category", "") not in categories:
            categories.append(s.get("category", ""))
    for cat in categories:
        rows = [s for s in skills if s.get("kind") == "task_specific" and s.get("category", "") == cat]
        sections.append([f"### {category_label(cat)} Skills"] + [ln for s in rows for ln in _skill_lines(s)])
    mistakes = [s for s in skills if s.get("kind") == "mistake"]
    if mistakes:
        sections.append(["### Mistakes to Avoid"] + [ln for s in mistakes for ln in _mistake_lines(s)])
    return "\n\n".join("\n".join(lines) for lines in sections)


def _skill_lines(s: dict) -> list[str]:
    lines = [_bullet(_text(s, "title"), _text(s, "principle"))]
    if _text(s, "when_to_apply"):
        lines.append(f"  _Apply when: {_text(s, 'when_to_apply')}_")
    return lines


def _mistake_lines(s: dict) -> list[str]:
    lines = [_bullet("Don't", _text(s, "description") or _text(s, "title"))]
    if _text(s, "why_it_happens"):
        lines.append(f"  _Why it happens: {_text(s, 'why_it_happens')}_")
    if _text(s, "how_to_avoid"):
        lines.append(f"  **Instead**: {_text(s, 'how_to_avoid')}")
    return lines


# ------------------------------------------------------------------------------ step prompt

def _env_text(env: str) -> tuple[str, str]:
    """(header line, turn instruction) of ``env``; :data:`GENERIC_ENV`'s for envs without a module."""
    mod = _envs.REGISTRY.get(env) or _envs.REGISTRY[GENERIC_ENV]
    return mod.HEADER, mod.TURN_INSTRUCTION


def visible_admissible(actions: list[str]) -> list[str]:
    """The admissible actions shown to the agent: the list without ``help`` (as SkillRL's RL env does)."""
    return [a for a in actions if a != "help"]


def render_admissible(actions: list[str], env: str) -> str:
    """The admissible-actions line in RL's format, or ``""`` when there is nothing to show.

    ALFWorld/generic: ``[`` + ``'a'`` items joined by newline+space + ``].``;
    WebShop: one ``'a',`` item per line between ``[`` and ``]``.
    """
    shown = visible_admissible(actions)
    if not shown:
        return ""
    lead = "Your admissible actions of the current situation are: "
    if env == "webshop":
        return lead + "[\n" + "\n".join(f"'{a}'," for a in shown) + "\n]."
    return lead + "[" + "\n ".join(f"'{a}'" for a in shown) + "]."


def _system(traj: Trajectory, skills_block: str) -> str:
    header, _ = _env_text(traj.env)
    task_line = f"Your question: {traj.task}" if traj.env == "search" else f"Your task is to: {traj.task}"
    text = f"{header} {task_line}"
    if skills_block:
        text += f"\n\n{EXPERIENCE_HEADING}\n\n{skills_block}"
    return text


def _window(k: int, history_length: int) -> range:
    """Indices j of history pairs (steps[j].observation, steps[j+1].action) before action k."""
    return range(max(0, k - 1 - history_length), k - 1)


def _progress_action_env(traj: Trajectory, k: int, cfg: PromptConfig, admissible: list[str]) -> str:
    """ALFWorld / WebShop / generic: observation-then-action history (RL env manager form)."""
    _, turn = _env_text(traj.env)
    obs = traj.steps[k - 1].observation
    adm = render_admissible(admissible, traj.env)
    window = _window(k, cfg.history_length)
    if cfg.history_length <= 0 or not window:
        body = f"Your current observation is: {obs}"
    else:
        lines = "\n".join(f"[Observation {j + 1}: '{traj.steps[j].observation}', "
                          f"Action {j + 1}: '{traj.steps[j + 1].action}']" for j in window)
        body = (f"Prior to this step, you have already taken {k - 1} step(s). Below are the most recent "
                f"{len(window)} observations and the corresponding actions you took: {lines}\n"
                f"You are now at step {k} and your current observation is: {obs}")
    return f"{PROGRESS_HEADING}\n\n{body}" + (f"\n{adm}" if adm else "") + f"\n\n{turn}"


def _progress_search(traj: Trajectory, k: int, cfg: PromptConfig) -> str:
    """Search/QA: each past query with the evidence it returned (the reference hid it).

    The newest history line carries ``steps[k-1].observation``, so it is not repeated.
    """
    _, turn = _env_text(traj.env)
    steps = traj.steps
    window = range(max(1, k - cfg.history_length), k)
    if cfg.history_length <= 0 or not window:
        obs = steps[k - 1].observation
        body = f"You are now at step {k}." + (f" Your current observation is: {obs}" if obs else "")
    else:
        lines = "\n".join(f"Step {j}: {steps[j].action} <information>{steps[j].observation}</information>"
                          for j in window)
        body = (f"Prior to this step, you have already taken {k - 1} step(s). Below are the most recent "
                f"{len(window)} steps, with your queries and the information they returned:\n{lines}\n"
                f"You are now at step {k}.")
    return f"{PROGRESS_HEADING}\n\n{body}\n\n{turn}"


def render_step_messages(traj: Trajectory, k: int, skills_block: str, cfg: PromptConfig,
                         admissible: list[str] | None = None) -> list[dict]:
    """Chat messages asking for action ``k`` of ``traj``: ``[{"role": "system", ...}, {"role": "user", ...}]``.

    Args:
        traj: the trajectory; ``steps[k-1]`` is the state shown (records.py step convention).
        k: 1-based action number, ``1 <= k <= len(traj.steps)``; ``k == len(traj.steps)`` is the
            turn after the last recorded action (the synthetic ``done`` turn).
        skills_block: output of :func:`render_skills_block` (shown at every step).
        cfg: ``history_length`` = number of past (observation, action) pairs shown.
        admissible: overrides ``steps[k-1].admissible_actions`` (synthetic done sample).

    Raises ``ValueError`` for ``k`` out of range. A pure function of its arguments.
    """
    if not 1 <= k <= len(traj.steps):
        raise ValueError(f"action index k={k} out of range 1..{len(traj.steps)} for {traj.trajectory_id}")
    adm = traj.steps[k - 1].admissible_actions if admissible is None else admissible
    if traj.env == "search":
        user = _progress_search(traj, k, cfg)
    else:
        user = _progress_action_env(traj, k, cfg, list(adm or []))
    return [{"role": "system", "content": _system(traj, skills_block)}, {"role": "user", "content": user}]


def render_target(think: str, action: str, env: str) -> str:
    """SFT target: ``<think>{think}</think>\\n<action>{action}</action>``.

    Search actions already carry their ``<search>``/``<answer>`` tags and get no ``<action>``
    wrapper.
    """
    if env == "search":
        return f"<think>{think}</think>\n{action}"
    return f"<think>{think}</think>\n<action>{action}</action>"


# --------------------------------------------------------------------------- synthetic done

def needs_synthetic_done(traj: Trajectory, cfg: DistillConfig) -> bool:
    """True when ALFWorld's synthetic ``done`` turn is appended.

    Requires: env ``alfworld``, outcome success, ``cfg.synthetic_done``, and a non-empty
    admissible list on the last step (the sample is drawn from it; nothing is invented).
    """
    return (traj.env == "alfworld" and traj.success and cfg.synthetic_done
            and bool(traj.steps) and bool(traj.steps[-1].admissible_actions))


def synthetic_done_admissible(traj: Trajectory, seed: int) -> list[str]:
    """Admissible list shown on the synthetic ``done`` turn.

    The last step's admissible actions minus ``done`` (and ``help``, never shown), shuffled,
    first 9 kept, ``done`` inserted at a random position: 1..10 items, ``done`` exactly once.
    Unlike the reference's one shared RNG, the generator is
    ``random.Random(int(sha256(seed, trajectory_id)))``, so the sample does not depend on
    processing order.

    Raises ``ValueError`` unless the trajectory is a success whose last step has an admissible list.
    """
    if not traj.success or not traj.steps or not traj.steps[-1].admissible_actions:
        raise ValueError(f"synthetic done needs a successful trajectory with an admissible list on its "
                         f"last step: {traj.trajectory_id} (outcome {traj.outcome})")
    rng = random.Random(int(content_hash(seed, traj.trajectory_id), 16))
    pool = [a for a in traj.steps[-1].admissible_actions if a not in ("done", "help")]
    rng.shuffle(pool)
    pool = pool[:9]
    pool.insert(rng.randrange(len(pool) + 1), "done")
    return pool


def prompt_template_files() -> list[str]:
    """Template files hashed into stage fingerprints: none, the templates are code here and in
    ``pipeline.envs`` (covered by the code version)."""
    return []

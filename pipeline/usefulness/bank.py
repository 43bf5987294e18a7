"""Usefulness of bank items: does having the item move the scorer towards the expert's actions
on expert steps the item was not made from?

**Held-out steps.** For an item of environment ``env`` (and, for a task-specific skill, category
``c``): the expert steps of verified successful trajectories of ``env`` (of category ``c``) that
are not among the item's ``source_trajectory_ids``, so the item never saw them. Candidates are the
run's own verified successes and the environment's shipped probe set (:mod:`.heldout`); the run's
come first. At most ``heldout_steps`` steps are taken, spread over trajectories (round robin over
trajectories in a seeded order, one step of each in turn), so one long trajectory does not decide.

**Score** of an item ``s`` on a held-out step ``i`` (expert action ``a*_i``, candidates ``C_i``):
``share_i(text)`` is the expert's share among ``C_i`` when ``text`` sits in the think slot before
the action (:func:`pipeline.usefulness.score.variant`), the step's prompt rendered without a
skills block. Two methods:

* ``alone`` (default): ``gain_i = share_i(render(s)) - share_i("")`` -- the item on its own against
  no advice; one prompt prefill per step serves every item of the step's env and category, so the
  cost is one short variant per item and step;
* ``loo``: ``gain_i = share_i(render(B)) - share_i(render(B - s))`` with ``B`` the items shown for
  that category (:func:`pipeline.prompts.select_skills`): leave-one-out against the whole bank, as
  Skill0 (arXiv 2604.02268) keeps a skill only when validation with it beats validation without
  it. Each variant carries the whole block, so it costs ``|B| + 1`` long variants per step.

``score`` = mean gain, with a 95 % interval (mean +- 1.96 standard errors; ``n`` = steps). The
whole bank against no bank (``share_i(render(B)) - share_i("")``) is recorded per env as well.

**Action set.** An item that asks for an action the environment does not have (waiting, filters,
sorting: :func:`pipeline.usefulness.actionset.foreign_actions`) cannot help however it primes the
scorer; its score is the lower of its gain and ``-1`` times the share of its instruction's verbs
that are foreign (method suffix ``+actionset``).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Sequence

from pipeline.core.lineage import content_hash
from pipeline.prompts import render_skills_block
from pipeline.usefulness.actionset import foreign_share
from pipeline.usefulness.candidates import step_candidates
from pipeline.usefulness.score import suffix, variant

METHODS = ("alone", "loo")


@dataclass(frozen=True)
class HeldOutStep:
    """One expert step to score items on: action ``k`` of ``traj`` with its candidates."""
    traj: Any
    k: int
    candidates: tuple[str, ...]

    @property
    def action(self) -> str:
        return self.traj.steps[self.k].action or ""


def pick_steps(trajs: Sequence[Any], exclude: set[str], cap: int, seed_key: str, max_candidates: int
               ) -> list[HeldOutStep]:
    """Up to ``cap`` held-out steps from ``trajs`` (verified successes, best source first) that are
    not in ``exclude`` (trajectory ids), round robin over the trajectories in a seeded order (module
    docstring). Steps with a single candidate (nothing to choose) are skipped."""
    pool = [t for t in trajs if t.trajectory_id not in exclude]
    rng = random.Random(int(content_hash("heldout", seed_key), 16))
    queues = []
    for t in pool:
        ks = [k for k in range(1, len(t.steps)) if t.steps[k].action]
        rng.shuffle(ks)
        queues.append((t, ks))
    out: list[HeldOutStep] = []
    rooms_of: dict[str, Any] = {}
    while len(out) < cap and any(ks for _, ks in queues):
        for t, ks in queues:
            if not ks or len(out) >= cap:
                continue
            k = ks.pop()
            cands = step_candidates(t, k, t.steps[k].action, None, _rooms(rooms_of, t), max_candidates)
            if len(cands) > 1:
                out.append(HeldOutStep(t, k, tuple(cands)))
    return out


def _rooms(cache: dict[str, Any], traj: Any):
    if traj.env != "alfworld":
        return None
    if traj.trajectory_id not in cache:
        from pipeline.verify.alfworld import replay
        cache[traj.trajectory_id] = replay(traj)
    return cache[traj.trajectory_id]


def interval(gains: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the mean of ``gains`` and its 95 % normal interval (1.96 standard errors;
    a single value gives a zero-width interval). Raises ``ValueError`` for no values."""
    if not gains:
        raise ValueError("interval of no values")
    n = len(gains)
    mean = sum(gains) / n
    sd = math.sqrt(sum((g - mean) ** 2 for g in gains) / (n - 1)) if n > 1 else 0.0
    half = 1.96 * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def item_text(item: dict[str, Any]) -> str:
    """The item as the agent's prompt shows it (:func:`pipeline.prompts.render_skills_block`)."""
    return render_skills_block([item])


def step_gains(scorer: Any, messages: list[dict], step: HeldOutStep, items: list[dict[str, Any]],
               method: str, block: list[dict[str, Any]] | None = None) -> tuple[list[float], float]:
    """``(gain per item, bank gain)`` on one held-out step (module docstring); ``block`` = the
    items shown for the step's category (``loo`` and the bank gain; ``None``: ``items``)."""
    env = step.traj.env
    shown = block if block is not None else items
    texts = [""] + [render_skills_block(shown)]
    if method == "loo":
        texts += [render_skills_block([x for x in shown if x is not it]) for it in items]
    else:
        texts += [item_text(it) for it in items]
    result = scorer.shares(messages, [variant(t, env) for t in texts], list(step.candidates), suffix(env))
    expert = [row[0] for row in result.shares]
    empty, whole = expert[0], expert[1]
    if method == "loo":
        return [whole - x for x in expert[2:]], whole - empty
    return [x - empty for x in expert[2:]], whole - empty


def combine(gain: float, item: dict[str, Any], env: str) -> tuple[float, str]:
    """The item's score from its mean gain and the action-set check (module docstring):
    ``(score, method suffix)``."""
    foreign = foreign_share(item, env)
    if foreign > 0:
        return min(gain, -foreign), "+actionset"
    return gain, ""


@dataclass
class ItemScore:
    """The score of one bank item (module docstring) and what it was measured on."""
    score: float
    n: int
    lo: float
    hi: float
    method: str


def same_category(item_category: str, step_category: str) -> bool:
    """Whether a task-specific item of ``item_category`` is about a step of ``step_category``: the
    same key, or one the prompt falls back to for it (:data:`pipeline.prompts.CATEGORY_FALLBACKS`:
    an ``examine`` skill is shown for ``look_at_obj_in_light`` tasks)."""
    from pipeline.prompts import CATEGORY_FALLBACKS
    return item_category == step_category or item_category in CATEGORY_FALLBACKS.get(step_category, ())


def applies(item: dict[str, Any], step: HeldOutStep, categories: set[str] | None = None) -> bool:
    """Whether ``item`` is scored on ``step``: general skills and mistakes on every step of their
    env, a task-specific skill on steps of its category (:func:`same_category`), or on every step
    when ``categories`` (the categories the held-out pool has) holds none of its own."""
    if item.get("kind") != "task_specific":
        return True
    cat = item.get("category") or ""
    if categories is not None and not any(same_category(cat, c) for c in categories):
        return True
    return same_category(cat, step.traj.category or "")


def plan_steps(items: list[dict[str, Any]], pool: Sequence[Any], cap: int, max_candidates: int
               ) -> list[HeldOutStep]:
    """The held-out steps of one env's ``items``: up to ``cap`` over the whole ``pool`` (general
    skills, mistakes, and task-specific items whose category the pool lacks) and up to ``cap`` of
    each category a task-specific item has, none from a
    trajectory any of ``items`` was made from (the union of their sources); duplicates once."""
    exclude = {t for it in items for t in it.get("source_trajectory_ids") or []}
    env = items[0].get("env") or ""
    steps = pick_steps(pool, exclude, cap, f"{env}/all", max_candidates)
    for cat in sorted({it.get("category") or "" for it in items if it.get("kind") == "task_specific"}):
        same = [t for t in pool if same_category(cat, t.category or "")]
        steps += pick_steps(same, exclude, cap, f"{env}/{cat}", max_candidates)
    seen, out = set(), []
    for s in steps:
        if (s.traj.trajectory_id, s.k) not in seen:
            seen.add((s.traj.trajectory_id, s.k))
            out.append(s)
    return out


def score_items(scorer: Any, items: list[dict[str, Any]], steps: list[HeldOutStep], messages_of,
                method: str = "alone", block_of=None) -> tuple[list[ItemScore | None], list[float]]:
    """Scores of one env's ``items`` on ``steps`` (module docstring), and the whole bank's gain per
    step. ``messages_of(step)`` gives a step's scorer prompt; ``block_of(step)`` the items shown
    for its category (``loo``; default: the applicable ``items``). An item no step applies to
    gets ``None``."""
    gains: list[list[float]] = [[] for _ in items]
    bank: list[float] = []
    categories = {s.traj.category or "" for s in steps}
    for step in steps:
        idx = [i for i, it in enumerate(items) if applies(it, step, categories)]
        if not idx:
            continue
        block = block_of(step) if block_of else [items[i] for i in idx]
        per, whole = step_gains(scorer, messages_of(step), step, [items[i] for i in idx], method, block)
        bank.append(whole)
        for i, g in zip(idx, per):
            gains[i].append(g)
    out: list[ItemScore | None] = []
    for it, g in zip(items, gains):
        if not g:
            out.append(None)
            continue
        mean, lo, hi = interval(g)
        score, extra = combine(mean, it, it.get("env") or "")
        out.append(ItemScore(round(score, 6), len(g), round(lo, 6), round(hi, 6), method + extra))
    return out, bank


def step_messages(step: HeldOutStep, pcfg: Any) -> list[dict]:
    """The scorer's prompt of a held-out step: its system and user turns without a skills block
    (the run's ``prompt`` history), as the think score reads a step."""
    import dataclasses
    from pipeline.prompts import render_step_messages
    return render_step_messages(step.traj, step.k, "", dataclasses.replace(pcfg, skills=False))

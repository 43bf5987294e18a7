"""Data-quality metrics of an exported SFT dataset, computed by stage ``export``.

Users of SkillRL measured its released WebShop SFT data: outputs almost never use
the skills shown (1.1 %), every example carries the same skill block, many trajectories stop
before the goal. These figures make such defects visible in every run (export manifest
``counters["quality_metrics"]`` and ``DATASET_CARD.md``). Inputs are plain rows:

* ``pairs``: SFT pair rows (``records.SFT_PAIR_SCHEMA``: ``think``, ``action``, ``env``,
  ``category``, ``trajectory_id``, ``step_index``, ``synthetic``, ``skill_ids_used``,
  ``instruction``, ``output``);
* ``skills``: ``{skill_id: text}`` of the bank (``_skillmerge.skill_text``);
* ``trajs``: ``{trajectory_id: Trajectory}`` (the verify artifact).

Each function defines its metric in its docstring; all are deterministic.
"""
from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from typing import Any

from pipeline.core.records import Trajectory

_CONTENT = re.compile(r"[^\W\d_]{3,}")
#: Function words that carry no skill content (a short closed list; words of < 3 letters never count).
STOPWORDS = frozenset(
    "the and for are but not you your with this that from then than into onto have has had was were will "
    "would should could can may might must its it's our out off all any each only also just more most some "
    "such very what when where which while who why how there here they them their been being does did done "
    "doing about after before again need needs now next first use using get got make".split())
#: A terminal action per env: the action that completes the task (WebShop buys; ALFWorld puts or
#: moves the object to its target; Search answers). Envs not listed have no terminal-action metric.
TERMINAL_ACTIONS = {"webshop": re.compile(r"click\[\s*buy now\s*\]", re.I),
                    "alfworld": re.compile(r"(put|move)\s", re.I),
                    "search": re.compile(r"<answer>", re.I)}


def content_words(text: str) -> set[str]:
    """Lower-cased words of >= 3 letters in ``text`` that are not :data:`STOPWORDS`."""
    return {w for w in (m.lower() for m in _CONTENT.findall(text or "")) if w not in STOPWORDS}


def uses_skill(think: str, skill_texts: list[str], context: str, min_shared: int) -> bool:
    """True when ``think`` shares at least ``min_shared`` content words with one of ``skill_texts``
    that do not occur in ``context`` (the task, the observation shown and the action: words a
    think would use without any skill)."""
    own = content_words(think) - content_words(context)
    return any(len(own & content_words(s)) >= min_shared for s in skill_texts)


def skill_use_rate(pairs: list[dict[str, Any]], skills: dict[str, str], trajs: dict[str, Trajectory],
                   min_shared: int) -> dict[str, Any]:
    """Skill-use rate: among pairs whose prompt shows at least one skill, the share whose think
    :func:`uses_skill` (context = task, the observation of the pair's step and its action).
    Returns ``{"rate": float | None, "pairs_with_skills": n, "using": n, "min_shared": min_shared}``;
    ``rate`` is None when no pair shows a skill."""
    shown = using = 0
    for p in pairs:
        texts = [skills[s] for s in p.get("skill_ids_used") or [] if s in skills]
        if not texts:
            continue
        shown += 1
        t = trajs.get(p["trajectory_id"])
        obs = t.steps[min(p["step_index"], len(t.steps)) - 1].observation if t else ""
        context = " ".join([t.task if t else "", obs, p.get("action") or ""])
        using += uses_skill(p.get("think") or "", texts, context, min_shared)
    return {"rate": round(using / shown, 4) if shown else None, "pairs_with_skills": shown, "using": using,
            "min_shared": min_shared}


def skill_block_diversity(pairs: list[dict[str, Any]], trajs: dict[str, Trajectory]) -> dict[str, Any]:
    """Skill-block diversity. A pair's block is the ordered tuple of its ``skill_ids_used``.
    Returns ``{"blocks": distinct blocks, "per_category": {"env/category": distinct blocks},
    "tasks": distinct task texts, "blocks_per_task": blocks / tasks}``: 1.0 per task means
    every task gets its own block; a value near 0 means one block for everything (SkillRL #22)."""
    blocks = {tuple(p.get("skill_ids_used") or []) for p in pairs}
    per_cat: dict[str, set] = {}
    for p in pairs:
        per_cat.setdefault(f"{p['env']}/{p['category']}", set()).add(tuple(p.get("skill_ids_used") or []))
    tasks = {trajs[p["trajectory_id"]].task if p["trajectory_id"] in trajs else p["trajectory_id"] for p in pairs}
    return {"blocks": len(blocks), "per_category": {k: len(v) for k, v in sorted(per_cat.items())},
            "tasks": len(tasks), "blocks_per_task": round(len(blocks) / len(tasks), 4) if tasks else None}


def reached_goal(traj: Trajectory) -> bool:
    """The source says ``traj`` reached its goal: outcome ``success`` and the outcome was recorded,
    not assumed (chat records without an outcome field carry ``"outcome_source": "assumed"``)."""
    try:
        meta = json.loads(traj.metadata or "{}")
    except json.JSONDecodeError:
        meta = {}
    return traj.success and (meta.get("outcome_source") if isinstance(meta, dict) else None) != "assumed"


def trajectory_completeness(pairs: list[dict[str, Any]], trajs: dict[str, Trajectory]) -> dict[str, Any]:
    """Trajectory completeness: the share of pairs whose trajectory reached its goal
    (:func:`reached_goal`) AND has the pair of its final recorded action in the export, so the
    SFT sequence of that trajectory runs to the goal. ``{"rate": float | None, "pairs": n,
    "complete_pairs": n}`` (rate None for no pairs)."""
    exported = {(p["trajectory_id"], p["step_index"]) for p in pairs}
    complete = 0
    for p in pairs:
        t = trajs.get(p["trajectory_id"])
        complete += bool(t and reached_goal(t) and (t.trajectory_id, len(t.steps) - 1) in exported)
    return {"rate": round(complete / len(pairs), 4) if pairs else None, "pairs": len(pairs),
            "complete_pairs": complete}


def terminal_action_coverage(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Terminal-action coverage per env of :data:`TERMINAL_ACTIONS`: the share of the env's
    exported trajectories with at least one exported pair whose action is terminal
    (WebShop ``click[buy now]``; ALFWorld ``put``/``move``; Search ``<answer>``).
    ``{env: {"trajectories": n, "with_terminal": n, "rate": float}}``, envs in name order."""
    seen: dict[str, set] = {}
    hit: dict[str, set] = {}
    for p in pairs:
        rule = TERMINAL_ACTIONS.get(p["env"])
        if rule is None:
            continue
        seen.setdefault(p["env"], set()).add(p["trajectory_id"])
        if rule.match((p.get("action") or "").strip()):
            hit.setdefault(p["env"], set()).add(p["trajectory_id"])
    return {env: {"trajectories": len(ids), "with_terminal": len(hit.get(env, ())),
                  "rate": round(len(hit.get(env, ())) / len(ids), 4)} for env, ids in sorted(seen.items())}


def action_type(action: str) -> str:
    """An action's type: the text before ``[`` for bracket actions (``click[...]`` -> ``click``),
    the tag for ``<search>``/``<answer>``, else the first word (``go to desk 1`` -> ``go``)."""
    a = (action or "").strip().lower()
    if m := re.match(r"<(\w+)>", a):
        return m.group(1)
    return re.split(r"[\[\s]", a, maxsplit=1)[0] if a else ""


def action_entropy(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Action-distribution entropy per env: Shannon entropy in bits of the :func:`action_type`
    distribution of the env's pairs (``[go, go, take, put]`` -> 1.5), with the number of types.
    ``{env: {"bits": float, "types": n}}``, rounded to 4 places."""
    by_env: dict[str, Counter] = {}
    for p in pairs:
        by_env.setdefault(p["env"], Counter())[action_type(p.get("action") or "")] += 1
    out = {}
    for env, counts in sorted(by_env.items()):
        n = sum(counts.values())
        bits = -sum(c / n * math.log2(c / n) for c in counts.values())
        out[env] = {"bits": round(bits + 0.0, 4), "types": len(counts)}
    return out


def think_length(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Think length in whitespace-separated words: ``{"mean", "median", "min", "max"}`` over the
    pairs (mean rounded to 2 places), or all None for no pairs."""
    lengths = [len((p.get("think") or "").split()) for p in pairs]
    if not lengths:
        return {"mean": None, "median": None, "min": None, "max": None}
    return {"mean": round(statistics.fmean(lengths), 2), "median": statistics.median(lengths),
            "min": min(lengths), "max": max(lengths)}


def duplicate_pair_rate(pairs: list[dict[str, Any]]) -> float | None:
    """Duplicate-pair rate: 1 - distinct ``(instruction, output)`` / pairs (two identical pairs
    out of 4 -> 0.25); None for no pairs."""
    if not pairs:
        return None
    return round(1 - len({(p["instruction"], p["output"]) for p in pairs}) / len(pairs), 4)


def all_metrics(pairs: list[dict[str, Any]], skills: dict[str, str], trajs: dict[str, Trajectory],
                min_shared: int) -> dict[str, Any]:
    """Every metric of this module over ``pairs`` (the export manifest's ``quality_metrics``)."""
    return {"pairs": len(pairs), "skill_use": skill_use_rate(pairs, skills, trajs, min_shared),
            "skill_block_diversity": skill_block_diversity(pairs, trajs),
            "trajectory_completeness": trajectory_completeness(pairs, trajs),
            "terminal_action_coverage": terminal_action_coverage(pairs),
            "action_entropy": action_entropy(pairs), "think_length": think_length(pairs),
            "duplicate_pair_rate": duplicate_pair_rate(pairs)}

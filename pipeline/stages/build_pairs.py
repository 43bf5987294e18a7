"""Stage ``build_pairs``: expand distilled trajectories into SFT pairs and check every pair.

Inputs: ``verify`` (trajectories), ``skills`` (skill bank rows), ``distill`` (one row per
trajectory with a think per recorded action, plus the synthetic ``done`` think for ALFWorld).
Each distilled trajectory becomes one candidate pair per action (+ the synthetic turn); a unit of
the count invariant is one candidate pair (a distill row that cannot be expanded counts as one).

Rules, checked in this order; the reason string is the
quarantine ``reason`` (or the flag, when ``config.BuildPairsConfig`` sets the rule's policy to "flag"):

* ``missing_think``       no think for this action (distill guarantees 1:1, so this is a bug signal)
* ``think_has_tags``      reasoning contains <think>/<action>/<search>/<answer>/<information> tags
* ``think_has_cjk``       reasoning contains CJK text (SkillRL's RL projection penalises it)
* ``empty_think``         blank reasoning                                      [policy: empty_think]
* ``short_think``         non-blank reasoning with fewer than ``min_think_words`` words of >= 2
                          letters, e.g. ``1.5-2.3`` or ``,.15,`` from a small distill model: numbers
                          and punctuation are not reasoning (ours; policy default "quarantine":
                          such thinks would otherwise become targets)  [policy: short_think]
* content rules          the checks of target ``pair`` of the content-rule registry
                          (:func:`content_violations`), each with its own reason: today
                          ``think_is_action``, the think only restates an action (the pair's, an
                          admissible one or one of the trajectory) or is a bare command, distill's
                          rule checked again, since a think taken from the source's recorded
                          thoughts or from a distill artifact written before the rule existed never
                          went through it [policy: quarantine, or flag when ``quality.flag_rules``
                          names it]
* ``bad_action_format``   WebShop action not ``search[...]``/``click[...]``; Search action not one
                          ``<search>..</search>`` or ``<answer>..</answer>``; empty action
* ``not_admissible``      action not in the shown admissible list, even after whitespace/case
                          normalisation                                       [policy: not_admissible]
* ``bad_format``          target is not exactly one <think> then one <action> (Search: search/answer)
* ``leakage``             the answer appears in the prompt outside task/observations/real list
                                                                              [policy: leakage]
* ``truncated_no_target`` too long even with all history dropped; tokens are counted as ``sft fit``
                          counts them, with the tokenizer of the model to be trained and its chat
                          template (``build_pairs.tokenizer``, :mod:`pipeline.tokens`)
* ``invalid_action_in_source`` the rollout dump marked this action invalid (``Valid Action: False``,
                          reader metadata ``invalid_actions``): the projection's garbage never
                          becomes an SFT target
* ``trajectory_rejected`` WebShop (ours): once a ``click[...]`` is not admissible, the
                          trajectory is dropped whole (policy ``webshop_reject = "drop_whole"``,
                          default) or from that pair on (``"truncate"``: earlier pairs are kept and
                          flagged ``trajectory_truncated``); nothing is inserted or invented.

Flags that never quarantine: ``no_admissible_list`` (source recorded none: membership unchecked),
``action_normalised`` (the action was replaced by the real admissible item it matches after
normalisation: the only "fix", made with real data, never invented), ``history_truncated``,
``recorded_thought`` (the think is the thought the source recorded for this step, whitespace
collapsed: ``distill.source_thoughts = prefer``).
WebShop ``search[...]`` is format-checked only (its admissible entry is ``search[<your query>]``);
``click[...]`` must match a real admissible item.
"""
from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from typing import Any

from pipeline import quality, rules

from pipeline.core import lineage
from pipeline.quality.registry import Registry
from pipeline.quality.rulebook import REGISTRY
from pipeline.quality.targets.rows import PairThink
from pipeline.prompts import (needs_synthetic_done, prompt_template_files, render_skills_block,
                       render_step_messages, render_target, select_skills, synthetic_done_admissible,
                       visible_admissible)
from pipeline.core.config import check_fields
from pipeline.core.records import SFT_PAIR_SCHEMA, QuarantineRow, Trajectory
from pipeline.stage.stage import Stage, StageContext, StageOutput, reject
from pipeline.tokens import counter_for

NAME = "build_pairs"  # the stage's name, in its quarantine rows

_TAG_PARTS = rules.TAG_PART
_WEBSHOP_ACTION = re.compile(r"(search|click)\[(.+)\]", re.I | re.S)
_SEARCH_ACTION = re.compile(r"<(search|answer)>(.+?)</\1>", re.S)
_WORD = re.compile(r"[^\W\d_]{2,}")  # a run of >= 2 letters (any script; digits/underscore excluded)


def pair_tokens(messages: list[dict], target: str, tokenizer: str) -> int:
    """Tokens of the pair ``messages`` + assistant ``target`` as the SFT trainer counts them
    (chat template + tokenizer named by ``build_pairs.tokenizer``; :mod:`pipeline.tokens`)."""
    return counter_for(tokenizer).count(messages + [{"role": "assistant", "content": target}])


def think_words(think: str) -> int:
    """Words of ``think`` that are text: runs of >= 2 letters (``"1.5-2.3"`` -> 0,
    ``"go to the desk first"`` -> 5, ``"T1"`` -> 0). Used by rule ``short_think``."""
    return len(_WORD.findall(think))


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


@dataclasses.dataclass
class Candidate:
    """One pair to check: action ``k`` of ``traj`` with its think and shown admissible list."""
    traj: Trajectory
    k: int
    think: str | None
    action: str
    admissible: list[str]
    synthetic: bool = False


def action_format_ok(action: str, env: str) -> bool:
    """WebShop ``search[..]``/``click[..]``; Search exactly one ``<search>``/``<answer>`` block."""
    if not action.strip():
        return False
    if env == "webshop":
        return bool(_WEBSHOP_ACTION.fullmatch(action.strip()))
    if env == "search":
        m = _SEARCH_ACTION.fullmatch(action.strip())
        return bool(m and m.group(2).strip()) and len(_TAG_PARTS.findall(action)) == 2
    return "\n" not in action.strip()


def target_format_ok(target: str, env: str) -> bool:
    """Exactly one ``<think>..</think>`` followed by exactly one action block and no other tag
    (the RL projection reads the first ``<action>``; Search: ``<search>``/``<answer>``)."""
    tags = [(slash, name.lower()) for slash, name in _TAG_PARTS.findall(target)]
    acts = ("search", "answer") if env == "search" else ("action",)
    return any(tags == [("", "think"), ("/", "think"), ("", a), ("/", a)] for a in acts)


def match_admissible(action: str, shown: list[str]) -> str | None:
    """The real admissible item ``action`` denotes (exact, else whitespace/case-normalised), or None."""
    if action in shown:
        return action
    hits = [a for a in shown if _norm(a) == _norm(action)]
    return hits[0] if hits else None


def _leak_target(action: str, env: str) -> str | None:
    """The string whose presence in a prompt would leak the label (None when not checkable).

    Search: the answer text. WebShop: a concrete ``search[query]``. ALFWorld-style actions
    are everyday phrases that legitimately occur in instructions and skills, and their lists are
    never edited here, so they are not checked.
    """
    if env == "search":
        m = _SEARCH_ACTION.fullmatch(action.strip())
        return m.group(2).strip() if m and m.group(1) == "answer" else None
    if env == "webshop" and action.lower().startswith("search["):
        return action
    return None


def leaks(prompt: str, cand: Candidate, action: str) -> bool:
    """True when the label text occurs in ``prompt`` outside its legitimate sources (task,
    observations, previous actions, the real admissible items shown)."""
    target = _leak_target(action, cand.traj.env)
    if not target:
        return False
    legit = [cand.traj.task] + [s.observation for s in cand.traj.steps] + cand.admissible
    legit += [s.action or "" for s in cand.traj.steps[1:cand.k]]
    rest = prompt
    for text in sorted((t for t in legit if t), key=len, reverse=True):
        rest = rest.replace(text, " ")
    return re.search(r"(?<!\w)" + re.escape(_norm(target)) + r"(?!\w)", _norm(rest)) is not None


def candidates(d: dict[str, Any], traj: Trajectory, seed: int, synthetic_ok: bool
               ) -> tuple[list[Candidate], list[tuple[int, str]]]:
    """Candidate pairs of one distill row, and the think indices that match no action
    (``(step_index, why)``; each is quarantined as one unit)."""
    thinks = {int(t["step_index"]): t["think"] for t in d.get("thinks") or []}
    n = len(traj.steps) - 1
    out = [Candidate(traj, i + 1, thinks.get(i), traj.steps[i + 1].action or "",
                     list(traj.steps[i].admissible_actions or [])) for i in range(n)]
    stray = [(i, "think index matches no recorded action") for i in sorted(thinks) if not 0 <= i < n]
    if d.get("synthetic_done"):
        stray = [s for s in stray if s[0] != n]
        if synthetic_ok:
            out.append(Candidate(traj, n + 1, thinks.get(n), "done", synthetic_done_admissible(traj, seed), True))
        else:
            stray.insert(0, (n, "synthetic done on a trajectory that is not an ALFWorld success "
                                "with an admissible list"))
    return out, stray


def invalid_source_actions(traj: Trajectory) -> dict[int, str]:
    """``{step index: reason}`` of actions the source marked invalid (reader metadata ``invalid_actions``)."""
    try:
        meta = json.loads(traj.metadata or "{}")
    except json.JSONDecodeError:
        return {}
    return {int(e["index"]): str(e.get("reason") or "") for e in meta.get("invalid_actions") or []
            if isinstance(e, dict) and isinstance(e.get("index"), int)}


def reject_webshop(traj: Trajectory, results: list[tuple[Candidate, dict | None, QuarantineRow | None]],
                   policy: str) -> list[tuple[Candidate, dict | None, QuarantineRow | None]]:
    """Apply the WebShop trajectory policy (ours) to one trajectory's checked pairs.

    The first pair quarantined ``not_admissible`` whose action is a ``click[...]`` rejects the
    trajectory: with ``drop_whole`` every other kept pair is quarantined ``trajectory_rejected``;
    with ``truncate`` only the later ones are, and the earlier ones are flagged
    ``trajectory_truncated``. Other envs, and trajectories without such a pair, pass unchanged.
    """
    if traj.env != "webshop":
        return results
    first = next((c.k for c, _, q in results if q is not None and q.reason == "not_admissible"
                  and c.action.strip().lower().startswith("click[")), None)
    if first is None:
        return results
    out = []
    for cand, row, q in results:
        if row is not None and (policy == "drop_whole" or cand.k > first):
            q = reject(NAME, "trajectory_rejected", f"pair {first} of this WebShop trajectory has an "
                       f"inadmissible click (build_pairs.webshop_reject={policy})", row["pair_id"],
                       row["output"], traj.source_uri, row["source_line"])
            row = None
        elif row is not None:
            row["flags"].append("trajectory_truncated")
        out.append((cand, row, q))
    return out


class BuildPairs(Stage):
    """Expand distilled trajectories into SFT pairs and check each one (module docstring)."""
    name = NAME
    inputs = ("verify", "skills", "distill")
    schema = SFT_PAIR_SCHEMA
    config_sections = ("build_pairs", "prompt", "distill", "quality")
    sharded = True  # one trajectory at a time: runs per shard

    def prompt_files(self, ctx: StageContext) -> list[str]:
        """See :meth:`Stage.prompt_files`: none (:func:`pipeline.prompts.prompt_template_files`;
        the prompt templates are code, covered by the code version)."""
        return prompt_template_files()

    def run(self, ctx: StageContext) -> StageOutput:
        """Expand and check every distilled trajectory; raises ``ConfigError`` (a ``ValueError``)
        for a policy that is not one of its choices."""
        cfg = ctx.config
        check_fields(cfg.build_pairs, "build_pairs")  # a config built in code skipped load_config's check
        trajs = {r["trajectory_id"]: Trajectory.from_row(r) for r in ctx.upstream("verify").read_rows()}
        bank = ctx.upstream("skills").read_rows()
        distilled = ctx.upstream("distill").read_rows()
        rows, quarantine, units = [], [], 0
        flags: Counter = Counter()
        for d in distilled:
            results, rejected = _expand(d, trajs.get(d["trajectory_id"]), bank, ctx)
            units += len(results) + len(rejected)
            quarantine += rejected
            if results:  # the WebShop rule looks at the whole trajectory's pairs
                results = reject_webshop(results[0][0].traj, results, cfg.build_pairs.webshop_reject)
            for _, row, q in results:
                if q:
                    quarantine.append(q)
                else:
                    flags.update(row["flags"])
                    rows.append(row)
        return StageOutput(rows=rows, quarantine=quarantine, rows_in=len(distilled), units_in=units,
                           counters={"flags": dict(sorted(flags.items())), "pairs": len(rows),
                                     "tokenizer": counter_for(cfg.build_pairs.tokenizer).name})


def _expand(d: dict[str, Any], traj: Trajectory | None, bank: list[dict[str, Any]], ctx: StageContext
            ) -> tuple[list[tuple[Candidate, dict | None, QuarantineRow | None]], list[QuarantineRow]]:
    """Check every candidate pair of distill row ``d``: ``(checked candidates, quarantine rows of
    the units that are no candidate)``: a missing trajectory or skill (the whole row is one
    unit), a think that matches no action."""
    tid = d["trajectory_id"]
    missing = sorted(set(d.get("skill_ids_used") or []) - {r["skill_id"] for r in bank})
    if traj is None:
        return [], [reject(NAME, "missing_trajectory", f"trajectory {tid} is not in the verify artifact",
                           tid)]
    if missing:
        return [], [reject(NAME, "missing_skills", f"skills {missing} are not in the skills artifact", tid,
                           source_uri=traj.source_uri, line=traj.source_line)]
    cfg = ctx.config
    used = set(d.get("skill_ids_used") or [])
    skills = select_skills([r for r in bank if r["skill_id"] in used], traj.env, d.get("category") or traj.category,
                           cfg.prompt)
    block = render_skills_block(skills)
    cands, stray = candidates(d, traj, cfg.distill.seed, needs_synthetic_done(traj, cfg.distill))
    rejected = [reject(NAME, "unexpected_think", f"think step_index {i}: {why}", tid, source_uri=traj.source_uri,
                       line=traj.source_line) for i, why in stray]
    return [(cand, *check_pair(cand, d, block, ctx)) for cand in cands], rejected


def check_pair(cand: Candidate, d: dict[str, Any], block: str, ctx: StageContext
               ) -> tuple[dict[str, Any] | None, QuarantineRow | None]:
    """Apply the rules (module docstring) to one candidate: ``(row, None)`` or ``(None, quarantine)``."""
    vcfg, pcfg, traj, env = ctx.config.build_pairs, ctx.config.prompt, cand.traj, cand.traj.env
    think, action, flags = (cand.think or "").strip(), cand.action.strip(), []
    full = render_step_messages(traj, cand.k, block, pcfg, cand.admissible)  # id basis of quarantined pairs
    line = traj.steps[min(cand.k, len(traj.steps) - 1)].line

    def fail(reason: str, detail: str, policy: str = "quarantine"):
        if policy == "flag":
            flags.append(reason)
            return None
        target = render_target(think, action, env)
        pid = lineage.pair_id(traj.trajectory_id, cand.k, _instruction(full), target)
        return reject(NAME, reason, detail, pid, target, traj.source_uri, line)

    for bad, reason, detail, policy in _early_rules(cand, think, action, vcfg, ctx.config.quality.flag_rules):
        if bad and (q := fail(reason, detail, policy)):
            return None, q

    action, q = _admissible(action, env, visible_admissible(cand.admissible), flags, fail, vcfg.not_admissible)
    if q:
        return None, q

    target = render_target(think, action, env)
    if not target_format_ok(target, env) and (q := fail("bad_format", "target is not one <think> then one action")):
        return None, q

    messages, h = _fit(traj, cand, block, pcfg, target, vcfg.max_tokens, vcfg.tokenizer)
    if messages is None:
        return None, fail("truncated_no_target", f"prompt+target exceeds {vcfg.max_tokens} tokens "
                                                 f"({vcfg.tokenizer} tokenizer) with all history dropped")
    if h < pcfg.history_length:
        flags.append("history_truncated")
    if not cand.synthetic and think and think == " ".join((traj.steps[cand.k].thought or "").split()):
        flags.append("recorded_thought")
    if leaks(_instruction(messages), cand, action) and (q := fail("leakage", "the answer text occurs in the prompt",
                                                                   vcfg.leakage)):
        return None, q
    instruction = _instruction(messages)
    return {
        "pair_id": lineage.pair_id(traj.trajectory_id, cand.k, instruction, target),
        "trajectory_id": traj.trajectory_id, "step_id": lineage.step_id(traj.trajectory_id, cand.k),
        "step_index": cand.k, "env": env, "env_instance": traj.env_instance,
        "category": d.get("category") or traj.category,
        "messages": messages + [{"role": "assistant", "content": target}],
        "instruction": instruction, "output": target, "action": action, "think": think,
        "synthetic": cand.synthetic, "memory_ids": list(d.get("memory_ids") or []),
        "skill_ids_used": list(d.get("skill_ids_used") or []), "bank_version": d.get("bank_version") or "",
        "source_uri": traj.source_uri, "source_line": line, "model": d.get("model") or "",
        "prompt_sha": d.get("prompt_sha") or "", "flags": flags, "split": "", "usefulness": None,
    }, None


def _early_rules(cand: Candidate, think: str, action: str, vcfg, flag_rules=()) -> list[tuple[bool, str, str, str]]:
    """The rules checked before the admissible list, in order: ``(broken, reason, detail, policy)``;
    ``think``/``action`` stripped, ``vcfg`` the ``build_pairs`` config, ``flag_rules`` the content
    rules ``quality.flag_rules`` only counts (:func:`pipeline.quality.flagged_reasons`)."""
    env = cand.traj.env
    invalid = {} if cand.synthetic else invalid_source_actions(cand.traj)
    flagged = quality.flagged_reasons(flag_rules)
    content = [(True, v.reason, v.detail, "flag" if v.reason in flagged else "quarantine")
               for v in content_violations(cand, think)]
    return [
        (cand.k in invalid, "invalid_action_in_source",
         f"the source marked action {cand.k} invalid: {invalid.get(cand.k) or 'no reason given'}", "quarantine"),
        (cand.think is None, "missing_think", "distill row has no think for this action", "quarantine"),
        (rules.has_tag(think), "think_has_tags", "reasoning contains prompt/action tags", "quarantine"),
        (rules.has_cjk(think), "think_has_cjk", "reasoning contains CJK characters", "quarantine"),
        (cand.think is not None and not think, "empty_think", "reasoning is blank", vcfg.empty_think),
        (bool(think) and think_words(think) < vcfg.min_think_words, "short_think",
         f"reasoning has {think_words(think)} words of letters (< build_pairs.min_think_words="
         f"{vcfg.min_think_words}): {think[:40]!r}", vcfg.short_think),
        *content,
        (not action_format_ok(action, env), "bad_action_format", f"action {action!r} has no valid {env} form",
         "quarantine"),
    ]


def content_violations(cand: Candidate, think: str, registry: Registry | None = None) -> list[quality.Violation]:
    """The content rules of one candidate's ``think`` (stripped): the checks of target ``pair`` of
    ``registry`` (default :data:`pipeline.quality.rulebook.REGISTRY`): ``think_is_action`` as
    distill checks it (the step's action, then its admissible list and every recorded action of
    the trajectory)."""
    traj_actions = [s.action or "" for s in cand.traj.steps[1:]]
    subject = PairThink(think, cand.k - 1, cand.action, cand.admissible, traj_actions, cand.traj.env)
    return (registry or REGISTRY).run("pair", subject)


def _admissible(action: str, env: str, shown: list[str], flags: list[str], fail, policy: str
                ) -> tuple[str, QuarantineRow | None]:
    """Rule ``not_admissible`` (not for Search, nor for WebShop ``search[...]``): ``(action, None)``,
    the action replaced by the real item it matches after normalisation (flag
    ``action_normalised``), or ``(action, quarantine row)``; ``fail(reason, detail, policy)``
    builds the row or records the flag."""
    if env == "search" or (env == "webshop" and action.lower().startswith("search[")):
        return action, None
    if not shown:
        flags.append("no_admissible_list")
    elif (real := match_admissible(action, shown)) is None:
        return action, fail("not_admissible", f"action {action!r} not in the {len(shown)} admissible actions", policy)
    elif real != action:
        flags.append("action_normalised")
        return real, None
    return action, None


def _instruction(messages: list[dict]) -> str:
    """Alpaca instruction: system + blank line + user (the RL prompt read as one text)."""
    return messages[0]["content"] + "\n\n" + messages[1]["content"]


def _fit(traj: Trajectory, cand: Candidate, block: str, pcfg, target: str, max_tokens: int, tokenizer: str):
    """Render with the longest history window (<= config) that fits ``max_tokens``: the oldest
    history pairs go first; system, task and the full target are always kept.
    Returns ``(messages, history_length)`` or ``(None, 0)``."""
    for h in range(max(pcfg.history_length, 0), -1, -1):
        msgs = render_step_messages(traj, cand.k, block, dataclasses.replace(pcfg, history_length=h), cand.admissible)
        if pair_tokens(msgs, target, tokenizer) <= max_tokens:
            return msgs, h
    return None, 0


STAGE = BuildPairs()

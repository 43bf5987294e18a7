"""Stage ``distill``: write one short reasoning (``think``) per recorded action of each success.

Spec §6. For each SUCCESS trajectory, one structured call (or one per chunk of
``distill.max_steps_per_call`` actions: D-T6) gets the task, the retrieved skills block
(``prompts.select_skills`` + ``render_skills_block``, the same renderer as SFT export and RL,
D-K3) and the steps (observation, admissible actions, action taken; a recorded ``thought`` of a
ReAct source is shown as a hint). ALFWorld successes get the synthetic ``done`` turn when
``prompts.needs_synthetic_done`` says so (spec §6.1, D-T4), with ``prompts.synthetic_done_admissible``.

Indexing: ``thinks[i]`` (0-based ``step_index = i``) is the reasoning for action ``i + 1``, i.e.
``traj.steps[i + 1].action``; the synthetic ``done`` has ``step_index = n_actions``.

The per-call JSON Schema forces exactly the expected indices (``prefixItems`` with a ``const``
``step_index`` per position), which llama.cpp turns into a grammar; :func:`check_thinks` also
checks them 1:1 plus the content rules of D-T3 (no tags, no CJK, non-blank, bounded). The
reference trusted the indices and silently emitted empty thinks (D-T3). Failures (the model's
raw output kept) and non-successes (reason ``not_success``: failures feed memories, not SFT) are
quarantined. Units: trajectories.

Content rules (issue 13, ``pipeline.quality``): each answer's check also rejects a think with no
words, an n-gram loop, a think reused for two steps, a think naming an entity the agent has not
seen yet (``future_leak``) and an off-topic think; the rule's reason is fed back in the repair
round, then quarantines the trajectory. ``distill.source_thoughts = prefer`` (default) uses a
step's recorded thought (ReAct ``think:``, ETO) as its think when it passes the same rules
(:func:`recorded_thinks`) and asks the LLM only for the other steps; validate flags those pairs
``recorded_thought``; a row whose thinks are all recorded has ``model = "source"``.
"""
from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any, Callable

from pipeline import prompts, quality, rules
from pipeline.core.config import QualityConfig
from pipeline.llm.schemas import load_schema, wrap
from pipeline.llm.types import JSONRequest, JSONResult
from pipeline.quality import grounding, text, topic
from pipeline.core.records import DISTILLED_SCHEMA, QuarantineRow, Trajectory
from pipeline.core.stage import StageContext, StageOutput
from pipeline.llm import templates as _templates

NAME = "distill"
INPUTS = ("remove_loops", "memory", "skills")
SCHEMA = DISTILLED_SCHEMA
USES_LLM = True
CONFIG = ("distill", "prompt", "quality")  # config sections it reads (fingerprinted; + llm when USES_LLM)

OBS_CHARS = 500          # observation shown per step (the reasoning needs the gist, not all of it)
ADMISSIBLE_SHOWN = 25    # admissible actions listed per step
EARLIER_ACTIONS = 12     # earlier actions recalled at the top of a later chunk

SCHEMA_FILE = "reasoning"  # schemas/reasoning.schema.json


def thinks_schema(indices: list[int], max_chars: int) -> dict[str, Any]:
    """``{"thinks": [{step_index, think}]}`` for one call, derived from ``schemas/reasoning.schema.json``:
    exactly ``len(indices)`` items (``prefixItems``, ``items: false``), item ``j`` with
    ``step_index == indices[j]`` (``const``) and a think of 1..``max_chars`` characters (the
    file's ``x-grammar-forbid`` keeps ``<>{}`` out on grammar endpoints)."""
    arr = load_schema(SCHEMA_FILE)
    template = arr.pop("items")
    template["properties"]["think"]["maxLength"] = max_chars
    items = []
    for i in indices:
        item = copy.deepcopy(template)
        item["properties"]["step_index"] = {"type": "integer", "const": i}
        items.append(item)
    arr.update(prefixItems=items, items=False, minItems=len(indices), maxItems=len(indices))
    return wrap("thinks", arr)


def check_thinks(indices: list[int], max_chars: int, content: Callable[[list[dict]], str | None] | None = None):
    """``JSONRequest.check``: the answer's step indices equal ``indices`` 1:1 and every think is
    usable (D-T3), then ``content`` (the content rules, :func:`content_check`) when given. Returns
    the first error as a message (fed back to the model), else ``None``."""
    def check(value: dict[str, Any]) -> str | None:
        err = form(value)
        return err if err or content is None else content(value["thinks"])

    def form(value: dict[str, Any]) -> str | None:
        got = [t.get("step_index") for t in value.get("thinks") or []]
        dup = sorted({i for i in got if got.count(i) > 1})
        missing = [i for i in indices if i not in got]
        extra = [i for i in got if i not in indices]
        if dup or missing or extra:
            return f"step_index must be exactly {indices}: duplicate {dup}, missing {missing}, extra {extra}"
        if got != indices:
            return f"step_index must be in order {indices}, got {got}"
        for t in value["thinks"]:
            text = t.get("think") or ""
            if not text.strip():
                return f"think for step {t['step_index']} is blank"
            if len(text) > max_chars:
                return f"think for step {t['step_index']} is longer than {max_chars} characters"
            if rules.has_tag(text):
                return f"think for step {t['step_index']} contains a tag; write plain text"
            if rules.has_cjk(text):
                return f"think for step {t['step_index']} contains CJK characters; write English"
        return None
    return check


def think_violations(thinks: list[dict[str, Any]], entries: dict[int, dict[str, Any]], traj: Trajectory,
                     qcfg: QualityConfig, encoder: topic.Encoder | None = None) -> list[quality.Violation]:
    """Content rules of one answer's ``thinks`` (``[{step_index, think}]``) for ``traj``, whose
    entries (:func:`step_entries`) are keyed by step index: ``no_words``/``ngram_loop`` per think,
    ``reused_think`` within the answer, ``future_leak`` (the synthetic ``done`` entry has no later
    step), then ``off_topic`` against the step (observation as shown + action) and the task."""
    named = [(f"think for step {t['step_index']}", str(t.get("think") or "")) for t in thinks]
    out = [v for name, t in named for v in text.field_violations(name, t, qcfg)]
    out += text.reused([(t["step_index"], str(t.get("think") or "")) for t in thinks])
    out += [v for t in thinks for v in grounding.future_leak(str(t.get("think") or ""), traj, t["step_index"])]
    sources = [[f"{_templates.clip(entries[t['step_index']]['observation'], OBS_CHARS)} "
                f"{entries[t['step_index']]['action']}", traj.task] for t in thinks]
    return out + topic.off_topic(named, sources, qcfg.off_topic_threshold, encoder)


def content_check(entries: list[dict[str, Any]], traj: Trajectory, qcfg: QualityConfig, tally: quality.Tally):
    """The ``content`` callable of :func:`check_thinks` for one chunk: :func:`think_violations`
    gated by ``tally`` (policy and counts)."""
    by_index = {e["step_index"]: e for e in entries}
    return lambda thinks: tally.gate(think_violations(thinks, by_index, traj, qcfg))


def recorded_thinks(entries: list[dict[str, Any]], traj: Trajectory, qcfg: QualityConfig, tally: quality.Tally
                    ) -> dict[int, str]:
    """``{step_index: think}`` of the entries whose recorded thought (``hint``, from the source's
    ``steps[].thought``) can be the think as is (``distill.source_thoughts = prefer``): no tag, no
    CJK, and no content-rule violation (:func:`think_violations`, gated by ``tally``). Whitespace
    is collapsed as for LLM thinks; its length is not bounded by ``max_think_chars`` (that bound
    keeps a small model's answer inside ``max_tokens``; validate bounds the whole pair)."""
    by_index = {e["step_index"]: e for e in entries}
    out = {}
    for e in entries:
        hint = " ".join(e["hint"].split())
        if not hint or rules.has_tag(hint) or rules.has_cjk(hint):
            continue
        think = [{"step_index": e["step_index"], "think": hint}]
        if tally.gate(think_violations(think, by_index, traj, qcfg)) is None:
            out[e["step_index"]] = hint
    return out


def step_entries(traj: Trajectory, synthetic_admissible: list[str] | None) -> list[dict[str, Any]]:
    """One entry per reasoning to write: ``{step_index, observation, admissible, action, hint}``.

    Entry ``i`` shows ``steps[i]`` (the state the agent saw) and ``steps[i + 1].action``; the
    synthetic ``done`` entry (when ``synthetic_admissible`` is given) shows the last observation.
    """
    entries = [{"step_index": i, "observation": traj.steps[i].observation,
                "admissible": list(traj.steps[i].admissible_actions), "action": traj.steps[i + 1].action or "",
                "hint": (traj.steps[i + 1].thought or "").strip()} for i in range(len(traj.steps) - 1)]
    if synthetic_admissible is not None:
        entries.append({"step_index": len(entries), "observation": traj.steps[-1].observation,
                        "admissible": synthetic_admissible, "action": "done", "hint": ""})
    return entries


def render_entry(e: dict[str, Any]) -> str:
    lines = [f"[step_index {e['step_index']}]", f"Observation: {_templates.clip(e['observation'], OBS_CHARS)}"]
    if e["admissible"]:
        shown = e["admissible"][:ADMISSIBLE_SHOWN]
        more = len(e["admissible"]) - len(shown)
        lines.append("Admissible actions: " + ", ".join(shown) + (f" (+{more} more)" if more > 0 else ""))
    if e["hint"]:
        lines.append(f"Recorded thought (hint): {_templates.clip(e['hint'], OBS_CHARS)}")
    lines.append(f"Action taken: {e['action']}")
    return "\n".join(lines)


def build_requests(traj: Trajectory, entries: list[dict[str, Any]], skills_block: str,
                   max_steps: int, max_chars: int, qcfg: QualityConfig | None = None,
                   tally: quality.Tally | None = None) -> list[JSONRequest]:
    """One request per chunk of ``max_steps`` entries (key ``<trajectory_id>#<chunk>``); with
    ``qcfg``, each check also runs the content rules (:func:`content_check`, counted in ``tally``)."""
    tpl = _templates.load(NAME, traj.env)
    system = tpl.render("system")
    size = max(1, max_steps)
    requests = []
    for c, start in enumerate(range(0, len(entries), size)):
        chunk = entries[start:start + size]
        earlier = [e["action"] for e in entries[:start]][-EARLIER_ACTIONS:]
        earlier_text = ("Earlier actions (already explained): " + "; ".join(earlier) + "\n\n") if earlier else ""
        user = tpl.render("user", task=traj.task, skills=skills_block or "(none)", earlier=earlier_text,
                          steps="\n\n".join(render_entry(e) for e in chunk))
        indices = [e["step_index"] for e in chunk]
        requests.append(JSONRequest(key=f"{traj.trajectory_id}#{c}",
                                    messages=[{"role": "system", "content": system},
                                              {"role": "user", "content": user}],
                                    schema=thinks_schema(indices, max_chars), schema_name="reasoning",
                                    check=check_thinks(indices, max_chars, content_check(
                                        chunk, traj, qcfg, tally or quality.Tally(qcfg.flag_rules))
                                        if qcfg else None)))
    return requests


def prompt_files(ctx: StageContext) -> list[str]:
    return _templates.stage_files(NAME, SCHEMA_FILE)


def _quarantine(traj: Trajectory, reason: str, detail: str, raw: str = "") -> QuarantineRow:
    return QuarantineRow(NAME, reason, detail, traj.trajectory_id, traj.source_uri, traj.source_line, raw)


def run(ctx: StageContext) -> StageOutput:
    trajs = [Trajectory.from_row(r) for r in ctx.upstream("remove_loops").read_rows()]
    memory_ids: dict[str, list[str]] = {}
    for m in ctx.upstream("memory").read_rows():
        memory_ids.setdefault(m["trajectory_id"], []).append(m["memory_id"])
    bank = ctx.upstream("skills").read_rows()
    bank_version = bank[0]["bank_version"] if bank else ""
    cfg = ctx.config.distill
    quarantine: list[QuarantineRow] = []
    jobs: list[tuple[Trajectory, list[str], bool, list[JSONRequest]]] = []
    tally = quality.Tally(ctx.config.quality.flag_rules)
    for t in trajs:
        if not t.success:
            quarantine.append(_quarantine(t, "not_success", f"outcome {t.outcome}: used for memories, not SFT"))
            continue
        if len(t.steps) < 2:
            quarantine.append(_quarantine(t, "no_actions", "trajectory has no recorded action"))
            continue
        synthetic = prompts.needs_synthetic_done(t, cfg)
        skills = prompts.select_skills(bank, t.env, t.category, ctx.config.prompt)
        entries = step_entries(t, prompts.synthetic_done_admissible(t, cfg.seed) if synthetic else None)
        recorded = recorded_thinks(entries, t, ctx.config.quality, tally) if cfg.source_thoughts == "prefer" else {}
        ask = [e for e in entries if e["step_index"] not in recorded]
        reqs = build_requests(t, ask, prompts.render_skills_block(skills), cfg.max_steps_per_call,
                              cfg.max_think_chars, ctx.config.quality, tally) if ask else []
        jobs.append((t, [s["skill_id"] for s in skills], synthetic, reqs, recorded))
    rows, failed, request_rows = [], [], []
    if jobs:  # no successes (or only recorded thoughts): never start the LLM server
        llm = ctx.llm if any(job[3] for job in jobs) else None
        topic.warm(ctx.config.quality.off_topic_threshold if llm else -1)
        results = iter(llm.complete_json_many([r for job in jobs for r in job[3]], desc=NAME) if llm else [])
        for t, skill_ids, synthetic, reqs, recorded in jobs:
            res: list[JSONResult] = [next(results) for _ in reqs]
            bad = [r for r in res if not r.ok]
            failed += bad
            if bad:  # the trajectory's row keeps the first failed chunk; each other one gets a request row
                quarantine.append(_quarantine(t, quality.reason_of(bad[0].error, bad[0].detail), f"call {bad[0].key}: {bad[0].detail}",
                                              bad[0].raw))
                request_rows += [QuarantineRow(NAME, quality.reason_of(r.error, r.detail), f"call {r.key} failed: {r.detail}",
                                               r.key, t.source_uri, t.source_line, r.raw) for r in bad[1:]]
                continue
            # one line per think: a real model may write newlines (the JSON decoder accepts them)
            thinks = sorted([{"step_index": int(x["step_index"]), "think": " ".join(x["think"].split())}
                             for r in res for x in r.value["thinks"]]
                            + [{"step_index": i, "think": v} for i, v in recorded.items()], key=lambda x: x["step_index"])
            if (len(reqs) > 1 or recorded) and (err := tally.gate(text.reused([(x["step_index"], x["think"])
                                                                                 for x in thinks]))):
                quarantine.append(_quarantine(t, "reused_think", f"across calls: {err}", json.dumps(thinks)))
                continue  # each call was checked on its own: a think reused across calls is caught here
            rows.append({"trajectory_id": t.trajectory_id, "env": t.env, "category": t.category,
                         "thinks": thinks, "synthetic_done": synthetic, "skill_ids_used": skill_ids,
                         "memory_ids": memory_ids.get(t.trajectory_id, []), "bank_version": bank_version,
                         # "source" when every think is the source's recorded thought
                         "model": llm.model_id if reqs else "source", "prompt_sha": _templates.load(NAME, t.env).sha})
    kept = {r["trajectory_id"] for r in rows}
    counters = {"calls": sum(len(j[3]) for j in jobs), "chunked": sum(len(j[3]) > 1 for j in jobs),
                "synthetic_done": sum(r["synthetic_done"] for r in rows),
                "thinks": sum(len(r["thinks"]) for r in rows),
                "recorded_thoughts": sum(len(j[4]) for j in jobs if j[0].trajectory_id in kept),
                "quality": tally.record(len(trajs), Counter(q.reason for q in quarantine))}
    return StageOutput(rows=rows, quarantine=quarantine, rows_in=len(trajs), counters=counters,
                       failed_requests=failed, request_quarantine=request_rows)

"""Stage ``skills``: build the skill bank from the memories (spec §5).

Per environment, up to three kinds of structured calls:

* **general** - one call fed the planning patterns of the successes, deduplicated with counts
  and capped at ``max_patterns`` (most frequent first, ties by text: deterministic). No patterns
  -> no call (D-M7: the reference called anyway and got fabricated skills).
* **task_specific** - one call per category that has memories, fed that category's patterns
  (successes) AND mistakes (failures), as the official generator does (spec §5.9, D-M7). One key
  ``task_specific_skills`` for every env (D-K2).
* **mistake** - one call fed every failure's ``mistakes_to_avoid`` (deduplicated, capped).

Answers are schema-validated, then numbered consecutively only at export (D-M8). Each skill row
carries the ids of the memories and trajectories fed to its call (D-M6). Near-duplicates are
merged by embedding similarity (``_skillmerge``). Units are memories: a memory is *used* when it
fed at least one successful call; every other memory is quarantined with the reason (the failed
call's error and raw output, or ``not_used``). The bank is also written as SkillRL JSON
(``skill_bank.json``, one ``skill_bank_<env>.json`` per env when a run mixes envs) and registered
as a version of the store ``<root>/banks`` (``pipeline.bank.store``; parent = the store's HEAD),
listed by ``skillpipe bank list``.

Train instances only: the ``split`` artifact (:mod:`pipeline.core.split`) assigns every
``env_instance`` to train or val before any call. Memories of val instances feed no call: each is
quarantined ``held_out_val``, so no skill can quote a val instance's memory into train prompts or
into that instance's own val prompts. Export splits the pairs with the same artifact.
The reference built its bank from every trajectory and split nothing (D-W4).
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pipeline import quality

from pipeline.bank import rows as skillbank
from pipeline.bank.store import BankStore
from pipeline.core.config import SkillsConfig, QualityConfig
from pipeline.llm.schemas import load_schema, wrap
from pipeline.llm.types import JSONRequest
from pipeline.prompts import category_label
from pipeline.quality import grounding, text, topic
from pipeline.core.records import SKILL_SCHEMA, QuarantineRow
from pipeline.core.stage import StageContext, StageOutput
from pipeline.core.split import read_assignment
from pipeline.bank import merge as _skillmerge
from pipeline.llm import templates as _templates

NAME = "skills"
INPUTS = ("remove_loops", "memory", "split")  # remove_loops: only for each memory's env_instance
SCHEMA = SKILL_SCHEMA
USES_LLM = True
CONFIG = ("skills", "quality")  # config sections it reads (fingerprinted; + llm when USES_LLM)

SKILL_FIELDS = skillbank.SKILL_FIELDS        # answer fields: schemas/skills.schema.json
MISTAKE_FIELDS = skillbank.MISTAKE_FIELDS    # answer fields: schemas/mistakes.schema.json
SCHEMA_FILES = {"general": "skills", "task_specific": "skills", "mistake": "mistakes"}


@dataclass
class Call:
    """One aggregate call and the memories that fed it."""
    env: str
    kind: str                      # general | task_specific | mistake
    category: str                  # task_specific only
    memories: list[dict[str, Any]]
    request: JSONRequest
    prompt_sha: str
    result: Any = None             # the JSONResult, once the call was made


def dedupe_items(items: list[tuple[str, str]], cap: int) -> tuple[list[tuple[str, int]], set[str]]:
    """Distinct texts with counts, most frequent first, at most ``cap`` (0 = no cap).

    ``items`` are ``(text, memory_id)``; texts are compared whitespace- and case-insensitively and
    the first spelling seen is kept. Ties sort by the normalised text, so the cut is deterministic.
    Returns ``([(text, count)], memory ids whose text was kept)``.
    """
    counts: Counter[str] = Counter()
    spelling: dict[str, str] = {}
    owners: dict[str, set[str]] = {}
    for text, mid in items:
        text = " ".join(text.split())
        if not text:
            continue
        key = text.lower()
        counts[key] += 1
        spelling.setdefault(key, text)
        owners.setdefault(key, set()).add(mid)
    ranked = sorted(counts, key=lambda k: (-counts[k], k))
    kept = ranked[:cap] if cap > 0 else ranked
    return [(spelling[k], counts[k]) for k in kept], set().union(*(owners[k] for k in kept)) if kept else set()


def mistake_text(m: dict[str, str]) -> str:
    return f"when {m['trigger_condition'].strip().rstrip('.')}: {m['bad_action'].strip()}"


def _lines(items: list[tuple[str, int]]) -> str:
    return "\n".join(f"- (x{n}) {t}" for t, n in items) if items else "- (none)"


def answer_schema(kind: str, n: int) -> dict[str, Any]:
    """JSON Schema of a call's answer, ``{"skills": [...]}`` or ``{"mistakes": [...]}`` with
    1..``n`` items: the array of ``schemas/skills.schema.json`` / ``mistakes.schema.json`` with
    ``maxItems`` narrowed to ``n`` (never above the file's bound), wrapped under its key."""
    arr = load_schema(SCHEMA_FILES[kind])
    arr["maxItems"] = max(1, min(n, arr.get("maxItems", n)))
    return wrap("mistakes" if kind == "mistake" else "skills", arr)


def check_answer(kind: str, sources: list[str] | None = None, qcfg: QualityConfig | None = None,
                 tally: quality.Tally | None = None):
    """``JSONRequest.check``: every field of every item must have non-blank text (D-K4); with
    ``qcfg``, then the content rules of :func:`skill_violations` against ``sources`` (the pattern
    and mistake texts fed to the call), gated by ``tally`` (policy and counts)."""
    key, fields = ("mistakes", MISTAKE_FIELDS) if kind == "mistake" else ("skills", SKILL_FIELDS)

    def check(value: dict[str, Any]) -> str | None:
        for i, item in enumerate(value.get(key) or []):
            blank = [f for f in fields if not str(item.get(f, "")).strip()]
            if blank:
                return f"{key}[{i}] has blank {', '.join(blank)}"
        if qcfg is None:
            return None
        gate = tally or quality.Tally(qcfg.flag_rules)
        return gate.gate(skill_violations(kind, value.get(key) or [], sources or [], qcfg))
    return check


def skill_violations(kind: str, items: list[dict[str, Any]], sources: list[str], qcfg: QualityConfig,
                     encoder: topic.Encoder | None = None) -> list[quality.Violation]:
    """Content rules of one answer's skills (or mistakes): ``no_words``/``ngram_loop`` of every
    field, ``not_a_phrase`` of a title, ``ngram_loop`` of the item's fields joined, then ``off_topic``: each item's text (title, principle,
    when to apply; mistakes: description, why, how) against the texts fed to the call."""
    key, fields = ("mistakes", MISTAKE_FIELDS) if kind == "mistake" else ("skills", SKILL_FIELDS)
    out = []
    for i, item in enumerate(items):
        for f in fields:
            out += text.field_violations(f"{key}[{i}].{f}", str(item.get(f) or ""), qcfg)
        if "title" in fields:
            out += text.title_violations(f"{key}[{i}].title", str(item.get("title") or ""), qcfg)
        # a loop can straddle fields ("eat the same thing" once or twice in each of three fields)
        whole = " ".join(str(item.get(f) or "") for f in fields)
        if (loop := text.ngram_loop(whole, qcfg.loop_ngram, qcfg.loop_min_repeats)) is not None:
            out.append(quality.Violation("ngram_loop", f"{key}[{i}] repeats {loop!r} {qcfg.loop_min_repeats}+ times "
                                                       "across its fields; write it once"))
    named = [(f"{key}[{i}]", _skillmerge.skill_text({**item, "kind": kind})) for i, item in enumerate(items)]
    return out + topic.off_topic(named, [sources] * len(named), qcfg.off_topic_threshold, encoder)


def source_check(rows: list[dict[str, Any]], memories: list[dict[str, Any]], tally: quality.Tally
                 ) -> tuple[list[dict[str, Any]], list[QuarantineRow]]:
    """Skill rows whose sources hold (``grounding.skill_source_violations`` against every memory of
    the run), and a quarantine row (item = skill id, raw = the skill as JSON) for each other one."""
    by_id = {m["memory_id"]: m for m in memories}
    kept, dropped = [], []
    for r in rows:
        err = tally.gate(grounding.skill_source_violations(r, by_id))
        if err is None:
            kept.append(r)
        else:
            dropped.append(QuarantineRow(NAME, quality.reason_of("check_failed", err), err, r["skill_id"],
                                         raw=json.dumps({k: r[k] for k in SKILL_FIELDS + MISTAKE_FIELDS if r.get(k)})))
    return kept, dropped


def plan_calls(memories: list[dict[str, Any]], env: str, cfg: SkillsConfig, qcfg: QualityConfig | None = None,
               tally: quality.Tally | None = None) -> list[Call]:
    """The calls for the memories of one env, in a fixed order: general, categories, mistakes;
    with ``qcfg``, each call's check runs the content rules (:func:`check_answer`)."""
    tpl = _templates.load(NAME, env)
    system = tpl.render("system")
    succ = [m for m in memories if m["outcome"] == "success" and m["planning_pattern"].strip()]
    fail = [m for m in memories if m["outcome"] == "failure" and m["mistakes_to_avoid"]]
    calls: list[Call] = []

    def add(kind: str, category: str, fed: set[str], section: str, n: int, sources: list, **values: Any) -> None:
        request = JSONRequest(key=f"{env}/{kind}/{category}",
                              messages=[{"role": "system", "content": system},
                                        {"role": "user", "content": tpl.render(section, n_skills=n, **values)}],
                              schema=answer_schema(kind, n), schema_name=f"skills_{kind}",
                              check=check_answer(kind, [t for t, _ in sources], qcfg, tally))
        calls.append(Call(env, kind, category, [m for m in memories if m["memory_id"] in fed], request, tpl.sha))

    patterns, fed = dedupe_items([(m["planning_pattern"], m["memory_id"]) for m in succ], cfg.max_patterns)
    if patterns:
        add("general", "", fed, "general", cfg.n_general, patterns, patterns=_lines(patterns))
    for cat in dict.fromkeys(m["category"] for m in memories):  # first-seen order
        pats, fed_p = dedupe_items([(m["planning_pattern"], m["memory_id"]) for m in succ if m["category"] == cat],
                                   cfg.max_patterns)
        errs, fed_e = dedupe_items([(mistake_text(x), m["memory_id"]) for m in fail if m["category"] == cat
                                    for x in m["mistakes_to_avoid"]], cfg.max_patterns)
        if pats or errs:
            add("task_specific", cat, fed_p | fed_e, "task_specific", cfg.n_task_specific, pats + errs,
                category_label=category_label(cat), patterns=_lines(pats), mistakes=_lines(errs))
    errs, fed = dedupe_items([(mistake_text(x), m["memory_id"]) for m in fail for x in m["mistakes_to_avoid"]],
                             cfg.max_patterns)
    if errs:
        add("mistake", "", fed, "mistakes", cfg.n_mistakes, errs, mistakes=_lines(errs))
    return calls


def call_rows(call: Call, model: str) -> list[dict[str, Any]]:
    """Skill rows of a successful call, in answer order, with the call's source ids."""
    key = "mistakes" if call.kind == "mistake" else "skills"
    mem_ids = [m["memory_id"] for m in call.memories]
    traj_ids = [m["trajectory_id"] for m in call.memories]
    return [skillbank.make_row(call.kind, call.category, {k: v.strip() for k, v in item.items()},
                               mem_ids, traj_ids, model=model, prompt_sha=call.prompt_sha, env=call.env)
            for item in call.result.value[key]]


def unused_quarantine(memories: list[dict[str, Any]], calls: list[Call]) -> tuple[set[str], list[QuarantineRow]]:
    """Ids of memories that fed a successful call, and a quarantine row for every other memory."""
    used = {m["memory_id"] for c in calls if c.result.ok for m in c.memories}
    failed: dict[str, Call] = {}
    for c in calls:
        if not c.result.ok:
            for m in c.memories:
                failed.setdefault(m["memory_id"], c)
    quarantine = []
    for m in memories:
        if m["memory_id"] in used:
            continue
        c = failed.get(m["memory_id"])
        if c is not None:
            quarantine.append(QuarantineRow(NAME, quality.reason_of(c.result.error, c.result.detail),
                                            f"{c.kind} call {c.request.key} failed: {c.result.detail}",
                                            m["memory_id"], raw=c.result.raw))
        else:
            quarantine.append(QuarantineRow(NAME, "not_used", "memory fed no call (its pattern or mistakes "
                                            "were cut by skills.max_patterns, or it had none)", m["memory_id"]))
    return used, quarantine


def prompt_files(ctx: StageContext) -> list[str]:
    return _templates.stage_files(NAME, "skills", "mistakes")


def _distribution(memories: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    dist: dict[str, dict[str, int]] = {}
    for m in memories:
        d = dist.setdefault(m["category"], {"success": 0, "failure": 0})
        d[m["outcome"]] = d.get(m["outcome"], 0) + 1
    return dist


def _categories(env: str, memories: list[dict[str, Any]]) -> list[str]:
    from pipeline import envs
    known = list(getattr(envs.REGISTRY.get(env), "CATEGORIES", ()))
    return known + [c for c in dict.fromkeys(m["category"] for m in memories) if c not in known]


def trajectory_instances(ctx: StageContext) -> tuple[dict[str, str], set[str]]:
    """``({trajectory_id: env_instance}, instances with a successful trajectory)`` of the dedupe
    artifact (only three columns are read: the steps are not needed here)."""
    import pyarrow.parquet as pq
    folder = ctx.upstream("remove_loops").path
    out: dict[str, str] = {}
    succeeded: set[str] = set()
    for part in sorted(f for f in os.listdir(folder) if f.startswith("part-") and f.endswith(".parquet")):
        t = pq.read_table(os.path.join(folder, part), columns=["trajectory_id", "env_instance", "outcome"])
        for tid, inst, outcome in zip(*(t.column(c).to_pylist() for c in ("trajectory_id", "env_instance", "outcome"))):
            out[tid] = inst
            if outcome == "success":
                succeeded.add(inst)
    return out, succeeded


def hold_out_val(memories: list[dict[str, Any]], instance_of: dict[str, str], assignment: dict[str, str]
                 ) -> tuple[list[dict[str, Any]], list[QuarantineRow]]:
    """Keep the memories of val instances out of the bank.

    ``instance_of`` maps trajectory ids to ``env_instance``; ``assignment`` is the ``split``
    artifact (``{env_instance: "train" | "val"}``). A memory whose trajectory or instance is
    missing there (not expected: the runner refuses stale upstreams) counts as its own instance,
    named by its trajectory id, and is train.
    Returns ``(train memories, one held_out_val quarantine row per val memory)``.
    """
    inst = {m["memory_id"]: instance_of.get(m["trajectory_id"], m["trajectory_id"]) for m in memories}
    train, held = [], []
    for m in memories:
        if assignment.get(inst[m["memory_id"]], "train") == "train":
            train.append(m)
        else:
            held.append(QuarantineRow(NAME, "held_out_val", f"instance {inst[m['memory_id']]} is in the validation "
                                      "split: kept out of the skill bank", m["memory_id"]))
    return train, held


def run(ctx: StageContext) -> StageOutput:
    all_memories = ctx.upstream("memory").read_rows()
    cfg = ctx.config.skills
    instance_of, _ = trajectory_instances(ctx)
    memories, held_out = hold_out_val(all_memories, instance_of, read_assignment(ctx.upstream("split")))
    by_env: dict[str, list[dict[str, Any]]] = {}
    for m in memories:
        by_env.setdefault(m["env"], []).append(m)
    tally = quality.Tally(ctx.config.quality.flag_rules)
    calls = [c for env, mems in by_env.items() for c in plan_calls(mems, env, cfg, ctx.config.quality, tally)]
    model = ""
    if calls:  # no memories or nothing to aggregate: never start the LLM server
        llm = ctx.llm
        model = llm.model_id
        topic.warm(ctx.config.quality.off_topic_threshold)
        for c, res in zip(calls, llm.complete_json_many([c.request for c in calls], desc=NAME), strict=True):
            c.result = res
    rows, merges, banks, bad_sources = [], [], {}, []
    for env, mems in by_env.items():
        env_rows = [r for c in calls if c.env == env and c.result.ok for r in call_rows(c, model)]
        env_rows, env_merges = _skillmerge.merge_similar(env_rows, cfg.merge_threshold)
        env_rows, dropped = source_check(env_rows, all_memories, tally)
        bad_sources += dropped
        rows += env_rows
        merges += env_merges
        banks[env] = (env_rows, mems)
    version = skillbank.bank_version(rows)
    for r in rows:
        r["bank_version"] = version
    # Register the bank as a version of <root>/banks (idempotent: a rerun finds the same record).
    # Its parent is this run's previous bank, never an unrelated run's that happened to be HEAD.
    parent = None
    if rows:
        previous = ctx.store.load(NAME)
        prev_version = (previous.manifest.get("counters") or {}).get("bank_version") if previous else None
        bank_store = BankStore(ctx.store.root)
        if prev_version and not bank_store.has(prev_version):
            prev_version = None
        parent = bank_store.register(rows, run_id=ctx.store.run_id, stage=NAME,
                                     parent=prev_version or None).record["parent"]
    used, quarantine = unused_quarantine(memories, calls)
    quarantine += held_out
    # one row per failed call: its memories may all have fed a successful call too (a failed
    # mistakes call whose failures also fed their category's call), and then no memory row keeps it
    failed = [c for c in calls if not c.result.ok]
    request_rows = [QuarantineRow(NAME, quality.reason_of(c.result.error, c.result.detail),
                                  f"{c.kind} call {c.request.key} failed: {c.result.detail}", c.request.key,
                                  raw=c.result.raw) for c in failed] + bad_sources
    extra = {}
    if not banks:  # an empty run still gets a (loadable, empty) bank
        banks[ctx.env] = ([], [])
    for env, (env_rows, mems) in banks.items():
        bank = skillbank.to_skillrl_json(env_rows, categories=_categories(env, mems), metadata={
            "env": env, "bank_version": version, "parent_version": parent, "source_model": model,
            "total_memories_analyzed": len(mems), "task_distribution": _distribution(mems)})
        name = "skill_bank.json" if len(banks) == 1 else f"skill_bank_{env}.json"
        extra[name] = json.dumps(bank, ensure_ascii=False, indent=2)
    counters = {"calls": dict(Counter(c.kind for c in calls)),
                "calls_failed": dict(Counter(c.kind for c in calls if not c.result.ok)),
                "skills": dict(Counter(r["kind"] for r in rows)), "merged": sum(not m["exact_duplicate"] for m in merges),
                "exact_duplicates": sum(m["exact_duplicate"] for m in merges), "merges": merges,
                "bank_version": version, "bank_parent": parent,
                # items = calls; a skill dropped for its sources counts once more (it is not a call)
                "quality": tally.record(len(calls), Counter(q.reason for q in request_rows))}
    return StageOutput(rows=rows, quarantine=quarantine, rows_in=len(all_memories), units_in=len(all_memories),
                       units_out=len(used), counters=counters, extra_files=extra,
                       failed_requests=[c.result for c in failed], request_quarantine=request_rows)

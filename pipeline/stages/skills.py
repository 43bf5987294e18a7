"""Stage ``skills``: build the skill bank from the memories.

Per environment, up to three kinds of structured calls:

* **general** - one call fed the planning patterns of the successes, deduplicated with counts
  and capped at ``max_patterns`` (most frequent first, ties by text: deterministic). No patterns
  -> no call (the reference called anyway and got fabricated skills).
* **task_specific** - one call per category that has memories, fed that category's patterns
  (successes) AND mistakes (failures), as the official generator does. One key
  ``task_specific_skills`` for every env.
* Both also see an outline of the recorded actions of up to ``max_outlines`` successful train
  trajectories (of the category, for a task-specific call; :mod:`pipeline.bank.outline`): the
  patterns are the teacher's own words, the outlines what the agent did.
* **mistake** - one call fed every failure's ``mistakes_to_avoid`` (deduplicated, capped).

Answers are schema-validated, then numbered consecutively only at export. Each skill row
carries the ids of the memories and trajectories fed to its call. Near-duplicates are
merged by embedding similarity (:mod:`pipeline.bank.merge`). The calls are asked through
:class:`~pipeline.stage.llmstage.LLMStage`; its units are memories, not calls, so the stage
assembles its own output (:meth:`SkillsStage.collect`). A memory is *used* when it
fed at least one successful call; every other memory is quarantined with the reason (the failed
call's error and raw output, or ``not_used``). The bank is also written as SkillRL JSON
(``skill_bank.json``, one ``skill_bank_<env>.json`` per env when a run mixes envs) and, once the
runner has committed the artifact, registered as a version of the store ``<root>/banks``
(``pipeline.bank.store``, in the bucket for an ``s3://`` root; parent = this run's previous bank),
listed by ``skillpipe bank list`` (:meth:`SkillsStage.after_commit`).

Train instances only: the ``split`` artifact (:mod:`pipeline.core.split`) assigns every
``env_instance`` to train or val before any call. Memories of val instances feed no call: each is
quarantined ``held_out_val``, so no skill can quote a val instance's memory into train prompts or
into that instance's own val prompts. Export splits the pairs with the same artifact.
The reference built its bank from every trajectory and split nothing.
"""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq

from pipeline import quality
from pipeline.bank import merge as _skillmerge
from pipeline.bank import outline as _outline
from pipeline.bank.judge import ItemJudge, blocking, field_bounds
from pipeline.bank import rows as skillbank
from pipeline.bank.store import BankStore
from pipeline.core.artifacts import StageArtifact, parquet_parts
from pipeline.core.config import QualityConfig, SkillsConfig
from pipeline.stage.llmstage import Job, LLMOutput, LLMRun, LLMStage, failure_row, send
from pipeline.core.records import SKILL_SCHEMA, QuarantineRow, Trajectory
from pipeline.core.split import read_assignment
from pipeline.stage.stage import StageContext, StageOutput, reject
from pipeline.llm import templates as _templates
from pipeline.llm.schemas import load_schema, wrap
from pipeline.llm.types import JSONRequest
from pipeline.prompts import category_label
from pipeline.quality import echo, topic
from pipeline.quality.rulebook import REGISTRY
from pipeline.quality.targets.rows import SkillSources

NAME = "skills"          # stage name, and pipeline/templates/skills*.txt

SKILL_FIELDS = skillbank.SKILL_FIELDS        # answer fields: schemas/skills.schema.json
MISTAKE_FIELDS = skillbank.MISTAKE_FIELDS    # answer fields: schemas/mistakes.schema.json
SCHEMA_FILES = {"general": "skills", "task_specific": "skills", "mistake": "mistakes"}


@dataclass
class Call:
    """One skills call and the memories that fed it (a job's item)."""
    env: str
    kind: str                      # general | task_specific | mistake
    category: str                  # task_specific only
    memories: list[dict[str, Any]]
    request: JSONRequest
    prompt_sha: str
    verdicts: dict[str, list] = field(default_factory=dict)  # answer JSON -> per-item violations (check_answer)


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
    """A memory's mistake as one prompt line: ``"when <trigger_condition>: <bad_action>"`` (the
    trigger's final period dropped)."""
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


def shared_answer_schema(kind: str) -> dict[str, Any]:
    """:func:`answer_schema` with the file's own ``maxItems``: the same for every call of
    ``kind``, sent to hosted endpoints (``JSONRequest.shared_schema``)."""
    arr = load_schema(SCHEMA_FILES[kind])
    return wrap("mistakes" if kind == "mistake" else "skills", arr)


def check_answer(kind: str, sources: list[str] | None = None, qcfg: QualityConfig | None = None,
                 tally: quality.Tally | None = None, actions: list[str] | None = None,
                 judge: ItemJudge | None = None, verdicts: dict[str, list] | None = None):
    """``JSONRequest.check``: every field of every item must have non-blank text; with ``qcfg``,
    then each item's content rules (:class:`pipeline.bank.judge.ItemJudge`: ``judge``, or one
    built from ``sources``, ``actions`` and the prompt's words). The answer is rejected (and
    repaired) only when *every* item breaks a quarantining rule; otherwise the verdicts are kept
    in ``verdicts`` (keyed by the answer's JSON) for :func:`call_rows`, which quarantines the bad
    items one by one."""
    key, fields = ("mistakes", MISTAKE_FIELDS) if kind == "mistake" else ("skills", SKILL_FIELDS)
    if qcfg is not None and judge is None:
        judge = ItemJudge(kind, qcfg, _prompt_vocab(), sources or [], actions or [])

    def check(value: dict[str, Any]) -> str | None:
        items = value.get(key) or []
        for i, item in enumerate(items):
            blank = [f for f in fields if not str(item.get(f, "")).strip()]
            if blank:
                return f"{key}[{i}] has blank {', '.join(blank)}"
        if judge is None:
            return None
        gate = tally or quality.Tally(judge.qcfg.flag_rules)
        per_item = judge.judge(items)
        if verdicts is not None:
            verdicts[json.dumps(value, sort_keys=True)] = per_item
        if items and all(blocking(v, gate) for v in per_item):
            return gate.gate(per_item[0])
        return None
    return check


def skill_violations(kind: str, items: list[dict[str, Any]], sources: list[str], qcfg: QualityConfig,
                     encoder: topic.Encoder | None = None) -> list[quality.Violation]:
    """Every content rule's violations of one answer's items, flattened (the per-item verdicts of
    :class:`pipeline.bank.judge.ItemJudge` against ``sources``, the prompt's fixed words and no
    recorded actions or trajectories)."""
    judge = ItemJudge(kind, qcfg, _prompt_vocab(), sources)
    return [v for per in judge.judge(items) for v in per]


def _prompt_vocab() -> frozenset[str]:
    return echo.prompt_words(_templates.load(NAME, "").sections.values())


def memory_sources(memories: list[dict[str, Any]]) -> list[str]:
    """What a call's skills must be about: the task and the contextual description of each
    memory fed to it (distinct, first-seen order)."""
    return list(dict.fromkeys(t for m in memories for t in (m["task"], m["contextual_description"]) if t.strip()))


def source_check(rows: list[dict[str, Any]], memories: list[dict[str, Any]], tally: quality.Tally
                 ) -> tuple[list[dict[str, Any]], list[QuarantineRow]]:
    """Skill rows whose sources hold (the checks of target ``skill_row`` of the content-rule
    registry, against every memory of the run), and a quarantine row (item = skill id, raw = the
    skill as JSON) for each other one."""
    by_id = {m["memory_id"]: m for m in memories}
    kept, dropped = [], []
    for r in rows:
        err = tally.gate(REGISTRY.run("skill_row", SkillSources(r, by_id)))
        if err is None:
            kept.append(r)
        else:
            dropped.append(reject(NAME, quality.reason_of("check_failed", err), err, r["skill_id"],
                                  raw=json.dumps({k: r[k] for k in SKILL_FIELDS + MISTAKE_FIELDS if r.get(k)})))
    return kept, dropped


def plan_calls(memories: list[dict[str, Any]], env: str, cfg: SkillsConfig, qcfg: QualityConfig | None = None,
               tally: quality.Tally | None = None, successes: list[Trajectory] | None = None) -> list[Call]:
    """The calls for the memories of one env, in a fixed order: general, categories, mistakes;
    with ``qcfg``, each call's check runs the content rules item by item (:func:`check_answer`),
    ``contradicts_success`` against ``successes`` (the env's successful train trajectories; a
    task-specific call sees those of its category). The general and task-specific prompts show
    the outlines of those successes (:func:`pipeline.bank.outline.outline`, at most
    ``cfg.max_outlines``, most frequent first), or "(none)"."""
    tpl = _templates.load(NAME, env)
    system = tpl.render("system")
    succ = [m for m in memories if m["outcome"] == "success" and m["planning_pattern"].strip()]
    fail = [m for m in memories if m["outcome"] == "failure" and m["mistakes_to_avoid"]]
    calls: list[Call] = []

    def add(kind: str, category: str, fed: set[str], section: str, n: int, **values: Any) -> None:
        used = [m for m in memories if m["memory_id"] in fed]
        schema = answer_schema(kind, n)
        judge = None if qcfg is None else ItemJudge(
            kind, qcfg, _prompt_vocab(), memory_sources(used), echo.memory_actions(used),
            [t for t in successes or [] if not category or t.category == category], category, field_bounds(schema),
            _templates.example_texts(NAME, env), env)
        verdicts: dict[str, list] = {}
        request = JSONRequest(key=f"{env}/{kind}/{category}",
                              messages=[{"role": "system", "content": system},
                                        {"role": "user", "content": tpl.render(section, n_skills=n, **values)}],
                              schema=schema, schema_name=f"skills_{kind}", shared_schema=shared_answer_schema(kind),
                              check=check_answer(kind, tally=tally, judge=judge, verdicts=verdicts))
        calls.append(Call(env, kind, category, used, request, tpl.sha, verdicts))

    def outlines(category: str = "") -> str:
        wins = [t for t in successes or [] if not category or t.category == category]
        if not cfg.max_outlines or not wins:
            return "- (none)"
        # counted like patterns: most frequent first, capped (deterministic)
        return _lines(dedupe_items([(_outline.outline(t), t.trajectory_id) for t in wins], cfg.max_outlines)[0])

    patterns, fed = dedupe_items([(m["planning_pattern"], m["memory_id"]) for m in succ], cfg.max_patterns)
    if patterns:
        add("general", "", fed, "general", cfg.n_general, patterns=_lines(patterns), outlines=outlines())
    for cat in dict.fromkeys(m["category"] for m in memories):  # first-seen order
        pats, fed_p = dedupe_items([(m["planning_pattern"], m["memory_id"]) for m in succ if m["category"] == cat],
                                   cfg.max_patterns)
        errs, fed_e = dedupe_items([(mistake_text(x), m["memory_id"]) for m in fail if m["category"] == cat
                                    for x in m["mistakes_to_avoid"]], cfg.max_patterns)
        if pats or errs:
            add("task_specific", cat, fed_p | fed_e, "task_specific", cfg.n_task_specific,
                category_label=category_label(cat), patterns=_lines(pats), mistakes=_lines(errs),
                outlines=outlines(cat))
    errs, fed = dedupe_items([(mistake_text(x), m["memory_id"]) for m in fail for x in m["mistakes_to_avoid"]],
                             cfg.max_patterns)
    if errs:
        add("mistake", "", fed, "mistakes", cfg.n_mistakes, mistakes=_lines(errs))
    return calls


def call_rows(call: Call, value: dict[str, Any], model: str, tally: quality.Tally | None = None
              ) -> tuple[list[dict[str, Any]], list[QuarantineRow]]:
    """Skill rows of a successful call's answer ``value``, in answer order, with the call's source
    ids, and one quarantine row per item that breaks a quarantining content rule (the verdicts
    its check recorded; counted in ``tally``). Without verdicts every item is kept."""
    key = "mistakes" if call.kind == "mistake" else "skills"
    mem_ids = [m["memory_id"] for m in call.memories]
    traj_ids = [m["trajectory_id"] for m in call.memories]
    per_item = call.verdicts.get(json.dumps(value, sort_keys=True)) or [[] for _ in value[key]]
    rows, dropped = [], []
    for item, verdict in zip(value[key], per_item):
        row = skillbank.make_row(call.kind, call.category, {k: v.strip() for k, v in item.items()},
                                 mem_ids, traj_ids, model=model, prompt_sha=call.prompt_sha, env=call.env)
        err = (tally or quality.Tally()).gate(verdict)
        if err is None:
            rows.append(row)
        else:
            dropped.append(reject(NAME, quality.reason_of("check_failed", err), f"{call.kind} call "
                                  f"{call.request.key}: {err}", row["skill_id"], raw=json.dumps(item, ensure_ascii=False)))
    return rows, dropped


def sampled_retries(llm: Any, jobs: list[Job], rounds: int, temperature: float, desc: str
                    ) -> tuple[list[tuple[Job, Any]], list[Job]]:
    """Rejection sampling for the calls whose answer a content rule rejected (``check_failed``:
    every item broke a rule, or the first did and no item could be judged alone): round ``k``
    (1..``rounds``) sends each still-failed call's request again at ``temperature`` with seed
    ``k`` (the same prompt and checks; the sampling is part of the cache key). A passing answer
    replaces the failed result of its job. The 1.5B teacher's greedy answer for ALFWorld's
    look-in-light skills said "use a desklamp to illuminate it and observe its contents" every
    time; a sampled one need not. Returns ``(superseded, tries)``: each replaced ``(job, failed
    result)`` and the jobs of every round (their requests count as calls)."""
    superseded: list[tuple[Job, Any]] = []
    tries_all: list[Job] = []
    for k in range(1, rounds + 1):
        todo = [j for j in jobs if j.results and not j.results[0].ok and j.results[0].error == "check_failed"]
        if not todo:
            break
        sampling = {"temperature": temperature, "seed": k}
        tries = [Job(j.item, j.item_id, [dataclasses.replace(j.requests[0], sampling=sampling)], j.source_uri, j.line)
                 for j in todo]
        send(llm, tries, f"{desc}, sampled retry {k}")
        for job, tried in zip(todo, tries):
            if tried.results[0].ok:
                superseded.append((job, job.results[0]))
                job.results[0] = tried.results[0]
        tries_all += tries
    return superseded, tries_all


def call_failure_row(call: Call, result, item_id: str, kind: str = "unit") -> QuarantineRow:
    """The quarantine row of a failed call, for ``item_id``: a memory it was fed (a ``unit``), or the
    call's key (a ``request``)."""
    return failure_row(NAME, result, f"{call.kind} call {call.request.key} failed: {result.detail}", item_id,
                       kind=kind)


def unused_quarantine(memories: list[dict[str, Any]], jobs: list[Job]) -> tuple[set[str], list[QuarantineRow]]:
    """Ids of memories that fed a successful call (``jobs`` of :class:`Call` items, answered),
    and a quarantine row for every other memory: the first failed call it fed (raw output kept),
    else ``not_used``."""
    used = {m["memory_id"] for j in jobs if not j.failed for m in j.item.memories}
    failed: dict[str, Job] = {}
    for j in jobs:
        if j.failed:
            for m in j.item.memories:
                failed.setdefault(m["memory_id"], j)
    quarantine = []
    for m in memories:
        if m["memory_id"] in used:
            continue
        j = failed.get(m["memory_id"])
        if j is not None:
            quarantine.append(call_failure_row(j.item, j.failed[0], m["memory_id"]))
        else:
            quarantine.append(reject(NAME, "not_used", "memory fed no call (its pattern or mistakes "
                                     "were cut by skills.max_patterns, or it had none)", m["memory_id"]))
    return used, quarantine


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


def train_successes(ctx: StageContext, trajectory_ids: set[str]) -> list[Trajectory]:
    """The successful trajectories among ``trajectory_ids`` (those of the train memories), read
    from the verify artifact (verified outcomes): what ``contradicts_success`` checks a prescribed
    order against."""
    rows = ctx.upstream("verify").read_rows()
    return [Trajectory.from_row(r) for r in rows if r["trajectory_id"] in trajectory_ids and r["outcome"] == "success"]


def trajectory_instances(ctx: StageContext) -> dict[str, str]:
    """``{trajectory_id: env_instance}`` of the verify artifact (two columns are read:
    the steps are not needed here)."""
    out: dict[str, str] = {}
    for part in parquet_parts(ctx.upstream("verify").path):
        t = pq.read_table(part, columns=["trajectory_id", "env_instance"])
        out.update(zip(t.column("trajectory_id").to_pylist(), t.column("env_instance").to_pylist()))
    return out


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
            held.append(reject(NAME, "held_out_val", f"instance {inst[m['memory_id']]} is in the validation "
                               "split: kept out of the skill bank", m["memory_id"]))
    return train, held


def bank_store(ctx: StageContext) -> BankStore:
    """The skill bank history of the run's root: in the bucket for an object-storage root, never
    in this worker's mirror (``ctx.root``; a local run: the store's own root)."""
    return BankStore(ctx.root or ctx.store.root)


def bank_parent(ctx: StageContext, version: str, has_rows: bool) -> str | None:
    """The parent the bank ``version`` is (or will be) registered with in ``<root>/banks``: the
    stored record's when the version is already there, else this run's previous bank when the
    store has it (never an unrelated run's that happened to be HEAD). ``None`` for an empty bank.
    Only reads: the runner registers the bank once the artifact is committed
    (:meth:`SkillsStage.after_commit`)."""
    if not has_rows:
        return None
    banks = bank_store(ctx)
    if banks.has(version):
        return banks.get(version).record["parent"]
    previous = ctx.store.load(NAME)
    prev_version = (previous.manifest.get("counters") or {}).get("bank_version") if previous else None
    return prev_version if prev_version and prev_version != version and banks.has(prev_version) else None


def bank_files(banks: dict[str, tuple[list, list]], env: str, version: str, parent: str | None, model: str
               ) -> dict[str, str]:
    """The SkillRL JSON of each env's bank: ``skill_bank.json``, or ``skill_bank_<env>.json`` per
    env when a run mixes envs; an empty run still gets a (loadable, empty) bank for ``env``."""
    banks = banks or {env: ([], [])}
    extra = {}
    for name, (env_rows, mems) in banks.items():
        bank = skillbank.to_skillrl_json(env_rows, categories=_categories(name, mems), metadata={
            "env": name, "bank_version": version, "parent_version": parent, "source_model": model,
            "total_memories_analyzed": len(mems), "task_distribution": _distribution(mems)})
        extra["skill_bank.json" if len(banks) == 1 else f"skill_bank_{name}.json"] = \
            json.dumps(bank, ensure_ascii=False, indent=2)
    return extra


@dataclass
class SkillsOutput(LLMOutput):
    """What skills returns: an :class:`~pipeline.stage.llmstage.LLMOutput` whose rows are skills,
    plus ``memories_used``, the memories (its units) that fed an answered call."""
    memories_used: int = 0


class SkillsStage(LLMStage):
    """The skill bank of the run's train memories (module docstring). Its units are memories;
    its jobs are calls (each fed by several memories)."""
    name = NAME
    version = "22"  # 3: items judged one by one, restated_action, contradicts_success, duplicate_mistake, cut_off,
    # echo of worked examples; 4: self_target, missing_control, feeling_reason, the look-in-light order and the
    # game's order in contradicts_success, duplicate_mistake over verb concepts; 5: wrong_category, one
    # principle under two titles merged; 6: missing_control knows price filters beside options, and images;
    # not_portable; a heat at the dining table; a when-to-apply that tells an episode; 7: false_game_fact, an
    # appliance reached by "take it to"; 8: a price selected as if a control; 9: an option picked by budget,
    # false_game_fact and instance_number in every field ("Heat Fridge" as a title); 10: a statement instead of an
    # instruction, vague_instruction, a lamp that shows contents or helps a search, rooms, a transform at a
    # place that cannot do it, episode_specific; 11: an instruction about wording, a receptacle found somewhere; 12:
    # a lamp taken out of a drawer; 13: another room, a lock; 14: one rule written for two objects merged; 15: a
    # call rejected whole is sampled again (skills.sampled_retries), a wait for a transform (false_game_fact); 16:
    # a comma ends a tool's clause in false_game_fact; 17: outlines of the successes in the prompt, a command with a
    # void condition or order ("when instructed to do so", "after taking it") is restated_action; 18: "a better
    # understanding" is vague_instruction; 19: "its purpose", "intended location" (vague_instruction), a TextWorld
    # obstacle, colour or texture (false_game_fact); 20: a TextWorld door, key or lock no
    # source game shows (false_game_fact); 21: a TextWorld path blocked by anything but a door (false_game_fact);
    # 22: items scored on held-out expert steps and gated (usefulness)
    inputs = ("verify", "memory", "split")  # verify: each memory's env_instance, and the successes
    schema = SKILL_SCHEMA
    config_sections = ("skills", "quality", "usefulness", "prompt")

    def input_facts(self, ctx: StageContext) -> list[dict[str, Any]]:
        """The upstream content hashes and, with the usefulness gate on, the scorer's identity."""
        from pipeline.usefulness.load import scorer_id
        cfg = ctx.config.usefulness
        return super().input_facts(ctx) + ([{"scorer": scorer_id(cfg.scorer)}] if cfg.policy != "off" else [])

    def prompt_files(self, ctx: StageContext) -> list[str]:
        """See :meth:`Stage.prompt_files`: ``pipeline/templates/skills*.txt`` and the ``skills`` and
        ``mistakes`` answer schemas (:func:`pipeline.llm.templates.stage_files`)."""
        return _templates.stage_files(NAME, "skills", "mistakes")

    def requests(self, run: LLMRun) -> list[Job]:
        """The calls of every env (:func:`plan_calls`) over the train memories; notes the
        memories (all, held out, train by env) for :meth:`collect`."""
        ctx = run.ctx
        all_memories = ctx.upstream("memory").read_rows()
        memories, held_out = hold_out_val(all_memories, trajectory_instances(ctx),
                                          read_assignment(ctx.upstream("split")))
        by_env: dict[str, list[dict[str, Any]]] = {}
        for m in memories:
            by_env.setdefault(m["env"], []).append(m)
        run.notes.update(all_memories=all_memories, memories=memories, held_out=held_out, by_env=by_env,
                         dropped_items=[])
        wins = train_successes(ctx, {m["trajectory_id"] for m in memories})
        calls = [c for env, mems in by_env.items()
                 for c in plan_calls(mems, env, ctx.config.skills, ctx.config.quality, run.tally,
                                     [t for t in wins if t.env == env])]
        return [Job(c, c.request.key, [c.request]) for c in calls]

    def ask(self, run: LLMRun) -> None:
        """See :meth:`LLMStage.ask`; then :func:`sampled_retries` for the calls a content rule
        rejected whole (``skills.sampled_retries`` rounds)."""
        super().ask(run)
        cfg = run.ctx.config.skills
        if cfg.sampled_retries and any(j.failed for j in run.jobs):  # run.ctx.llm starts the LLM: only if needed
            run.notes["superseded"], run.notes["sampled"] = sampled_retries(
                run.ctx.llm, run.jobs, cfg.sampled_retries, cfg.retry_temperature, self.name)

    def format_output(self, item: Call, values: list[Any], run: LLMRun) -> list[dict[str, Any]]:
        """See :meth:`LLMStage.format_output`: the skill rows of one call's answer (:func:`call_rows`),
        before merging and source checks (:meth:`env_banks`); the items it quarantined are noted
        for :meth:`collect`."""
        rows, dropped = call_rows(item, values[0], run.model, run.tally)
        run.notes["dropped_items"] += dropped
        return rows

    def env_banks(self, run: LLMRun) -> tuple[list[dict[str, Any]], dict[str, tuple[list, list]]]:
        """Per env, the rows of its successful calls, merged (``skills.merge_threshold``) and
        source-checked. Returns ``(rows, {env: (rows, memories)})``; notes the merges and the
        rows dropped for their sources."""
        rows, banks, merges, bad_sources = [], {}, [], []
        for env, mems in run.notes["by_env"].items():
            env_rows = [r for j in run.jobs if j.item.env == env and not j.failed
                        for r in self.format_output(j.item, j.values, run)]
            env_rows, env_merges = _skillmerge.merge_similar(env_rows, run.ctx.config.skills.merge_threshold)
            env_rows, dropped = source_check(env_rows, run.notes["all_memories"], run.tally)
            env_rows, gated = self.usefulness_gate(run, env, env_rows)
            rows, merges, bad_sources = rows + env_rows, merges + env_merges, bad_sources + dropped + gated
            banks[env] = (env_rows, mems)
        run.notes.update(merges=merges, bad_sources=bad_sources)
        return rows, banks

    def usefulness_gate(self, run: LLMRun, env: str, rows: list[dict[str, Any]]
                        ) -> tuple[list[dict[str, Any]], list[QuarantineRow]]:
        """Score ``env``'s merged bank items on held-out expert steps and gate them
        (:func:`pipeline.usefulness.gate.gate_bank`); the record goes to the counters."""
        ctx, cfg = run.ctx, run.ctx.config.usefulness
        if cfg.policy == "off" or not rows:
            return rows, []
        from pipeline.usefulness.gate import gate_bank
        from pipeline.usefulness.load import open_scorer, scorer_id
        from pipeline.usefulness.bank import step_messages
        if "scorer" not in run.notes:
            run.notes["scorer"] = None
        def factory():
            run.notes["scorer"] = run.notes["scorer"] or open_scorer(cfg)
            return run.notes["scorer"]
        own = [Trajectory.from_row(r) for r in ctx.upstream("verify").read_rows() if r["outcome"] == "success"]
        kept, dropped, record = gate_bank(rows, own, cfg, lambda step: step_messages(step, ctx.config.prompt),
                                          factory, scorer_id(cfg.scorer), NAME)
        run.notes.setdefault("usefulness", {})[env] = record
        return kept, dropped

    def collect(self, run: LLMRun) -> "SkillsOutput":
        """Bank rows (versioned; registered after the commit), the SkillRL JSON files, one ``unit``
        row per unused or held-out memory, one ``request`` row per failed call (a failed mistakes
        call whose memories also fed their category's call leaves no memory row to keep its raw
        output), one ``rejected_answer`` row per answer a sampled retry replaced or failed retry,
        and one ``item`` row per bank item a rule dropped or dropped for its sources or usefulness."""
        rows, banks = self.env_banks(run)
        version = skillbank.bank_version(rows)
        for r in rows:
            r["bank_version"] = version
        parent = bank_parent(run.ctx, version, bool(rows))
        used, quarantine = unused_quarantine(run.notes["memories"], run.jobs)
        records = [call_failure_row(j.item, j.failed[0], j.item.request.key, "request") for j in run.jobs if j.failed]
        # the rejected answers that a sampled retry replaced, and the failed retries: kept with their rule
        records += [failure_row(NAME, r, f"{j.item.kind} call {r.key}: {r.detail} (replaced by a sampled "
                                "retry)", r.key, kind="rejected_answer") for j, r in run.notes.get("superseded", [])]
        records += [failure_row(NAME, r, f"sampled retry of {j.item.kind} call {r.key}: {r.detail}", r.key,
                                kind="rejected_answer") for j in run.notes.get("sampled", []) for r in j.failed]
        records += [dataclasses.replace(q, kind="item") for q in run.notes["dropped_items"] + run.notes["bad_sources"]]
        n = len(run.notes["all_memories"])
        run.notes.update(version=version, parent=parent)
        return SkillsOutput(rows=rows, quarantine=quarantine + run.notes["held_out"] + records, rows_in=n, units_in=n,
                            extra_files=bank_files(banks, run.ctx.env, version, parent, run.model),
                            memories_used=len(used))

    def units_out(self, out: "SkillsOutput", rows: int) -> int:
        """Memories that went into the bank (its rows are skills): :attr:`SkillsOutput.memories_used`."""
        return out.memories_used

    def after_commit(self, ctx: StageContext, art: StageArtifact, reused: bool) -> None:
        """Register the committed bank (its rows, with the parent its counters name) as a version of
        ``<root>/banks`` (:meth:`pipeline.stage.stage.Stage.after_commit`). A reused artifact is
        registered only when its version is missing (a process killed after the commit), so a
        rerun adds no version and no event; an empty bank is not registered."""
        counters = art.manifest.get("counters") or {}
        version = counters.get("bank_version")
        banks = bank_store(ctx)
        if not version or (reused and banks.has(version)):
            return
        rows = art.read_rows()
        if rows:
            banks.register(rows, run_id=ctx.store.run_id, stage=NAME, parent=counters.get("bank_parent"))

    def counters(self, run: LLMRun, out: StageOutput) -> dict[str, Any]:
        """Calls (and failed ones) by kind, skills by kind, items answered and quarantined, merges,
        the bank version and parent, then the content-rule record over the calls (an item
        quarantined by a rule, or dropped for its sources, counts too: it is not a call)."""
        kinds = [j.item.kind for j in run.jobs]
        merges = run.notes["merges"]
        return {"calls": dict(Counter(kinds)), "calls_failed": dict(Counter(j.item.kind for j in run.jobs if j.failed)),
                "skills": dict(Counter(r["kind"] for r in out.rows)),
                "items_answered": sum(len(j.values[0].get("mistakes" if j.item.kind == "mistake" else "skills") or [])
                                      for j in run.jobs if not j.failed),
                "items_quarantined": dict(Counter(q.reason for q in run.notes["dropped_items"])),
                "merged": sum(not m["exact_duplicate"] for m in merges),
                "exact_duplicates": sum(m["exact_duplicate"] for m in merges), "merges": merges,
                "bank_version": run.notes["version"], "bank_parent": run.notes["parent"],
                "usefulness": run.notes.get("usefulness", {}),
                "sampled_retry": {"calls": len(run.notes.get("sampled", [])),
                                  "saved": len(run.notes.get("superseded", []))},
                "quality": run.tally.record(len(run.jobs), Counter(q.reason for q in out.quarantine
                                                                   if q.kind != "unit"))}


STAGE = SkillsStage()

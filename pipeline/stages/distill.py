"""Stage ``distill``: write one short reasoning (``think``) per recorded action of each success.

For each SUCCESS trajectory, one structured call (or one per chunk of
``distill.max_steps_per_call`` actions) gets the task, the retrieved skills block
(``prompts.select_skills`` + ``render_skills_block``, the same renderer as SFT export and RL)
and the steps (the action to explain, the observation before it, the admissible actions; a
recorded ``thought`` of a ReAct source is shown as a hint). ALFWorld successes get the synthetic ``done`` turn when
``prompts.needs_synthetic_done`` says so, with ``prompts.synthetic_done_admissible``.

Indexing: ``thinks[i]`` (0-based ``step_index = i``) is the reasoning for action ``i + 1``, i.e.
``traj.steps[i + 1].action``; the synthetic ``done`` has ``step_index = n_actions``.

The per-call JSON Schema forces exactly the expected indices (``prefixItems`` with a ``const``
``step_index`` per position), which llama.cpp turns into a grammar; :func:`check_thinks` also
checks them 1:1 plus the form rules (no tags and no CJK, by :mod:`pipeline.rules` exactly as
build_pairs judges a pair; non-blank; bounded). The reference trusted the indices and silently
emitted empty thinks. Failures (the model's raw output kept) and non-successes (reason
``not_success``: failures feed memories, not SFT) are quarantined
(:class:`~pipeline.stage.llmstage.LLMStage` runs the loop). Units: trajectories.

Content rules (``pipeline.quality``): each answer's check also rejects a think with no
words, an n-gram loop, a think reused for two steps, a think naming an entity the agent has not
seen yet (``future_leak``), a think that only restates an action (``think_is_action``) and an
off-topic think; the rule's reason is fed back in the repair
round, then quarantines the trajectory. ``distill.source_thoughts = prefer`` (default) uses a
step's recorded thought (ReAct ``think:``, ETO) as its think when it passes the same rules
(:func:`recorded_thinks`) and asks the LLM only for the other steps; build_pairs flags those pairs
``recorded_thought``; a row whose thinks are all recorded has ``model = "source"``.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from pipeline import envs, prompts, quality, rules
from pipeline.core.config import QualityConfig
from pipeline.stage.llmstage import Job, LLMOutput, LLMRun, LLMStage, failure_row, send
from pipeline.core.records import DISTILLED_SCHEMA, QuarantineRow, Trajectory
from pipeline.stage.stage import StageContext, StageOutput, reject
from pipeline.llm import jsonparse
from pipeline.llm import templates as _templates
from pipeline.llm.schemas import load_schema, wrap
from pipeline.llm.types import JSONRequest, JSONResult
from pipeline.quality import echo, topic
from pipeline.quality.registry import Registry
from pipeline.quality.rulebook import REGISTRY
from pipeline.quality.targets.thinks import OBS_CHARS, Thinks, ThinkSequence
from pipeline.verify.progress import progress_lines

TEMPLATE = "distill"     # pipeline/templates/distill*.txt

# OBS_CHARS (imported): observation shown per step (the reasoning needs the gist, not all of it), the
# text the off_topic rule compares a think with
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


def shared_thinks_schema(max_chars: int) -> dict[str, Any]:
    """The stage-wide form of :func:`thinks_schema` (the file's item count and step-index bounds),
    sent to hosted endpoints so every request's prefix is the same (``JSONRequest.shared_schema``);
    answers are still checked against the per-call schema."""
    arr = load_schema(SCHEMA_FILE)
    arr["items"]["properties"]["think"]["maxLength"] = max_chars
    return wrap("thinks", arr)


def check_thinks(indices: list[int], max_chars: int, content: Callable[[list[dict]], str | None] | None = None):
    """``JSONRequest.check``: the answer's step indices equal ``indices`` 1:1 and every think is
    usable, then ``content`` (the content rules, :func:`content_check`) when given. Returns
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
                     qcfg: QualityConfig, encoder: topic.Encoder | None = None, max_chars: int | None = None,
                     others: tuple[tuple[int, str], ...] = (), registry: Registry | None = None
                     ) -> list[quality.Violation]:
    """Content rules of one answer's ``thinks`` (``[{step_index, think}]``) for ``traj``, whose
    entries (:func:`step_entries`) are keyed by step index: the checks of target ``think`` of
    ``registry`` (default :data:`pipeline.quality.rulebook.REGISTRY`; their list and order:
    ``docs/content_rules.md``), with ``others`` (``(step_index, think)`` the trajectory already
    has from other calls or its recorded thoughts: ``reused_think``), the template's words
    (:func:`prompt_vocab`) and worked examples (``echo_prompt``), and ``max_chars`` (the schema
    bound of an LLM think; ``None`` for a recorded thought: no ``cut_off``)."""
    subject = Thinks(thinks, entries, traj, qcfg, prompt_vocab(traj.env), _templates.example_texts(TEMPLATE, traj.env),
                     encoder, max_chars, others)
    return (registry or REGISTRY).run("think", subject)


def repeats(thinks: list[tuple[int, str]], task: str, env: str, others: tuple[tuple[int, str], ...] = ()
            ) -> list[quality.Violation]:
    """The checks of target ``episode_thinks`` (``reused_think``) of a trajectory's ``thinks``
    (``(step_index, think)``) judged with ``others`` it already has: only repeats that involve one
    of ``thinks`` are reported."""
    return REGISTRY.run("episode_thinks", ThinkSequence(thinks, task, env, others))


@lru_cache(maxsize=16)
def prompt_vocab(env: str) -> frozenset[str]:
    """Content words of the distill template's fixed text and ``env``'s environment lines (rule
    ``echo_prompt`` of thinks)."""
    tpl = _templates.load(TEMPLATE, env)
    return echo.prompt_words([*tpl.sections.values(), tpl.env_rules])


def content_check(entries: list[dict[str, Any]], traj: Trajectory, qcfg: QualityConfig, tally: quality.Tally,
                  max_chars: int | None = None, others: tuple[tuple[int, str], ...] = (),
                  registry: Registry | None = None):
    """The ``content`` callable of :func:`check_thinks` for one chunk: :func:`think_violations`
    (with ``others``, the rules of ``registry``) gated by ``tally`` (policy and counts)."""
    by_index = {e["step_index"]: e for e in entries}
    return lambda thinks: tally.gate(think_violations(thinks, by_index, traj, qcfg, max_chars=max_chars,
                                                      others=others, registry=registry))


def recorded_thinks(entries: list[dict[str, Any]], traj: Trajectory, qcfg: QualityConfig, tally: quality.Tally
                    ) -> dict[int, str]:
    """``{step_index: think}`` of the entries whose recorded thought (``hint``, from the source's
    ``steps[].thought``) can be the think as is (``distill.source_thoughts = prefer``): no tag, no
    CJK, not a repeat of a thought taken for an earlier step (``reused_think``: the LLM is asked
    for that step instead of losing the trajectory), and no content-rule violation
    (:func:`think_violations`, gated by ``tally``). Whitespace
    is collapsed as for LLM thinks; its length is not bounded by ``max_think_chars`` (that bound
    keeps a small model's answer inside ``max_tokens``; build_pairs bounds the whole pair)."""
    by_index = {e["step_index"]: e for e in entries}
    out = {}
    for e in entries:
        hint = " ".join(e["hint"].split())
        if not hint or rules.has_tag(hint) or rules.has_cjk(hint):
            continue
        if repeats([*out.items(), (e["step_index"], hint)], traj.task, traj.env):
            continue  # a thought the agent already wrote for an earlier step: the LLM writes this one
        think = [{"step_index": e["step_index"], "think": hint}]
        if tally.gate(think_violations(think, by_index, traj, qcfg)) is None:
            out[e["step_index"]] = hint
    return out


def step_entries(traj: Trajectory, synthetic_admissible: list[str] | None) -> list[dict[str, Any]]:
    """One entry per reasoning to write: ``{step_index, observation, admissible, action, effect,
    state, hint}`` (``effect``: what the action does, :func:`pipeline.envs.action_effect`;
    ``state``: where the agent stands before it, :func:`pipeline.verify.progress.progress_lines`,
    "" where none is known).

    Entry ``i`` shows ``steps[i]`` (the state the agent saw) and ``steps[i + 1].action``; the
    synthetic ``done`` entry (when ``synthetic_admissible`` is given) shows the last observation.
    """
    entries = [{"step_index": i, "observation": traj.steps[i].observation,
                "admissible": list(traj.steps[i].admissible_actions), "action": traj.steps[i + 1].action or "",
                "hint": (traj.steps[i + 1].thought or "").strip()} for i in range(len(traj.steps) - 1)]
    if synthetic_admissible is not None:
        entries.append({"step_index": len(entries), "observation": traj.steps[-1].observation,
                        "admissible": synthetic_admissible, "action": "done", "hint": ""})
    states = progress_lines(traj)  # [] outside ALFWorld and TextWorld: no line
    for e in entries:
        e["effect"] = envs.action_effect(traj.env, e["action"])
        e["state"] = states[min(e["step_index"], len(states) - 1)] if states else ""
    return entries


def render_entry(e: dict[str, Any]) -> str:
    """One :func:`step_entries` entry as prompt lines: step index and the action to explain, what
    it does and where things stand (when known), then the observation before it and the recorded thought (a hint, if any) each clipped to ``OBS_CHARS``
    characters, and the first ``ADMISSIBLE_SHOWN`` admissible actions. The action leads: shown
    last, after an observation that reports the previous action, the teacher explained that one."""
    lines = [f"[step_index {e['step_index']}] Action to explain: {e['action']}"]
    if e.get("effect"):
        lines.append(f"What it does: {e['effect']}")
    if e.get("state"):
        lines.append(f"Where things stand: {e['state']}")
    lines += [f"Observation before it: {_templates.clip_middle(e['observation'], OBS_CHARS)}"]
    if e["admissible"]:
        shown = e["admissible"][:ADMISSIBLE_SHOWN]
        more = len(e["admissible"]) - len(shown)
        lines.append("Admissible actions: " + ", ".join(shown) + (f" (+{more} more)" if more > 0 else ""))
    if e["hint"]:
        lines.append(f"Recorded thought (hint): {_templates.clip(e['hint'], OBS_CHARS)}")
    return "\n".join(lines)


def chunks_of(entries: list[dict[str, Any]], max_steps: int) -> list[list[dict[str, Any]]]:
    """``entries`` cut into chunks of ``max_steps`` (at least 1), in order: one request each."""
    size = max(1, max_steps)
    return [entries[start:start + size] for start in range(0, len(entries), size)]


def chunk_request(traj: Trajectory, key: str, chunk: list[dict[str, Any]], earlier: list[str], skills_block: str,
                  max_chars: int, qcfg: QualityConfig | None = None, tally: quality.Tally | None = None,
                  others: tuple[tuple[int, str], ...] = (), examples: bool = True) -> JSONRequest:
    """The request for the entries of ``chunk``, with ``earlier`` (the actions before it, the last
    ``EARLIER_ACTIONS`` shown); with ``qcfg``, its check also runs the content rules
    (:func:`content_check` with ``others``, counted in ``tally``). ``examples=False`` leaves the
    template's worked examples out of the system message."""
    tpl = _templates.load(TEMPLATE, traj.env)
    tpl = tpl if examples else dataclasses.replace(tpl, examples={})
    shown = earlier[-EARLIER_ACTIONS:]
    earlier_text = ("Earlier actions (already explained): " + "; ".join(shown) + "\n\n") if shown else ""
    user = tpl.render("user", task=traj.task, skills=skills_block or "(none)", earlier=earlier_text,
                      steps="\n\n".join(render_entry(e) for e in chunk))
    indices = [e["step_index"] for e in chunk]
    return JSONRequest(key=key, messages=[{"role": "system", "content": tpl.render("system")},
                                          {"role": "user", "content": user}],
                       schema=thinks_schema(indices, max_chars), schema_name="reasoning",
                       shared_schema=shared_thinks_schema(max_chars),
                       check=check_thinks(indices, max_chars, content_check(
                           chunk, traj, qcfg, tally or quality.Tally(qcfg.flag_rules), max_chars, others)
                           if qcfg else None))


def earlier_actions(traj: Trajectory, step_index: int) -> list[str]:
    """The actions the agent took before the one that think ``step_index`` explains: actions
    ``1..step_index`` of ``traj``, those with a recorded thought included (a step asked alone
    after a product was opened, without its click, was read as a new search)."""
    return [s.action or "" for s in traj.steps[1:step_index + 1]]


def build_requests(traj: Trajectory, entries: list[dict[str, Any]], skills_block: str,
                   max_steps: int, max_chars: int, qcfg: QualityConfig | None = None,
                   tally: quality.Tally | None = None) -> list[JSONRequest]:
    """One request per chunk of ``max_steps`` entries (:func:`chunks_of`, :func:`chunk_request`;
    key ``<trajectory_id>#<chunk>``), each after the actions before its first step
    (:func:`earlier_actions`)."""
    return [chunk_request(traj, f"{traj.trajectory_id}#{c}", chunk, earlier_actions(traj, chunk[0]["step_index"]),
                          skills_block, max_chars, qcfg, tally)
            for c, chunk in enumerate(chunks_of(entries, max_steps))]


@dataclass
class Episode:
    """What distill asks about one successful trajectory (a job's item)."""
    traj: Trajectory
    skill_ids: list[str]           # the skills shown in its prompt
    synthetic: bool                # a synthetic ``done`` turn is added
    given: dict[int, str]          # step index -> a think not asked of the LLM (see given_by)
    given_by: str = "source"       # "source": recorded thoughts; "none": the empty thinks of reasoning none
    chunks: list[list[dict[str, Any]]] = field(default_factory=list)  # the entries of each request
    skills_block: str = ""         # as shown in every request


def _reject(traj: Trajectory, reason: str, detail: str, raw: str = "") -> QuarantineRow:
    return reject(DistillStage.name, reason, detail, traj.trajectory_id, raw, traj.source_uri, traj.source_line)


def episode_job(t: Trajectory, run: LLMRun, bank: list[dict[str, Any]]) -> Job:
    """The job of one trajectory: rejected (``not_success``, ``no_actions``), or its chunked
    requests for the steps without a usable recorded thought."""
    cfg, qcfg = run.ctx.config.distill, run.ctx.config.quality
    if not t.success:
        return Job(t, t.trajectory_id,
                   rejected=_reject(t, "not_success", f"outcome {t.outcome}: used for memories, not SFT"))
    if len(t.steps) < 2:
        return Job(t, t.trajectory_id, rejected=_reject(t, "no_actions", "trajectory has no recorded action"))
    synthetic = prompts.needs_synthetic_done(t, cfg)
    skills = prompts.select_skills(bank, t.env, t.category, run.ctx.config.prompt)
    entries = step_entries(t, prompts.synthetic_done_admissible(t, cfg.seed) if synthetic else None)
    if cfg.reasoning == "none":  # action-only baseline: an empty think per step, no call
        given, given_by = {e["step_index"]: "" for e in entries}, "none"
    else:
        given = recorded_thinks(entries, t, qcfg, run.tally) if cfg.source_thoughts == "prefer" else {}
        given_by = "source"
    ask = [e for e in entries if e["step_index"] not in given]
    block = prompts.render_skills_block(skills)
    reqs = build_requests(t, ask, block, cfg.max_steps_per_call, cfg.max_think_chars, qcfg, run.tally) if ask else []
    return Job(Episode(t, [s["skill_id"] for s in skills], synthetic, given, given_by,
                       chunks_of(ask, cfg.max_steps_per_call), block),
               t.trajectory_id, reqs, t.source_uri, t.source_line)


def split_rejected(result: JSONResult, chunk: list[dict[str, Any]], traj: Trajectory, qcfg: QualityConfig,
                   max_chars: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """Split a chunk's answer that a content rule rejected after its repairs (``check_failed``)
    into ``(kept, redo)``: the thinks (``{step_index, think}``) that pass every rule when judged
    alone, and the entries of ``chunk`` whose think does not. ``None`` when there is nothing to
    keep from: another error (schema, length, transport) or an answer whose indices do not match.
    The rules run with a scratch tally: the answer's violations were counted when it was judged."""
    if result.error != "check_failed":
        return None
    try:
        value = jsonparse.extract_json(result.raw)
    except jsonparse.JSONExtractError:
        return None
    indices = [e["step_index"] for e in chunk]
    if not isinstance(value, dict) or check_thinks(indices, max_chars)(value) is not None:
        return None
    scratch = quality.Tally(qcfg.flag_rules)
    kept, redo = [], []
    for e, t in zip(chunk, value["thinks"]):
        alone = check_thinks([e["step_index"]], max_chars, content_check([e], traj, qcfg, scratch, max_chars))
        if alone({"thinks": [t]}) is None:
            kept.append({"step_index": e["step_index"], "think": t["think"]})
        else:
            redo.append(e)
    return kept, redo


def step_request(ep: Episode, entry: dict[str, Any], max_chars: int, qcfg: QualityConfig,
                 tally: quality.Tally, sampling: dict[str, Any] | None = None,
                 others: tuple[tuple[int, str], ...] = (), examples: bool = True) -> JSONRequest:
    """The one-step request for ``entry`` (key ``<trajectory_id>#s<step_index>``): the same
    template, skills and checks as a chunk of one, after every action before it
    (:func:`earlier_actions`), its think judged against ``others`` (the thinks the trajectory
    keeps from other calls: no reuse across calls); ``sampling`` (temperature and seed of a
    retry) goes with it; ``examples``: whether the worked examples are shown."""
    req = chunk_request(ep.traj, f"{ep.traj.trajectory_id}#s{entry['step_index']}", [entry],
                        earlier_actions(ep.traj, entry["step_index"]), ep.skills_block, max_chars, qcfg, tally,
                        others, examples)
    req.sampling = sampling
    return req


def sampled_retries(llm: Any, retries: list[Job], redo: dict[int, list[dict[str, Any]]], cfg: Any,
                    qcfg: QualityConfig, tally: quality.Tally, desc: str,
                    others: dict[int, tuple[tuple[int, str], ...]] | None = None) -> list[Job]:
    """Rejection sampling for the one-step calls that greedy decoding failed: up to
    ``cfg.sampled_retries`` rounds, round ``k`` asking each still-failed step again as
    :func:`retry_round` says (judged by the same checks, against
    ``others[id(job)]`` as in :func:`step_request`). A result that passes replaces the failed one
    in its job (``retries``; ``redo[id(job)]``: the entries of its requests, in order). Returns
    the jobs of every round (their requests are counted as calls)."""
    others = others or {}
    rounds: list[Job] = []
    for k in range(1, cfg.sampled_retries + 1):
        todo = [(job, n) for job in retries for n, r in enumerate(job.results)
                if not r.ok and r.error == "check_failed"]
        if not todo:
            break
        sampling, examples = retry_round(k, cfg.retry_temperature)
        # each step is judged against the trajectory's other thinks, the answered one-step calls included
        tries = [Job(job.item, job.item_id, [step_request(job.item, redo[id(job)][n], cfg.max_think_chars, qcfg,
                                                          tally, sampling,
                                                          others.get(id(job), ()) + answered_steps(job, n), examples)],
                     job.source_uri, job.line) for job, n in todo]
        send(llm, tries, f"{desc}, sampled retry {k}")
        for (job, n), tried in zip(todo, tries):
            if tried.results[0].ok:
                job.results[n] = tried.results[0]
        for job in {id(job): job for job, _ in todo}.values():
            reject_repeats(job, others.get(id(job), ()), tally)
        rounds += tries
    return rounds


def retry_round(k: int, temperature: float) -> tuple[dict[str, Any], bool]:
    """``(sampling, examples shown)`` of retry round ``k`` (1-based) of a failed one-step call.
    Round 1 decodes greedily without the worked examples: the 1.5B teacher's failed answers copy
    them ("I search with the product type ..." for a ``click[Buy Now]``, "before the fridge I go
    to the microwave" for the final put), and without them its greedy answer for that buy read
    "I want to buy a styling cream ...". Later rounds sample at ``temperature`` with seed ``k``,
    the examples shown in even rounds only."""
    if k == 1:
        return {"temperature": 0.0, "seed": 1}, False
    return {"temperature": temperature, "seed": k}, k % 2 == 0


def answered_steps(job: Job, skip: int = -1) -> tuple[tuple[int, str], ...]:
    """``(step_index, think)`` of the ok one-step answers of ``job`` (result ``skip`` left out)."""
    return tuple((int(t["step_index"]), t["think"]) for n, r in enumerate(job.results) if r.ok and n != skip
                 for t in r.value["thinks"])


def reject_repeats(job: Job, others: tuple[tuple[int, str], ...], tally: quality.Tally) -> None:
    """Turn each ok one-step answer of ``job`` whose think repeats ``others`` or an earlier ok
    answer of ``job`` into a failed check (``check_failed``, ``reused_think``, counted in
    ``tally``), so that sampling asks it again: calls answered side by side cannot see each other
    (the pen search's "so I will look at drawer 4" for both the go to and the open of drawer 4)."""
    seen, task = list(others), job.item.traj.task
    for n, r in enumerate(job.results):
        if not r.ok:
            continue
        mine = [(int(t["step_index"]), t["think"]) for t in r.value["thinks"]]
        if err := tally.gate(repeats(mine, task, job.item.traj.env, tuple(seen))):
            job.results[n] = JSONResult(r.key, False, raw=r.raw, error="check_failed", detail=err,
                                        attempts=r.attempts, cached=r.cached, usage=r.usage)
        else:
            seen += mine


def kept_thinks(job: Job, split: list[tuple[int, tuple[list[dict[str, Any]], list[dict[str, Any]]]]]
                ) -> tuple[tuple[int, str], ...]:
    """``(step_index, think)`` that ``job``'s trajectory keeps whatever its one-step calls answer:
    its recorded thoughts, its answered chunks and the thinks kept from its rejected ones
    (``split``: ``(chunk number, (kept, redo))`` of :func:`split_rejected`)."""
    answered = [(int(x["step_index"]), x["think"]) for r in job.results if r.ok for x in r.value["thinks"]]
    kept = [(x["step_index"], x["think"]) for _, (got, _) in split for x in got]
    return tuple(sorted([*job.item.given.items(), *answered, *kept]))


def score_entry(scorer: Any, ep: "Episode", i: int, thinks: list[str], ctx: StageContext) -> list[Any]:
    """Usefulness scores (:func:`pipeline.usefulness.score.score_thinks`) of ``thinks`` for entry
    ``i`` of ``ep`` (the think of action ``i + 1``): the step prompt without a skills block, the
    candidates of :mod:`pipeline.usefulness.candidates`, as the usefulness stage scores a pair."""
    from pipeline.usefulness.candidates import step_candidates
    from pipeline.usefulness.score import score_thinks
    traj, k = ep.traj, i + 1
    entry = next(e for chunk in ep.chunks for e in chunk if e["step_index"] == i)
    admissible = entry["admissible"] if k == len(traj.steps) else None  # the synthetic done turn's sample
    rooms = None
    if traj.env == "alfworld":
        from pipeline.verify.alfworld import replay
        rooms = replay(traj)
    pcfg = dataclasses.replace(ctx.config.prompt, skills=False)
    cands = step_candidates(traj, k, entry["action"], admissible, rooms, ctx.config.usefulness.max_candidates)
    return score_thinks(scorer, prompts.render_step_messages(traj, k, "", pcfg, admissible), thinks,
                        entry["action"], traj.env, cands)


class DistillStage(LLMStage):
    """One row of thinks per successful trajectory of ``verify`` (module docstring)."""
    name = "distill"
    version = "29"  # think_unrelated; think_misaligned: present-tense retelling, opposite purpose; 5: a think
    # one step late (the previous action's plan); 6: rejected steps asked again one per call; 7: a WebShop
    # search told before a click, a go to or look at another receptacle, two-word names read as one,
    # false_comparison, a transform planned again, a WebShop click one step late; 8: each step shows its
    # action first; 9: false_game_fact, a place the agent does not stand, a go to another drawer of the same
    # kind, the game's text quoted, a WebShop option selected "before buying"; 10: a receptacle's state not yet
    # seen, a transform planned again as a purpose; 11: a WebShop buy told as another click, a put told as a look
    # at a numbered place; 12: at any place; 13: the worked examples end with a put and a buy, a lamp that
    # shows contents or helps a search, a room to go to, a transform at a place that cannot do it; 14: a step
    # that a greedy one-step call got wrong is sampled again; 15: every earlier action is shown (those with a
    # recorded thought too), the pen search's thinks that differ in "a"/"the" and the drawer are no reuse, a lamp
    # taken out of a drawer; 16: a step the think says cannot be done, a condition the task does not ask, a put
    # told as done, a buy argued against, another room, a lock; 17: one-step answers that repeat each other are
    # asked again; 18: a go planned to the place the agent is at, a put into another receptacle is no put told done;
    # 19: a look planned there for a step that does not open or examine it; 20: each step says what its action does;
    # 21: any ALFWorld command told for another step, a buy told as the search made, a transform the agent "should" redo;
    # 22: the first retry of a failed one-step call is greedy without the worked examples, then odd rounds too;
    # 23: "I opened cabinet 2" (an open or close after "I") is the step's own action told as done;
    # 24: "I opened drawer 2" after an open of drawer 1 is no recap; 25: "is currently open" is a state claim;
    # 26: each ALFWorld step says where things stand (place, object held, goal object seen, what is left);
    # the held object said to lie in a receptacle or to be found, the agent "at the microwave" at the fridge;
    # 27: "I am currently holding the apple on the diningtable" at the fridge; 28: a comma ends a tool's clause;
    # 29: a TextWorld think that says the agent looks around, moves elsewhere or takes when its action is another
    # in false_game_fact ("before putting it in the fridge, I need to heat it" is no fridge that heats)
    inputs = ("verify", "memory", "skills")
    schema = DISTILLED_SCHEMA
    # usefulness: the scorer of best-of-n (its weights' hash: input_facts)
    config_sections = ("distill", "prompt", "quality", "usefulness")
    sharded = True  # one trajectory at a time: runs per shard

    def prompt_files(self, ctx: StageContext) -> list[str]:
        """See :meth:`Stage.prompt_files`: ``pipeline/templates/distill*.txt`` and
        ``schemas/reasoning.schema.json`` (:func:`pipeline.llm.templates.stage_files`)."""
        return _templates.stage_files(TEMPLATE, SCHEMA_FILE)

    def requests(self, run: LLMRun) -> list[Job]:
        """One job per trajectory (:func:`episode_job`); notes the memories of each trajectory
        and the bank version for the rows."""
        trajs = [Trajectory.from_row(r) for r in run.ctx.upstream("verify").read_rows()]
        memory_ids: dict[str, list[str]] = {}
        for m in run.ctx.upstream("memory").read_rows():
            memory_ids.setdefault(m["trajectory_id"], []).append(m["memory_id"])
        bank = run.ctx.upstream("skills").read_rows()
        run.notes.update(memory_ids=memory_ids, bank_version=bank[0]["bank_version"] if bank else "")
        return [episode_job(t, run, bank) for t in trajs]

    def ask(self, run: LLMRun) -> None:
        """See :meth:`LLMStage.ask`; then, with ``distill.step_retry``, :meth:`retry_steps`; then, with
        ``distill.best_of > 1``, :meth:`best_of`."""
        super().ask(run)
        if run.ctx.config.distill.step_retry:
            self.retry_steps(run)
        if run.ctx.config.distill.best_of > 1:
            self.best_of(run)

    def input_facts(self, ctx: StageContext) -> list[dict[str, Any]]:
        """The upstream content hashes and, with best-of-n, the scorer that picks among the thinks."""
        facts = super().input_facts(ctx)
        if ctx.config.distill.best_of > 1:
            from pipeline.usefulness.load import scorer_id
            facts.append({"best_of_scorer": scorer_id(ctx.config.usefulness.scorer)})
        return facts

    def best_of(self, run: LLMRun) -> None:
        """Best-of-n thinks (:mod:`pipeline.stages.distill_bestof`): sampled variants of every answered
        chunk, each step's most useful passing think kept; counted in ``run.notes["best_of"]``."""
        from pipeline.stages.distill_bestof import run_best_of
        from pipeline.usefulness.load import open_scorer
        cfg, qcfg = run.ctx.config.distill, run.ctx.config.quality
        scorer = []

        def request_for(job: Job, k: int, sampling: dict[str, Any]) -> JSONRequest:
            ep, chunk = job.item, job.item.chunks[k]
            req = chunk_request(ep.traj, f"{ep.traj.trajectory_id}#{k}~{sampling['seed']}", chunk,
                                earlier_actions(ep.traj, chunk[0]["step_index"]), ep.skills_block, cfg.max_think_chars)
            req.sampling = sampling
            return req

        def send_all(asked: list[list[JSONRequest]]) -> list[list[Any]]:
            jobs = [Job(None, f"best-of {n}", reqs) for n, reqs in enumerate(asked)]
            send(run.ctx.llm, jobs, f"{self.name} (best of {cfg.best_of})")
            return [j.results for j in jobs]

        def passes_for(job: Job, k: int):
            by_index = {e["step_index"]: e for e in job.item.chunks[k]}
            scratch = quality.Tally(qcfg.flag_rules)
            return lambda t, _v: check_thinks([int(t["step_index"])], cfg.max_think_chars, content_check(
                [by_index[int(t["step_index"])]], job.item.traj, qcfg, scratch, cfg.max_think_chars))(
                {"thinks": [t]}) is None

        def score_step(job: Job, i: int, thinks: list[str]) -> list[float]:
            if not scorer:
                scorer.append(open_scorer(run.ctx.config.usefulness))
            return [s.gain for s in score_entry(scorer[0], job.item, i, thinks, run.ctx)]

        run.notes["best_of"] = run_best_of(run.jobs, cfg.best_of, cfg.retry_temperature, request_for, send_all,
                                           passes_for, score_step)

    def retry_steps(self, run: LLMRun) -> None:
        """Second round (``distill.step_retry``): for each job whose failed chunks were all
        rejected by a content rule (:func:`split_rejected`), ask again for each rejected step in
        a call of its own (:func:`step_request`, in ``run.followups``). When every one-step call
        succeeds, each failed chunk's result becomes an ok one holding its kept thinks and the new
        ones, in step order, and the rejected answer is noted in ``run.notes["superseded"]`` (kept
        as a request quarantine row by :meth:`collect`); otherwise the job keeps its failure."""
        cfg, qcfg = run.ctx.config.distill, run.ctx.config.quality
        plans = []
        for job in run.jobs:
            if job.rejected is not None or not job.failed:
                continue
            split = [(k, split_rejected(r, job.item.chunks[k], job.item.traj, qcfg, cfg.max_think_chars))
                     for k, r in enumerate(job.results) if not r.ok]
            if all(got is not None for _, got in split):
                others = kept_thinks(job, split)
                reqs = [step_request(job.item, e, cfg.max_think_chars, qcfg, run.tally, others=others)
                        for _, (_, redo) in split for e in redo]
                plans.append((job, split, Job(job.item, job.item_id, reqs, job.source_uri, job.line), others))
        run.followups = [retry for _, _, retry, _ in plans]
        run.notes["superseded"] = []
        if any(retry.requests for retry in run.followups):
            send(run.ctx.llm, run.followups, f"{self.name} (one step per call)")
            for _, _, retry, others in plans:
                reject_repeats(retry, others, run.tally)
            # what each failed one-step call would keep before sampling replaces it
            run.notes["greedy_failed"] = [(j, r) for j in run.followups for r in j.failed]
            redo = {id(retry): [e for _, (_, again) in split for e in again] for _, split, retry, _ in plans}
            run.notes["sampled"] = sampled_retries(run.ctx.llm, run.followups, redo, cfg, qcfg, run.tally,
                                                   f"{self.name} (one step per call)",
                                                   {id(retry): others for _, _, retry, others in plans})
        for job, split, retry, _ in plans:
            if retry.failed:
                continue
            answers = iter(r.value["thinks"][0] for r in retry.results)
            for k, (kept, redo) in split:
                thinks = sorted(kept + [next(answers) for _ in redo], key=lambda x: x["step_index"])
                run.notes["superseded"].append((job, job.results[k]))
                job.results[k] = JSONResult(job.results[k].key, True, value={"thinks": thinks},
                                            raw=json.dumps({"thinks": thinks}))

    def collect(self, run: LLMRun) -> LLMOutput:
        """See :meth:`LLMStage.collect`; adds a ``rejected_answer`` row for each chunk answer that
        one-step calls replaced (its raw output and the rule that rejected it) and for each failed
        sampled retry, and a row for each failed greedy one-step call: a ``rejected_answer`` when a
        sampled retry replaced it, else a ``request`` (it is one of the run's failed requests)."""
        out = super().collect(run)
        out.quarantine += [failure_row(self.name, r, f"call {r.key}: {r.detail} (replaced: its rejected "
                                       "steps were asked again one per call)", r.key, j.source_uri, j.line,
                                       kind="rejected_answer") for j, r in run.notes.get("superseded", [])]
        out.quarantine += [failure_row(self.name, r, f"one-step call {r.key}: {r.detail}", r.key, j.source_uri, j.line,
                                       kind="request" if any(r is x for x in j.results) else "rejected_answer")
                           for j, r in run.notes.get("greedy_failed", [])]
        out.quarantine += [failure_row(self.name, r, f"sampled retry of {r.key}: {r.detail}", r.key, j.source_uri,
                                       j.line, kind="rejected_answer") for j in run.notes.get("sampled", [])
                           for r in j.failed]
        return out

    def unit_detail(self, job: Job, result: JSONResult) -> str:
        """See :meth:`LLMStage.unit_detail`: ``call <key>: <detail>``, the key naming the failed chunk
        (``<trajectory_id>#<chunk>``)."""
        return f"call {result.key}: {result.detail}"

    def format_output(self, item: Episode, values: list[Any], run: LLMRun) -> list[dict[str, Any]] | QuarantineRow:
        """The row of one episode: its answered and recorded thinks in step order, unless one
        think is reused across calls (each call was checked on its own: caught here)."""
        t = item.traj
        # one line per think: a real model may write newlines (the JSON decoder accepts them)
        thinks = sorted([{"step_index": int(x["step_index"]), "think": " ".join(x["think"].split())}
                         for v in values for x in v["thinks"]]
                        + [{"step_index": i, "think": v} for i, v in item.given.items()],
                        key=lambda x: x["step_index"])
        if (len(values) > 1 or item.given) and (
                err := run.tally.gate(repeats([(x["step_index"], x["think"]) for x in thinks], t.task, t.env))):
            return _reject(t, "reused_think", f"across calls: {err}", json.dumps(thinks))
        return [{"trajectory_id": t.trajectory_id, "env": t.env, "category": t.category,
                 "thinks": thinks, "synthetic_done": item.synthetic, "skill_ids_used": item.skill_ids,
                 "memory_ids": run.notes["memory_ids"].get(t.trajectory_id, []),
                 "bank_version": run.notes["bank_version"],
                 # the LLM's id when it wrote a think, else "source" (recorded thoughts) or "none"
                 "model": run.model if values else item.given_by, "prompt_sha": _templates.load(TEMPLATE, t.env).sha}]

    def counters(self, run: LLMRun, out: StageOutput) -> dict[str, Any]:
        """Calls, chunked trajectories, synthetic turns, thinks, recorded thoughts used, then
        the content-rule record."""
        asked = [j for j in run.jobs if j.rejected is None]
        kept = {r["trajectory_id"] for r in out.rows}
        return {"calls": sum(len(j.requests) for j in asked), "chunked": sum(len(j.requests) > 1 for j in asked),
                "synthetic_done": sum(r["synthetic_done"] for r in out.rows),
                "thinks": sum(len(r["thinks"]) for r in out.rows),
                "recorded_thoughts": sum(len(j.item.given) for j in asked
                                         if j.item_id in kept and j.item.given_by == "source"),
                # the second round (distill.step_retry): one-step calls, and trajectories they saved
                "step_retry": {"calls": sum(len(j.requests) for j in run.followups),
                               "replaced_chunks": len(run.notes.get("superseded", [])),
                               "trajectories": len(run.followups),
                               "saved": sum(not j.failed and j.item_id in kept for j in run.followups),
                               # rejection sampling after the greedy one-step calls
                               "sampled_calls": len(run.notes.get("sampled", [])),
                               "sampled_ok": sum(not j.failed for j in run.notes.get("sampled", []))},
                "best_of": {"n": run.ctx.config.distill.best_of, **run.notes.get("best_of", {})},
                **super().counters(run, out)}


STAGE = DistillStage()

"""Stage ``memory``: one structured LLM call per trajectory turns it into a reusable memory.

The reference makes 2-3 free-text calls per trajectory (description, refined trajectory,
strategic guidelines) and parses them with greedy brace matching. We make ONE call whose JSON
Schema depends on the outcome:

* success -> ``contextual_description``, ``refined_trajectory`` (the causal chain of steps that
  led to the win) and ``planning_pattern`` (abstract phases with placeholders);
* failure -> ``contextual_description`` and ``mistakes_to_avoid`` ({trigger_condition, bad_action}).

The schema (derived from ``schemas/memory.schema.json``) is validated by the client, and
:func:`check_memory` additionally enforces the outcome-specific content (a success needs a
non-blank planning pattern, a failure at least one mistake) and the content rules. A call that
still fails is quarantined with the model's raw output (:class:`~pipeline.stage.llmstage.LLMStage`
runs the loop). Units: trajectories; ``in = out + quarantined``.
"""
from __future__ import annotations

from typing import Any

from pipeline import quality

from pipeline.core import lineage
from pipeline.core.config import MemoryConfig, QualityConfig
from pipeline.stage.llmstage import Job, LLMRun, LLMStage
from pipeline.core.records import MEMORY_SCHEMA, Trajectory
from pipeline.stage.stage import StageContext, StageOutput
from pipeline.llm import templates as _templates
from pipeline.llm.schemas import load_schema
from pipeline.llm.types import JSONRequest
from pipeline.quality import grounding, topic
from pipeline.quality.registry import Registry
from pipeline.quality.rulebook import REGISTRY
from pipeline.quality.targets.memory import MISTAKE_FIELDS, MemoryAnswer

TEMPLATE = "memory"      # pipeline/templates/memory*.txt
SCHEMA_FILE = "memory"   # schemas/memory.schema.json: every field and bound of the answer
REFINED_FIELDS = ("action", "critical_observation", "reasoning")


def memory_schema(outcome: str, n_actions: int | None) -> dict[str, Any]:
    """JSON Schema of the memory answer for ``outcome`` ("success" | "failure"), derived from
    ``schemas/memory.schema.json`` (bounds and field texts come from the file).

    success: ``contextual_description``, ``refined_trajectory`` (``minItems`` 1, ``step_index`` an
    ``enum`` of the episode's step numbers 0..``n_actions``, so a grammar endpoint cannot invent a
    step; ``n_actions=None``: any step number >= 0, the stage-wide form sent to hosted endpoints,
    see ``JSONRequest.shared_schema``) and ``planning_pattern`` (a non-null string). failure:
    ``contextual_description`` and ``mistakes_to_avoid`` (``minItems`` 1). Raises ``ValueError``
    for another outcome.
    """
    base = load_schema(SCHEMA_FILE)
    props = base["properties"]
    if outcome == "success":
        refined = props["refined_trajectory"]
        refined["minItems"] = 1
        refined["items"]["properties"]["step_index"] = ({"type": "integer", "minimum": 0} if n_actions is None else
                                                        {"type": "integer", "enum": list(range(n_actions + 1))})
        pattern = props["planning_pattern"]
        pattern["type"] = "string"
        keep = ("contextual_description", "refined_trajectory", "planning_pattern")
    elif outcome == "failure":
        props["mistakes_to_avoid"]["minItems"] = 1
        keep = ("contextual_description", "mistakes_to_avoid")
    else:
        raise ValueError(f"unknown outcome {outcome!r}; expected 'success' or 'failure'")
    base["properties"] = {k: props[k] for k in keep}
    base["required"] = list(keep)
    return base


def check_memory(outcome: str, traj: Trajectory | None = None, qcfg: QualityConfig | None = None,
                 tally: quality.Tally | None = None, schema: dict[str, Any] | None = None):
    """A ``JSONRequest.check`` for ``outcome``: returns an error message or ``None``.

    Catches what a schema allows but a memory must not have: blank (whitespace-only) texts,
    a success without a planning pattern, a failure without a usable mistake. With ``traj``, it
    first repairs the refined steps from the record (a miscounted step index, a paraphrased
    observation: :func:`pipeline.quality.grounding.reground_steps`, counted in ``tally.repaired``)
    and then runs the content rules of :func:`content_violations` (gated by ``tally``'s policy;
    message ``"<reason>: <detail>"``, so the quarantine row gets the rule's reason).
    """
    def check(value: dict[str, Any]) -> str | None:
        err = form(value)
        if err or traj is None:
            return err
        gate = tally or quality.Tally(qcfg.flag_rules if qcfg else ())
        q, bounds = qcfg or QualityConfig(), schema_bounds(schema)
        fixed = grounding.reground_steps(value.get("refined_trajectory") or [], traj, q.min_observation_overlap,
                                         bounds.get("refined_trajectory.critical_observation"))
        gate.repaired.update({k: n for k, n in fixed.items() if n})
        return gate.gate(content_violations(value, traj, q, bounds=bounds))

    def form(value: dict[str, Any]) -> str | None:
        if not str(value.get("contextual_description", "")).strip():
            return "contextual_description is blank"
        if outcome == "success":
            if not str(value.get("planning_pattern") or "").strip():
                return "a successful episode needs a non-empty planning_pattern"
            for s in value.get("refined_trajectory") or []:
                if not all(str(s.get(k, "")).strip() for k in REFINED_FIELDS):
                    return f"refined_trajectory step {s.get('step_index')} has a blank field"
        else:
            mistakes = [m for m in value.get("mistakes_to_avoid") or []
                        if all(str(m.get(k, "")).strip() for k in MISTAKE_FIELDS)]
            if not mistakes:
                return "a failed episode needs at least one mistake with trigger_condition and bad_action"
        return None
    return check


def schema_bounds(schema: dict[str, Any] | None) -> dict[str, int]:
    """``{field: maxLength}`` of a memory answer schema: top-level strings by name, the fields of
    refined steps and mistakes as ``refined_trajectory.<f>`` / ``mistakes_to_avoid.<f>``."""
    out: dict[str, int] = {}
    for name, node in ((schema or {}).get("properties") or {}).items():
        if "maxLength" in node:
            out[name] = node["maxLength"]
        for f, sub in ((node.get("items") or {}).get("properties") or {}).items():
            if "maxLength" in sub:
                out[f"{name}.{f}"] = sub["maxLength"]
    return out


def content_violations(value: dict[str, Any], traj: Trajectory, qcfg: QualityConfig,
                       encoder: topic.Encoder | None = None, bounds: dict[str, int] | None = None,
                       registry: Registry | None = None) -> list[quality.Violation]:
    """Content rules of one memory answer for ``traj``: the checks of target ``memory`` of
    ``registry`` (default :data:`pipeline.quality.rulebook.REGISTRY`; their list and order:
    ``docs/content_rules.md``): degenerate text, ``cut_off`` against ``bounds``
    (:func:`schema_bounds`), ``echo_prompt`` of a field copied from the template's worked
    examples, grounding of the refined steps, ``missing_key_step`` of a success, ``off_topic``."""
    subject = MemoryAnswer(value, traj, qcfg, bounds or {}, _templates.example_texts(TEMPLATE, traj.env), encoder)
    return (registry or REGISTRY).run("memory", subject)


def render_trajectory(traj: Trajectory, max_chars: int) -> str:
    """The episode as text blocks, at most ``max_chars`` characters.

    Block 0 is the start (first observation); block k >= 1 is
    ``"k | Action: <a> | Reward: <r> | Done: <d>\\nObs: <o>"``. Each observation is clipped to
    ``max_chars // 6``; when the blocks still do not fit, the oldest action blocks are replaced by
    one ``... (steps i-j elided) ...`` line, keeping the start and the most recent steps (the end
    of an episode decides its outcome).
    """
    obs_max = max(80, max_chars // 6)
    blocks = [f"0 | start\nObs: {_templates.clip_middle(traj.steps[0].observation, obs_max)}"] if traj.steps else []
    for k, s in enumerate(traj.steps[1:], start=1):
        blocks.append(f"{k} | Action: {s.action or ''} | Reward: {s.reward} | Done: {s.done}\n"
                      f"Obs: {_templates.clip_middle(s.observation, obs_max)}")
    text = "\n\n".join(blocks)
    if len(text) <= max_chars or len(blocks) < 2:
        return _templates.clip(text, max_chars)
    head, tail = blocks[0], []
    used = len(head) + 40  # room for the elision line
    for block in reversed(blocks[1:]):
        if used + len(block) + 2 > max_chars:
            break
        tail.insert(0, block)
        used += len(block) + 2
    first_kept = len(blocks) - len(tail)
    marker = f"... (steps 1-{first_kept - 1} elided) ..."
    return _templates.clip("\n\n".join([head, marker, *tail]), max_chars)


def build_request(traj: Trajectory, cfg: MemoryConfig, qcfg: QualityConfig | None = None,
                  tally: quality.Tally | None = None) -> JSONRequest:
    """The one structured call for ``traj`` (key = trajectory id); with ``qcfg`` its check also
    runs the content rules (:func:`content_violations`), counted in ``tally``."""
    tpl = _templates.load(TEMPLATE, traj.env)
    outcome = "success" if traj.success else "failure"
    system = tpl.render("system") + "\n\n" + tpl.render(outcome)
    user = tpl.render("user", env_name=_templates.env_name(traj.env), task=traj.task,
                      outcome=outcome.capitalize(),
                      trajectory=render_trajectory(traj, cfg.max_trajectory_chars))
    schema = memory_schema(outcome, len(traj.steps) - 1)
    return JSONRequest(key=traj.trajectory_id,
                       messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                       schema=schema, schema_name=f"memory_{outcome}",
                       check=check_memory(outcome, traj if qcfg else None, qcfg, tally, schema),
                       shared_schema=memory_schema(outcome, None))


def memory_row(traj: Trajectory, value: dict[str, Any], model: str) -> dict[str, Any]:
    """The MEMORY_SCHEMA row for a validated answer; strings are stripped, ids content-derived."""
    success = traj.success
    refined = [{"step_index": int(s["step_index"]), **{k: s[k].strip() for k in REFINED_FIELDS}}
               for s in value.get("refined_trajectory") or []] if success else []
    mistakes = [{k: m[k].strip() for k in MISTAKE_FIELDS} for m in value.get("mistakes_to_avoid") or []
                if all(str(m.get(k, "")).strip() for k in MISTAKE_FIELDS)] if not success else []
    content = {"contextual_description": value["contextual_description"].strip(),
               "refined_trajectory": refined,
               "planning_pattern": (value.get("planning_pattern") or "").strip() if success else "",
               "mistakes_to_avoid": mistakes}
    return {"memory_id": lineage.memory_id(traj.trajectory_id, content), "trajectory_id": traj.trajectory_id,
            "env": traj.env, "category": traj.category, "outcome": traj.outcome, "task": traj.task,
            **content, "model": model, "prompt_sha": _templates.load(TEMPLATE, traj.env).sha}


class MemoryStage(LLMStage):
    """One memory per trajectory of ``verify`` (module docstring)."""
    name = "memory"
    version = "6"  # 4: an unrecorded last observation is requoted from the step before; 5: a trigger
    # condition in the worked example's words is a condition, not a copy; 6: the rules read a name written
    # in two words ("dining table") as the game's one word
    inputs = ("verify",)
    schema = MEMORY_SCHEMA
    config_sections = ("memory", "quality")
    sharded = True  # one trajectory at a time: runs per shard

    def prompt_files(self, ctx: StageContext) -> list[str]:
        """See :meth:`Stage.prompt_files`: ``pipeline/templates/memory*.txt`` and
        ``schemas/memory.schema.json`` (:func:`pipeline.llm.templates.stage_files`)."""
        return _templates.stage_files(TEMPLATE, SCHEMA_FILE)

    def requests(self, run: LLMRun) -> list[Job]:
        """One job per trajectory, one request each (:func:`build_request`)."""
        cfg = run.ctx.config
        trajs = [Trajectory.from_row(r) for r in run.ctx.upstream("verify").read_rows()]
        return [Job(t, t.trajectory_id, [build_request(t, cfg.memory, cfg.quality, run.tally)], t.source_uri,
                    t.source_line) for t in trajs]

    def format_output(self, item: Trajectory, values: list[Any], run: LLMRun) -> list[dict[str, Any]]:
        """See :meth:`LLMStage.format_output`: the trajectory's one memory row (:func:`memory_row`)."""
        return [memory_row(item, values[0], run.model)]

    def counters(self, run: LLMRun, out: StageOutput) -> dict[str, Any]:
        """Memories per outcome, then the content-rule record."""
        return {"success": sum(r["outcome"] == "success" for r in out.rows),
                "failure": sum(r["outcome"] == "failure" for r in out.rows), **super().counters(run, out)}


STAGE = MemoryStage()

"""The LLM stage base: a subclass says what to ask and how to read an answer; the base runs the loop.

memory, skills and distill each turn units (trajectories, memories) into structured JSON
requests, send them in one concurrent batch, turn every accepted answer into rows and every failed
request into a quarantine row that keeps the model's raw output. :class:`LLMStage` owns that loop
(in the spirit of distilabel's ``Task``: ``format_input`` / ``format_output``)::

    class Summarise(LLMStage):
        name = "summary"
        inputs = ("remove_loops",)
        schema = SUMMARY_SCHEMA
        config_sections = ("summary", "quality")

        def requests(self, run):
            trajs = [Trajectory.from_row(r) for r in run.ctx.upstream("remove_loops").read_rows()]
            return [Job(t, t.trajectory_id, [JSONRequest(t.trajectory_id, messages(t), SUMMARY)],
                        t.source_uri, t.source_line) for t in trajs]

        def format_output(self, item, values, run):
            return [{"trajectory_id": item.trajectory_id, **values[0], "model": run.model}]

What :meth:`LLMStage.run` does with them:

1. ``requests(run)`` returns one :class:`Job` per unit: the unit (``item``), its id for the
   quarantine, its requests (zero or more), or a row in ``rejected`` when the unit is
   quarantined without asking (e.g. distill's failed trajectories).
2. :meth:`LLMStage.ask`: when no job has a request the LLM is never started (an empty input
   needs no server). Otherwise it gets ``ctx.llm``, loads the ``off_topic`` encoder up front
   (:func:`pipeline.quality.topic.warm`), and sends every request in one ``complete_json_many``
   call (job order, then request order); each job gets its results in request order.
3. :meth:`LLMStage.collect`: the rejected units' rows first, then per job: a job whose requests
   all succeeded becomes ``format_output(item, values, run)`` (its rows, or one quarantine row
   to reject the unit after all); a job with a failed request becomes the unit's quarantine row
   (the first failed request: reason from :func:`pipeline.quality.reason_of`, raw output kept)
   plus one row of kind ``request`` per further failed request (not a unit: it stays out of the
   count invariant).
4. The :class:`LLMOutput` has ``rows_in`` = number of jobs, every failed result in
   ``failed_requests`` and the counters of :meth:`LLMStage.counters` (by default the
   content-rule record of ``run.tally``).

**Failure policy** (:meth:`LLMStage.failure_facts`, called by the runner once the counts
reconcile): when more units failed at the endpoint (:data:`TRANSPORT_REASONS`) than
``llm.max_endpoint_failure_rate`` allows, the stage fails (:class:`~pipeline.stage.stage.StageFailed`,
nothing written: the endpoint is to blame, not the data). Otherwise every failed request is
recorded (:func:`failed_request_facts`), and the stage is recorded incomplete (a plain rerun
resends exactly those) unless the answers would only fail again (:func:`answers_repeat`: then only
transport failures are retried) or ``llm.retry_failed`` is false (then none is).

A stage whose units are not its jobs (skills: one call is fed by many memories) overrides
:meth:`LLMStage.collect` and keeps the rest. Code that is not a stage (RL skill evolution) can
use :func:`send` and :func:`failure_row` on their own.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pipeline import quality
from pipeline.core.lineage import content_hash
from pipeline.core.records import QuarantineRow
from pipeline.stage.stage import Stage, StageContext, StageFailed, StageOutput, reject
from pipeline.llm.types import JSONRequest, JSONResult
from pipeline.quality import topic


#: Quarantine reasons that mean the endpoint failed, not the data: too many fail the stage.
TRANSPORT_REASONS = ("connection_error", "timeout", "http_error")
MAX_LISTED_FAILED = 1000  # failed request keys listed one by one in a manifest


@dataclass
class LLMOutput(StageOutput):
    """What an LLM stage returns: a :class:`~pipeline.stage.stage.StageOutput` plus
    ``failed_requests``, every request of the run that failed (``JSONResult`` with ``ok=False``,
    first round and follow-ups), which :meth:`LLMStage.failure_facts` records."""
    failed_requests: list[JSONResult] = field(default_factory=list)


@dataclass
class Job:
    """One unit of an LLM stage and the requests asked for it.

    Attributes:
        item: the unit as the stage knows it (a ``Trajectory``, a skills call...); handed back
            to :meth:`LLMStage.format_output`.
        item_id: the unit's id in its quarantine row.
        requests: the requests for this unit, in order (may be empty: e.g. every think of a
            trajectory came from the source, so there is nothing to ask).
        source_uri, line: where the unit came from (copied into its quarantine rows).
        rejected: set when the unit is quarantined before asking (``requests`` must be empty).
        results: the ``JSONResult`` of each request, filled by :func:`send`.
    """
    item: Any
    item_id: str
    requests: list[JSONRequest] = field(default_factory=list)
    source_uri: str = ""
    line: int | None = None
    rejected: QuarantineRow | None = None
    results: list[JSONResult] = field(default_factory=list)

    @property
    def failed(self) -> list[JSONResult]:
        """The results that are not ok, in request order."""
        return [r for r in self.results if not r.ok]

    @property
    def values(self) -> list[Any]:
        """The validated answers, in request order (meaningful when :attr:`failed` is empty)."""
        return [r.value for r in self.results]


@dataclass
class LLMRun:
    """The state of one run of an LLM stage, handed to every hook.

    Attributes:
        ctx: the stage context.
        tally: the content-rule counter and policy gate (``quality.flag_rules``); the answer
            checks built in ``requests`` should gate through it so the manifest counts them.
        jobs: what ``requests`` returned.
        model: the LLM's ``model_id`` once asked; ``""`` when nothing was asked.
        notes: values a stage computes in ``requests`` for its own ``collect``/``counters``.
        followups: jobs of a second round a stage sends after the first (distill's one-step
            retries); their failed results count in :attr:`failed` too.
    """
    ctx: StageContext
    tally: quality.Tally
    jobs: list[Job] = field(default_factory=list)
    model: str = ""
    notes: dict[str, Any] = field(default_factory=dict)
    followups: list[Job] = field(default_factory=list)

    @property
    def failed(self) -> list[JSONResult]:
        """Every failed result of the run (first round, then follow-ups), in request order."""
        return [r for j in [*self.jobs, *self.followups] for r in j.failed]


def send(llm: Any, jobs: list[Job], desc: str) -> None:
    """Send the requests of every job in one ``llm.complete_json_many`` batch, grouped by their
    system message (groups in order of first appearance; job order, then request order, within a
    group), and store each job's results on it, in request order. ``llm`` follows the client contract of
    :mod:`pipeline.llm.types`; it is not called when no job has a request. Raises what the
    client raises (``server.ServerDied``); a bad answer or a failed request is an ``ok=False``
    result, never an exception."""
    requests = [r for j in jobs for r in j.requests]
    # sent grouped by system message (stable): consecutive requests then share their longest
    # prefix, which a llama.cpp server reuses from its KV cache and hosted APIs bill as cached
    first_seen: dict[str, int] = {}
    for k, r in enumerate(requests):
        first_seen.setdefault(_system_text(r), k)
    order = sorted(range(len(requests)), key=lambda k: first_seen[_system_text(requests[k])])
    answered = llm.complete_json_many([requests[k] for k in order], desc=desc) if requests else []
    by_index = dict(zip(order, answered))
    results = iter(by_index[k] for k in range(len(requests)))
    for j in jobs:
        j.results = [next(results) for _ in j.requests]


def _system_text(request: JSONRequest) -> str:
    first = request.messages[0] if request.messages else {}
    return first.get("content", "") if first.get("role") == "system" else ""


def failure_row(stage: str, result: JSONResult, detail: str, item_id: str, source_uri: str = "",
                line: int | None = None, kind: str = "unit") -> QuarantineRow:
    """The quarantine row of a failed request: reason = the content rule's reason or the
    client's error (:func:`pipeline.quality.reason_of`), ``raw`` = the model's last output;
    ``kind``: a ``unit`` (the unit it failed), a ``request`` (a failed request beyond its unit's
    row) or a ``rejected_answer`` (an answer asked again)."""
    return reject(stage, quality.reason_of(result.error, result.detail), detail, item_id, raw=result.raw,
                  source_uri=source_uri, line=line, kind=kind)


def answers_repeat(llm: Any) -> bool:
    """True when the same request gets the same answer: the embedded llama.cpp server
    (:func:`pipeline.llm.provider.uses_embedded`: started by the run, or the Airflow DAG's
    detached one) sampling greedily (``llm.temperature == 0``, fixed ``llm.seed``).
    Then a request whose *answer* failed (cut at max_tokens, not JSON, schema or content rules)
    would only fail again, and only transport failures are worth a retry."""
    from pipeline.llm.provider import uses_embedded
    return uses_embedded(llm) and llm.temperature == 0


def failed_request_facts(failed_requests: list[JSONResult], fp: str, retry: bool = True,
                         only_transport: bool = False) -> dict[str, Any]:
    """The manifest entries that record a stage's failed LLM requests (``JSONResult`` objects).

    Returns ``{"fingerprint": fp, "failed_requests": {...}}`` when the stage counts as complete.
    Otherwise the recorded fingerprint is a hash of ``fp`` and the retried ``(key, reason)`` pairs,
    so that (a) the next plain run finds no match and reruns the stage, sending only the failed
    requests again (the client caches successful answers only), and (b) a later stage built on this
    incomplete artifact is stale once the rerun changes it; then also ``fingerprint_complete``
    (``fp``). ``failed_requests``: ``{total, by_reason, keys (first MAX_LISTED_FAILED, sorted),
    final}``. ``retry=False`` (``llm.retry_failed``) records the failures but keeps ``fp``: the
    stage counts as complete and every failure is final. ``only_transport`` (:func:`answers_repeat`):
    only failures of :data:`TRANSPORT_REASONS` make the stage incomplete; the others are final.
    What a reader says about them: :func:`pipeline.core.manifest.failure_sentence`.
    """
    failed = sorted((r.key, r.error or "llm_failed") for r in failed_requests)
    retried = [f for f in failed if f[1] in TRANSPORT_REASONS] if only_transport else failed
    summary = {"total": len(failed), "by_reason": dict(sorted(Counter(e for _, e in failed).items())),
               "keys": [k for k, _ in failed[:MAX_LISTED_FAILED]],
               "final": len(failed) - len(retried) if retry else len(failed)}
    if not retried or not retry:
        return {"fingerprint": fp, "failed_requests": summary}
    return {"fingerprint": content_hash({"fingerprint": fp, "failed_requests": retried}, n=32),
            "fingerprint_complete": fp, "failed_requests": summary}


def check_endpoint(stage: str, llm: Any, counts: dict[str, Any]) -> None:
    """Raise :class:`~pipeline.stage.stage.StageFailed` when more units of ``counts``
    (:func:`pipeline.core.recorder.counts`) were quarantined for an endpoint failure (connection,
    timeout, HTTP: :data:`TRANSPORT_REASONS`) than ``llm.max_endpoint_failure_rate`` allows: the data
    is not to blame, and nothing is written. ``llm``: the run's ``LLMConfig``."""
    reasons, units_in = counts["quarantine_reasons"], counts["units_in"]
    transport = {r: reasons[r] for r in TRANSPORT_REASONS if reasons.get(r)}
    if sum(transport.values()) > llm.max_endpoint_failure_rate * max(units_in, 1):
        raise StageFailed(
            f"[{stage}] {sum(transport.values())} of {units_in} items failed at the LLM endpoint after "
            f"retries ({', '.join(f'{k}={v}' for k, v in transport.items())}): is "
            f"{llm.base_url or 'the embedded server'} reachable and the model/key right? The stage "
            f"was not written; rerun it (answers already received are cached).")


class LLMStage(Stage):
    """Base of the stages that ask an LLM (module docstring). Implement :meth:`requests` and
    :meth:`format_output`; override :meth:`counters`, :meth:`unit_detail` or :meth:`collect`
    when the defaults do not fit."""
    uses_llm = True

    def requests(self, run: LLMRun) -> list[Job]:
        """One :class:`Job` per unit, in a deterministic order (the order of the requests is
        part of the cache keys and of the rows' order)."""
        raise NotImplementedError

    def format_output(self, item: Any, values: list[Any], run: LLMRun) -> list[dict[str, Any]] | QuarantineRow:
        """The rows for one unit whose requests all succeeded (``values``: the validated answers,
        in request order; empty for a job without requests), or a quarantine row (built with
        :func:`~pipeline.stage.stage.reject`) to reject the unit after all."""
        raise NotImplementedError

    def unit_detail(self, job: Job, result: JSONResult) -> str:
        """Detail of a unit's quarantine row for its first failed request (default: the
        client's detail)."""
        return result.detail

    def counters(self, run: LLMRun, out: StageOutput) -> dict[str, Any]:
        """Manifest counters; by default ``{"quality": ...}``, the content-rule record of
        ``run.tally`` over the jobs and the unit quarantine (:meth:`pipeline.quality.Tally.record`)."""
        return {"quality": run.tally.record(len(run.jobs), Counter(q.reason for q in out.quarantine
                                                                   if q.kind == "unit"))}

    def failure_facts(self, ctx: StageContext, out: LLMOutput, fingerprint: str,
                      counts: dict[str, Any]) -> dict[str, Any]:
        """The LLM failure policy (module docstring): :func:`check_endpoint`, then the failed
        requests of ``out`` recorded by :func:`failed_request_facts` (see
        :meth:`pipeline.stage.stage.Stage.failure_facts`)."""
        llm = ctx.config.llm
        check_endpoint(self.name, llm, counts)
        # answers_repeat only matters for failed requests (and imports the LLM client modules)
        return failed_request_facts(out.failed_requests, fingerprint, llm.retry_failed,
                                    bool(out.failed_requests) and answers_repeat(llm))

    def run(self, ctx: StageContext) -> LLMOutput:
        """:meth:`requests`, :meth:`ask`, :meth:`collect`, then ``failed_requests`` and
        :meth:`counters` on the output (module docstring, steps 1-4); see
        :meth:`~pipeline.stage.stage.Stage.run`."""
        run = LLMRun(ctx, quality.Tally(ctx.config.quality.flag_rules))
        run.jobs = self.requests(run)
        self.ask(run)
        out = self.collect(run)
        out.failed_requests = run.failed
        out.counters = self.counters(run, out)
        return out

    def ask(self, run: LLMRun) -> None:
        """Send the jobs' requests (:func:`send`) unless there are none: then the LLM is not
        started. Sets ``run.model``."""
        if not any(j.requests for j in run.jobs):
            return
        llm = run.ctx.llm
        run.model = llm.model_id
        # load the encoder now, not inside an answer check while other requests are in flight
        topic.warm(run.ctx.config.quality.off_topic_threshold)
        send(llm, run.jobs, self.name)

    def collect(self, run: LLMRun) -> LLMOutput:
        """Rows and quarantine of the jobs (module docstring, step 3): the units rejected before
        asking first, then each answered job's rows or rows of quarantine; ``rows_in`` = number
        of jobs. An override returns an :class:`LLMOutput` too."""
        out = LLMOutput(rows=[], quarantine=[j.rejected for j in run.jobs if j.rejected is not None],
                        rows_in=len(run.jobs))
        for job in run.jobs:
            if job.rejected is not None:
                continue
            if job.failed:
                first, *rest = job.failed
                out.quarantine.append(failure_row(self.name, first, self.unit_detail(job, first), job.item_id,
                                                  job.source_uri, job.line))
                out.quarantine += [failure_row(self.name, r, f"call {r.key} failed: {r.detail}", r.key,
                                               job.source_uri, job.line, kind="request") for r in rest]
            else:
                got = self.format_output(job.item, job.values, run)
                if isinstance(got, QuarantineRow):
                    out.quarantine.append(got)
                else:
                    out.rows += got
        return out

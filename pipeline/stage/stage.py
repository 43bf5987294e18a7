"""The stage contract: one file a newcomer reads to write a stage.

A stage turns the artifacts of earlier stages (or, for ``parse``, input files) into one Parquet
artifact of rows plus a quarantine of the units it could not use. Subclass :class:`Stage`::

    class Shorten(Stage):
        name = "shorten"                      # artifact folder: runs/<run_id>/shorten/
        inputs = ("remove_loops",)            # upstream stages it reads (fingerprinted by content)
        schema = TRAJECTORY_SCHEMA            # pyarrow schema of its rows
        config_sections = ("remove_loops",)   # PipelineConfig sections it reads (fingerprinted)

        def run(self, ctx: StageContext) -> StageOutput:
            rows, rejected = [], []
            for t in ctx.upstream("remove_loops").read_rows():
                if len(t["steps"]) > 50:
                    rejected.append(reject(self.name, "too_long", f"{len(t['steps'])} steps", t["trajectory_id"]))
                else:
                    rows.append(t)
            return StageOutput(rows, rejected, rows_in=len(rows) + len(rejected))

    STAGE = Shorten()                         # the registry picks up the module's STAGE

put it in ``pipeline/stages/shorten.py`` and add its name to ``STAGES`` in ``pipeline/core/layout.py``
(run order). The runner (:mod:`pipeline.engine.runner`) does the rest, the same way for every stage:

* **freshness** before running: every upstream artifact must have been built from the current
  version of its own upstreams, else ``ArtifactError`` (never mix two inputs);
* **fingerprint**: :meth:`Stage.input_facts` (upstream content hashes), the declared config
  sections (+ the result-relevant LLM settings when ``uses_llm``), the SHA-256 of
  :meth:`Stage.prompt_files`, the model id, the package version and the ``version`` of the stage
  and of every stage upstream of it (bump it when the meaning of the stage's output changes:
  the stage and everything downstream rerun, nothing upstream does). When a complete artifact
  exists it is computed before running, and an artifact with the same fingerprint is reused
  (the stage is skipped); otherwise it is computed after running, from
  :meth:`Stage.facts_after_run` (a stage that learned its input facts while reading, as parse
  hashes its files as it reads them, hands those back so nothing is read twice);
* **count invariant** after running: units in = units out + quarantined (``StageOutput``; the
  quarantined are its ``unit`` rows, the rows of other kinds, such as a demotion or a failed
  request, are counted beside them: :func:`pipeline.core.recorder.counts`), else
  :class:`CountMismatch` and nothing is written;
  :meth:`Stage.failure_facts` then records what failed (an LLM stage: its failed requests) or
  refuses the output (:class:`StageFailed`);
* **atomic write** of the Parquet parts and the quarantine, then the manifest, written last by the
  one recorder (:func:`pipeline.core.recorder.record`; a killed process leaves the previous
  artifact or none, never half of one);
* **after the commit** (the atomic write, and on object storage the publication of the manifest):
  :meth:`Stage.after_commit`, where a stage writes what lives outside its run folder (skills: its
  bank as a version of ``<root>/banks``), so nothing is registered for an artifact that was never
  committed.

LLM stages subclass :class:`pipeline.stage.llmstage.LLMStage`, which adds the request/answer loop.

**Shards.** A stage with ``sharded = True`` (a *map* stage: its rows depend on one trajectory at a
time) runs once per shard of a run planned into several shards (:mod:`pipeline.engine.shards`),
with ``ctx.shard`` set; ``ctx.upstream(name)`` then returns that shard of a sharded upstream and
the whole artifact of a global one. The others (*reduces*) run once and read every shard.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator

import pyarrow as pa

from pipeline.core.artifacts import ArtifactStore, StageArtifact
from pipeline.core.config import PipelineConfig
from pipeline.core.recorder import CountMismatch  # noqa: F401 - raised by the counts of every stage
from pipeline.core.records import QuarantineRow


class StageFailed(RuntimeError):
    """A stage could not do its work (e.g. the LLM endpoint is down); nothing is written, so a
    rerun (or an Airflow retry) redoes it, paying only for answers not already cached."""


def reject(stage: str, reason: str, detail: str = "", item_id: str = "", raw: str = "",
           source_uri: str = "", line: int | None = None, kind: str = "unit") -> QuarantineRow:
    """The one way to quarantine a unit: ``reason`` is a short snake_case code counted in the
    manifest (``quarantine_reasons``), ``detail`` a human sentence, ``raw`` what the unit or the
    model's answer was (kept so nothing is lost), ``item_id`` the unit's id (trajectory, memory,
    pair...). ``kind``: what the row counts (:data:`pipeline.core.records.QUARANTINE_KINDS`): a
    ``unit`` by default; a record that is no unit (``item``, ``rejected_answer``, ``request``,
    ``demotion``) goes to the same quarantine but stays out of the count invariant."""
    return QuarantineRow(stage=stage, reason=reason, detail=detail, item_id=item_id, source_uri=source_uri,
                         line=line, raw=raw, kind=kind)


class Stage:
    """Base class of every stage: declare the class attributes, implement :meth:`run`.

    Attributes:
        name: stage and artifact folder name (snake_case).
        inputs: names of the upstream stages read through ``ctx.upstream(name)``; empty for a
            stage that reads input files (then override :meth:`input_facts`).
        schema: ``pyarrow.Schema`` of the output rows.
        uses_llm: the stage calls the LLM (its fingerprint then covers the model and sampling).
        config_sections: the ``PipelineConfig`` sections it reads; only these are fingerprinted,
            so a change elsewhere does not rerun it. ``None`` = the whole config.
        split_files: ``(column, {value: split name})`` to write the rows as Hugging Face split
            files (``data/<split>-NNNNN-of-MMMMM.parquet``) instead of ``part-*.parquet``.
        sharded: a map stage, run per shard in a sharded run (module docstring).
        version: the stage's code version; its author bumps it when the meaning of the output
            changes (a new rule, another row layout). Part of the fingerprint of the stage and of
            every stage downstream, with the package version.
    """
    name: ClassVar[str] = ""
    inputs: ClassVar[tuple[str, ...]] = ()
    schema: ClassVar[pa.Schema]
    uses_llm: ClassVar[bool] = False
    config_sections: ClassVar[tuple[str, ...] | None] = None
    split_files: ClassVar[tuple[str, dict[str, str]] | None] = None
    sharded: ClassVar[bool] = False
    version: ClassVar[str] = "1"

    def prompt_files(self, ctx: "StageContext") -> list[str]:
        """Template/schema files whose bytes shape this stage's output (fingerprinted)."""
        return []

    def input_facts(self, ctx: "StageContext") -> list[dict[str, Any]]:
        """What the stage reads, as fingerprint facts (JSON-ready dicts): by default the content
        hash of each upstream artifact (never its location, so a moved run folder reruns
        nothing). A stage that reads input files overrides it; if it can compute the same facts
        more cheaply while running, it also overrides :meth:`facts_after_run`."""
        return [{"stage": s, **({"shard": ctx.shard} if ctx.reads_shard(s) else {}),
                 "content_sha256": ctx.upstream(s).content_sha256} for s in self.inputs]

    def facts_after_run(self, ctx: "StageContext", out: "StageOutput") -> list[dict[str, Any]]:
        """The input facts of the fingerprint once the stage has run (when no artifact could be
        reused, the fingerprint is computed after the run). Default :meth:`input_facts`; a stage
        that learned them while reading (parse hashes its files as it reads them) returns those
        instead, so nothing is read twice."""
        return self.input_facts(ctx)

    def units_out(self, out: "StageOutput", rows: int) -> int:
        """How many of the stage's units went into its output, for the count invariant (units in
        = units out + quarantined). Default ``rows``, the rows written: one row per unit. A stage
        whose rows are not its units overrides it (skills: its rows are skills, its units the
        memories they were made from)."""
        return rows

    def failure_facts(self, ctx: "StageContext", out: "StageOutput", fingerprint: str,
                      counts: dict[str, Any]) -> dict[str, Any]:
        """The manifest entries that record what failed in this run, given the run's
        ``fingerprint`` and ``counts`` (:func:`pipeline.core.recorder.counts`). Default
        ``{"fingerprint": fingerprint}``: nothing fails without raising. An LLM stage records its
        failed requests (:meth:`pipeline.stage.llmstage.LLMStage.failure_facts`). Raise
        :class:`StageFailed` when the output must not be written at all."""
        return {"fingerprint": fingerprint}

    def reduce_shards(self, ctx: "StageContext", shards: list[StageArtifact]) -> dict[str, bytes | str]:
        """Cross-shard work of a sharded stage, done once all its shards are written (``shards``
        in shard order): extra files for the stage folder (relative name -> content), listed in
        the stage manifest and covered by its content hash. Default: none."""
        return {}

    def after_commit(self, ctx: "StageContext", art: StageArtifact, reused: bool) -> None:
        """Write what outlives the run folder (a shared registry under ``ctx.root``), from the
        committed artifact ``art``. The runner calls it once the artifact is committed, and also
        when it reuses an unchanged one (``reused``), so that a process killed between the commit
        and this call is made good by a plain rerun: it must be idempotent. Not called for the
        shards of a map stage. Default: nothing."""

    def run(self, ctx: "StageContext") -> "StageOutput":
        """Do the work; return rows + quarantine (or a stream of batches). Must not write files:
        the runner writes the artifact. Raise :class:`StageFailed` when
        the work cannot be done at all (e.g. the LLM endpoint is down)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<stage {self.name}>"


@dataclass
class StageOutput:
    """What a stage returns.

    ``quarantine`` holds every row of the quarantine artifact, each with its ``kind``: the
    ``unit`` rows are the quarantined units (the count invariant), the others records beside them
    (a demotion, a failed request...); the runner writes the unit rows first, the others after them
    in the order given. ``units_in`` counts what the stage consumed after any expansion (e.g.
    build_pairs expands trajectories into candidate pairs; default ``rows_in``); how many of those
    ended up used is :meth:`Stage.units_out`. What one stage alone needs lives with it (a subclass:
    parse's input facts, an LLM stage's failed requests, skills' memories used).
    """
    rows: list[dict[str, Any]]
    quarantine: list[QuarantineRow]
    rows_in: int
    units_in: int | None = None
    counters: dict[str, Any] = field(default_factory=dict)
    extra_files: dict[str, bytes | str] = field(default_factory=dict)
    # Streaming alternative to rows/quarantine: an iterator of (rows, quarantine) batches (see
    # ArtifactStore.write_stream for the accepted forms, incl. worker-encoded Parquet parts). The
    # stage may update rows_in/units_in/counters while it is consumed; the runner reads them
    # only after the last batch.
    stream: Iterator[tuple[Any, Any]] | None = None


@dataclass
class StageResult:
    """Small reference returned to callers (and pushed to Airflow XCom)."""
    stage: str
    uri: str
    rows: int
    fingerprint: str
    skipped: bool = False
    manifest: dict[str, Any] = field(default_factory=dict)

    def xcom(self) -> dict[str, Any]:
        """``{uri, rows, fingerprint}`` (:data:`pipeline.core.manifest.XCOM_KEYS`): what a DAG task returns."""
        return {"uri": self.uri, "rows": self.rows, "fingerprint": self.fingerprint}


@dataclass
class StageContext:
    """Everything a stage may use. Upstream artifacts are read on demand."""
    store: ArtifactStore
    config: PipelineConfig
    input_path: str = ""
    env: str = "auto"
    llm_factory: Callable[[], Any] | None = None
    _llm: Any = None
    shard: str | None = None  # the shard a map stage is running on (None: the whole run)
    plan: Any = None  # the run's ShardPlan (pipeline.engine.shards) when it has more than one shard
    # the root the run was given (a folder or an object-storage URI such as s3://bucket/prefix);
    # "" = the store's own root. Shared registries (the skill bank history) live there.
    root: str = ""
    # whether a stage runs per shard (Stage.sharded), handed in by the runner, which knows the
    # registry (the contract stays below the stages it describes); asked only in a shard's
    # context, so a run of one shard imports no stage it does not run
    is_sharded: Callable[[str], bool] = lambda stage: False

    def reads_shard(self, stage: str) -> bool:
        """True when ``upstream(stage)`` resolves to this context's shard of ``stage``: this
        context runs one shard, and ``stage`` runs per shard (:attr:`is_sharded`)."""
        return bool(self.shard) and self.is_sharded(stage)

    def upstream(self, stage: str) -> StageArtifact:
        """The artifact of ``stage``: this shard of it when both run per shard, else the whole
        (all shards). Raises ``ArtifactError`` when it is missing or incomplete."""
        return self.store.require(stage, self.shard if self.reads_shard(stage) else None)

    @property
    def llm(self):
        """The LLM client; the embedded server is started on first use only."""
        if self._llm is None:
            if self.llm_factory is None:
                raise RuntimeError("this run has no LLM endpoint configured")
            self._llm = self.llm_factory()
        return self._llm

    def llm_snapshot(self) -> dict[str, int] | None:
        """The LLM client's cumulative call counters, or ``None`` when no client was opened
        yet (this never starts one)."""
        return None if self._llm is None else self._llm.stats_snapshot()

    def llm_stats(self, since: dict[str, int] | None) -> dict[str, int]:
        """The LLM client's call counters since the :meth:`llm_snapshot` ``since`` (``None``:
        since the client started); ``{}`` when no client was opened."""
        return {} if self._llm is None else self._llm.stats_delta(since)

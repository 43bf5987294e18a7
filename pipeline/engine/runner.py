"""Run one stage or the whole pipeline: the single entry point of the CLI and the Airflow DAG.

Stages are :class:`~pipeline.stage.stage.Stage` objects from the registry
(:func:`pipeline.stages.get_stage`); the contract they implement, and what the runner does for
each of them (freshness check, fingerprint and skip, count invariant, atomic write), is
described in :mod:`pipeline.stage.stage`.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable, Iterator

from pipeline import __version__
from pipeline.core import recorder
from pipeline.core.artifacts import ArtifactError, ArtifactStore  # noqa: F401 - raised to callers
from pipeline.core.config import PipelineConfig, to_dict
from pipeline.core.freshness import check_fresh
from pipeline.core.fsutil import sha256_file
from pipeline.core.lineage import content_hash
from pipeline.core.manifest import failure_sentence
from pipeline.core.records import to_table
from pipeline.llm.accounting import stage_figures
from pipeline.stage.stage import (CountMismatch, Stage, StageContext, StageFailed, StageOutput,  # noqa: F401
                                 StageResult)
from pipeline.stages import STAGES, get_stage

def fingerprint(ctx: StageContext, name: str, model_id: str = "",
                inputs: list[dict[str, Any]] | None = None) -> tuple[str, dict[str, Any]]:
    """Stage fingerprint and the facts it was computed from (stored in the manifest).

    ``inputs``: the stage's input facts when it reported them itself
    (:attr:`~pipeline.stage.stage.StageOutput.input_facts`); else :meth:`Stage.input_facts`.
    Raises ``ValueError`` for an unknown stage, ``ArtifactError`` for a missing upstream."""
    stage = get_stage(name)
    # keyed by path relative to the project (two templates may share a file name)
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    prompts = {os.path.relpath(os.path.abspath(p), top): sha256_file(p) for p in stage.prompt_files(ctx)}
    facts = {
        "stage": stage.name,
        "inputs": inputs if inputs is not None else stage.input_facts(ctx),
        "env": ctx.env,
        "config": _config_facts(ctx.config, stage),
        "prompts": prompts,
        "model": model_id if stage.uses_llm else "",
        "code_version": __version__,
        "stage_versions": stage_versions(stage.name),
        **({"shard": ctx.shard} if ctx.shard and stage.sharded else {}),
    }
    return content_hash(facts, n=32), facts


def stage_versions(name: str) -> dict[str, str]:
    """``{stage: version}`` of stage ``name`` and of every stage upstream of it (its inputs,
    transitively): what a version bump invalidates is the stage and everything downstream."""
    out: dict[str, str] = {}
    todo = [name]
    while todo:
        s = get_stage(todo.pop())
        if s.name not in out:
            out[s.name] = s.version
            todo += list(s.inputs)
    return dict(sorted(out.items()))


def _config_facts(config: PipelineConfig, stage: Stage) -> dict[str, Any]:
    """The config a stage's fingerprint covers: only the sections it declares in
    ``config_sections`` (so changing ``build_pairs.max_tokens`` reruns build_pairs and, through
    its input fingerprint, export, but not the LLM stages before it), plus the result-relevant
    LLM settings for LLM stages. The LLM transport settings (URL, concurrency, timeouts) do not
    change results: they stay out, so pointing at a replica of the same model reruns nothing.
    A stage without ``config_sections`` gets the whole config (safe default)."""
    full = to_dict(config)
    sections = stage.config_sections
    facts = full if sections is None else {s: full[s] for s in sections}
    if stage.uses_llm or sections is None:
        facts["llm"] = {k: full["llm"][k] for k in ("model", "temperature", "max_tokens", "seed")}
    return facts


def _reusable(stage: Stage, ctx: StageContext, model_id: str, force: bool,
              log: Callable[[str], None]) -> tuple[StageResult | None, str, dict[str, Any]]:
    """``(result of the existing artifact when it can be reused, fingerprint, facts)``.

    With nothing to reuse (``force``, or no artifact yet) the fingerprint is left to after the
    run (``("", {})``): a stage that reports its input facts then reads its inputs only once."""
    existing = ctx.store.load(stage.name, ctx.shard)
    label = f"{stage.name} {ctx.shard}" if ctx.shard else stage.name
    lost = [f for f in existing.manifest.get("files", []) if not os.path.exists(os.path.join(existing.path, f))] \
        if existing is not None else []
    if lost:  # deleted parts: rebuilt by a plain rerun, not skipped (its readers would fail on it)
        log(f"[{label}] {len(lost)} of its files are missing ({lost[0]}, ...): rebuilding it")
        existing = None
    if force or existing is None:
        return None, "", {}
    fp, facts = fingerprint(ctx, stage.name, model_id)
    if existing.fingerprint == fp:
        log(f"[{label}] unchanged (fingerprint {fp[:12]}): skipped")
        return StageResult(stage.name, existing.path, existing.manifest["counts"]["out"], fp, True,
                           existing.manifest), fp, facts
    if existing.manifest.get("fingerprint_complete") == fp:
        n_failed = existing.manifest["failed_requests"]["total"]
        log(f"[{stage.name}] {n_failed} LLM request(s) failed last time: rerunning to retry them "
            "(answers received before come from the LLM cache)")
    return None, fp, facts


def _manifest(stage: Stage, ctx: StageContext, out: StageOutput, fp: str, facts: dict[str, Any],
              rows: int, quarantine: recorder.QuarantineTally, llm_stats: dict[str, int],
              wall_s: float) -> dict[str, Any]:
    """The stage manifest as the stage reports it (the recorder adds status, files, written_at,
    content_sha256): the fingerprint facts, the counts of ``rows`` written and the ``quarantine``
    (:func:`pipeline.core.recorder.counts`), what failed (:meth:`Stage.failure_facts`), counters,
    wall time and LLM figures. Raises :class:`CountMismatch` when units in != units out +
    quarantined, :class:`StageFailed` when the stage refuses its output."""
    counts = recorder.counts(out.rows_in, rows, quarantine, units_in=out.units_in,
                             units_out=stage.units_out(out, rows), where=stage.name)
    return {
        "stage": stage.name, "run_id": ctx.store.run_id, **facts,
        **stage.failure_facts(ctx, out, fp, counts),
        "input_path": ctx.input_path if not stage.inputs else "",
        "counts": counts, "counters": out.counters, "wall_s": wall_s,
        "llm": stage_figures(llm_stats, rows, ctx.config.llm) if llm_stats else llm_stats,
    }


def run_stage(name: str, ctx: StageContext, model_id: str = "", force: bool = False,
              log: Callable[[str], None] = print, commit: Callable[[], None] | None = None) -> StageResult:
    """Run stage ``name`` of the run in ``ctx`` unless an identical artifact exists.

    Once the artifact is written (or reused), ``commit`` is called when given (on object storage:
    publishing it, :meth:`~pipeline.engine.remote.StageHooks.after`), then the stage's
    :meth:`~pipeline.stage.stage.Stage.after_commit` (not for one shard of a map stage). Nothing
    of either happens when the stage fails or its counts do not reconcile.

    Raises:
        ValueError: unknown stage name.
        ArtifactError: an upstream stage has no complete artifact, or a stale one.
        CountMismatch: the stage's counts do not reconcile (a bug: nothing is written).
        StageFailed: the stage could not do its work (nothing is written).
    """
    stage = get_stage(name)
    for s in stage.inputs:  # never build on a stale upstream artifact
        check_fresh(ctx.store, s, shard=ctx.shard if ctx.reads_shard(s) else None)
    reused, fp, facts = _reusable(stage, ctx, model_id, force, log)
    if reused is not None:
        _after_commit(stage, ctx, True, commit)
        return reused
    t0 = time.monotonic()
    llm_before = ctx.llm_snapshot()
    out: StageOutput = stage.run(ctx)

    def finish(n_rows: int, quarantine: recorder.QuarantineTally) -> tuple[dict[str, Any], dict[str, bytes | str]]:
        nonlocal fp, facts
        if not fp:  # nothing could be reused: fingerprinted now, from what the stage reports
            fp, facts = fingerprint(ctx, stage.name, model_id, inputs=stage.facts_after_run(ctx, out))
        llm_stats = ctx.llm_stats(llm_before) if stage.uses_llm else {}
        manifest = _manifest(stage, ctx, out, fp, facts, n_rows, quarantine, llm_stats,
                             round(time.monotonic() - t0, 3))
        return manifest, out.extra_files

    if out.stream is not None:  # large stages: bounded memory, rows never all in memory
        art = ctx.store.write_stream(stage.name, stage.schema, out.stream, finish, shard=ctx.shard)
    else:
        # the unit rows first, then the other records (requests, demotions...) in the stage's order
        quarantine = [q for q in out.quarantine if q.kind == "unit"] + [q for q in out.quarantine if q.kind != "unit"]
        manifest, extra = finish(len(out.rows), recorder.QuarantineTally().add_rows(quarantine))
        art = ctx.store.write(stage.name, to_table(out.rows, stage.schema), quarantine, manifest, extra,
                              split_files=stage.split_files, shard=ctx.shard)
    _log_written(f"{stage.name} {ctx.shard}" if ctx.shard else stage.name, art.manifest, log)
    _after_commit(stage, ctx, False, commit)
    return StageResult(stage.name, art.path, art.manifest["counts"]["out"], art.fingerprint, False, art.manifest)


def _after_commit(stage: Stage, ctx: StageContext, reused: bool, commit: Callable[[], None] | None) -> None:
    """Commit the artifact beyond this machine (``commit``), then let the stage write its
    registries (:meth:`Stage.after_commit`; the whole stage only, never one shard)."""
    if commit is not None:
        commit()
    if ctx.shard is None:
        stage.after_commit(ctx, ctx.store.require(stage.name), reused)


def _log_written(name: str, manifest: dict[str, Any], log: Callable[[str], None]) -> None:
    c = manifest["counts"]
    units = f" (units={c['units_in']})" if c.get("units_in") not in (None, c["in"]) else ""  # e.g. split: instances
    log(f"[{name}] in={c['in']}{units} out={c['out']} quarantined={c['quarantined']} "
        f"{c['quarantine_reasons'] or ''} ({manifest['wall_s']:.1f}s)")
    sentence = failure_sentence(manifest)
    if sentence:
        log(f"[{name}] {sentence} (each one's raw output is quarantined)")


def stage_is_sharded(name: str) -> bool:
    """Whether the registry's stage ``name`` runs per shard (a map stage): what a context needs to
    resolve an upstream to its own shard (:meth:`StageContext.reads_shard`). Imports the stage's
    module on first use only."""
    return get_stage(name).sharded


def summary_rows(store: ArtifactStore, stages=STAGES) -> list[dict[str, Any]]:
    """One dict per written stage for the summary table (from the manifests on disk)."""
    rows = []
    for s in stages:
        art = store.load(s)
        if art is None:
            continue
        m = art.manifest
        rows.append({"stage": s, **m["counts"], "llm": m.get("llm", {}), "wall_s": m.get("wall_s", 0.0),
                     "path": art.path})
    return rows


def run_pipeline(root: str, run_id: str, input_path: str, config: PipelineConfig, env: str = "auto",
                 stages: tuple[str, ...] | list[str] | None = None, force: bool = False,
                 log: Callable[[str], None] = print, shards: int | None = None) -> list[StageResult]:
    """Run ``stages`` (default: all, in order) of run ``run_id`` under ``root`` (a folder or an
    fsspec URI: :func:`pipeline.engine.remote.open_root`).

    Later stages read earlier stages' artifacts from the same run, so ``stages=["distill"]``
    reruns only distillation. The LLM (embedded server unless ``config.llm.base_url``) is
    opened lazily and closed at the end.

    ``shards``: how many shards the map stages run in (:func:`pipeline.engine.shards.plan_run`:
    ``None`` keeps the run's plan, ``0`` sizes it from the input). In a sharded run a map stage
    runs shard after shard (each skipped when unchanged) and is then collected; a reduce reads
    every shard. The result of a map stage is its stage-level reference.

    The whole call holds the run's lock (:mod:`pipeline.engine.runlock`): a second process on the same
    run id gets :class:`~pipeline.engine.runlock.RunLocked` at once. Under the lock, each stage's
    temporary folders left by a killed process are removed before it runs.

    Raises ``ValueError`` for an invalid run id (:func:`check_run_id`), an unknown stage or a
    shard count the run's plan cannot take.
    """
    from pipeline.engine.shards import plan_run

    check_run_id(run_id)
    # fail fast on a typo; old stage names map to the new ones; run order whatever the given order
    names = sorted({get_stage(n).name for n in (stages or STAGES)}, key=STAGES.index)
    chosen = [get_stage(n) for n in names]
    results = []
    with _session(root, run_id, input_path, config, env, chosen, None) as (ctx, model, hooks):
        ctx.plan = plan_run(ctx.store, input_path, shards, "parse" in names, log)
        for stage in chosen:
            results.append(_run_unit(stage, ctx, model, force, log, hooks))
    return results


@contextlib.contextmanager
def _session(root: str, run_id: str, input_path: str, config: PipelineConfig, env: str, chosen: list[Stage],
             unit: str | None) -> Iterator[tuple[StageContext, str, Any]]:
    """``(context, model id, hooks)`` for work on run ``run_id``, under the run's exclusive lock
    (``unit`` None: a whole CLI run) or its shared lock plus ``unit``'s own (an orchestrator task)."""
    from pipeline.llm.provider import llm_factory, model_id_for
    from pipeline.engine.remote import open_root
    from pipeline.engine.runlock import run_lock, task_lock

    with open_root(root, run_id) as (local_root, hooks):
        store = ArtifactStore(local_root, run_id)
        lock = run_lock(store.run_dir, run_id) if unit is None else task_lock(store.run_dir, unit, run_id)
        with lock, contextlib.ExitStack() as stack:
            ctx = StageContext(store, config, input_path=input_path, env=env,
                               llm_factory=llm_factory(config.llm, store.run_dir, stack), root=root,
                               is_sharded=stage_is_sharded)
            yield ctx, model_id_for(config.llm) if any(s.uses_llm for s in chosen) else "", hooks


def _run_unit(stage: Stage, ctx: StageContext, model: str, force: bool, log: Callable[[str], None],
              hooks) -> StageResult:
    """Run ``stage`` for the whole run: each shard then the collect step for a map stage of a
    sharded run; else (after collecting its sharded upstreams) the stage itself."""
    if ctx.plan is not None and stage.sharded:
        done = [_run_shard(stage, ctx, sid, model, force, log, hooks) for sid in ctx.plan.ids]
        return _collect_unit(stage.name, ctx, log, hooks, skipped=all(r.skipped for r in done))
    if ctx.plan is not None:
        for up in stage.inputs:
            if get_stage(up).sharded:
                _collect_unit(up, ctx, log, hooks)
    remove_stale_temp(ctx.store, stage.name, log)
    hooks.before(stage.name)
    return run_stage(stage.name, ctx, model_id=model, force=force, log=log, commit=lambda: hooks.after(stage.name))


def _run_shard(stage: Stage, ctx: StageContext, shard: str, model: str, force: bool,
               log: Callable[[str], None], hooks) -> StageResult:
    """Run shard ``shard`` of map stage ``stage`` (``ctx.shard`` is set for the call only: the
    context keeps its one LLM client across shards)."""
    remove_stale_temp(ctx.store, stage.name, log, shard=shard)
    hooks.before(stage.name, shard)
    ctx.shard = shard
    try:
        result = run_stage(stage.name, ctx, model_id=model, force=force, log=log)
    finally:
        ctx.shard = None
    hooks.after(stage.name, shard)
    return result


def _collect_unit(name: str, ctx: StageContext, log: Callable[[str], None], hooks,
                  skipped: bool = True) -> StageResult:
    """The collect step of sharded stage ``name`` (:func:`pipeline.engine.shards.collect`)."""
    from pipeline.engine.shards import collect
    hooks.before(name)
    art = collect(ctx, name, log)
    hooks.after(name)
    return StageResult(name, art.path, art.manifest["counts"]["out"], art.fingerprint, skipped, art.manifest)


def remove_stale_temp(store: ArtifactStore, stage: str, log: Callable[[str], None] = print,
                      shard: str | None = None) -> list[str]:
    """Remove ``.<stage>.tmp-*`` / ``.<stage>.old-*`` folders of ``store``'s run (left when a process
    was killed inside ``ArtifactStore._transaction``), and those of its shards
    (``.<stage>.shard-NNNNN.tmp-*``); only those of ``shard`` when given. Returns their names.

    Only safe while holding the run lock (:func:`run_pipeline` does), or, for one shard, that
    shard's task lock: then no live process can be writing into them."""
    import shutil
    if not os.path.isdir(store.run_dir):
        return []
    label = f".{stage}.{shard}" if shard else f".{stage}"

    def stale(f: str) -> bool:
        if f.startswith((f"{label}.tmp-", f"{label}.old-")):
            return True
        rest = f[len(label) + 1:] if not shard and f.startswith(f"{label}.") else ""
        return rest.startswith("shard-") and (".tmp-" in rest or ".old-" in rest)

    found = sorted(f for f in os.listdir(store.run_dir) if stale(f) and os.path.isdir(os.path.join(store.run_dir, f)))
    for f in found:
        shutil.rmtree(os.path.join(store.run_dir, f), ignore_errors=True)
    if found:
        log(f"[{stage}] removed {len(found)} temporary folder(s) left by a killed run: {', '.join(found)}")
    return found


def _task_config(config_path: str | None, llm_base_url: str, llm_model: str, llm_mode: str = "") -> PipelineConfig:
    from pipeline.runconfig import load_run_config
    cfg = load_run_config(config_path)
    if llm_base_url:
        cfg.llm.base_url = llm_base_url
    if llm_model:
        cfg.llm.model = llm_model
    if llm_mode:
        cfg.llm.mode = llm_mode
    return cfg


def run_task(stage: str, *, root: str, run_id: str, input_path: str = "", env: str = "auto",
             config_path: str | None = None, llm_base_url: str = "", llm_model: str = "",
             shard: str | None = None, log: Callable[[str], None] = print, llm_mode: str = "") -> dict[str, Any]:
    """Run one stage (or one shard of a map stage) for an orchestrator task and return the small
    XCom reference ``{uri, rows, fingerprint}``. Same code path as ``skillpipe run --stages <stage>``.

    Uses the run's stored shard plan (:func:`plan_task` writes it). With ``shard``: that shard of
    map stage ``stage`` (in a one-shard run: the stage itself, for the first shard). Without: a
    reduce (after collecting its sharded upstreams), or the collect step of a map stage (its
    shards must be complete: ``ArtifactError`` otherwise). Holds the run's lock shared and the
    task's own exclusively (:func:`pipeline.engine.runlock.task_lock`), so the mapped tasks of one
    run work in parallel and a duplicate of one task fails with ``RunLocked``. ``llm_mode``
    (``online`` | ``batch``; empty: the config's) sets ``llm.mode``."""
    from pipeline.engine.shards import load_plan
    st = get_stage(stage)
    unit = f"{st.name}.{shard}" if shard else st.name
    cfg = _task_config(config_path, llm_base_url, llm_model, llm_mode)
    with _session(root, run_id, input_path, cfg, env, [st], unit) as (ctx, model, hooks):
        plan = load_plan(ctx.store.run_dir)
        ctx.plan = plan if plan is not None and plan.sharded else None
        if ctx.plan is not None and st.sharded:
            result = _run_shard(st, ctx, shard, model, False, log, hooks) if shard else _collect_unit(st.name, ctx, log, hooks)
        elif st.sharded and not shard:  # one-shard run: the stage was written by its only shard task
            hooks.before(st.name)  # on object storage: pulls it (this worker may not have run that task)
            art = ctx.store.require(st.name)
            hooks.after(st.name)
            result = StageResult(st.name, art.path, art.manifest["counts"]["out"], art.fingerprint, True)
        else:
            result = _run_unit(st, ctx, model, False, log, hooks)
        ref = result.xcom()
        ref["uri"] = hooks.uri(ref["uri"])  # object storage: the remote URI, not this worker's mirror
    return ref


def plan_task(*, root: str, run_id: str, input_path: str, shards: int = 0,
              log: Callable[[str], None] = print) -> list[str]:
    """Plan run ``run_id``'s input into ``shards`` shards (0: automatic) for an orchestrator and
    return the shard ids (``["shard-00000", ...]``, the list mapped tasks expand over). Holds
    the run's exclusive lock while it plans. Raises ``FileNotFoundError`` for a missing input."""
    from pipeline.engine.remote import open_root
    from pipeline.engine.runlock import run_lock
    from pipeline.core.layout import shard_id
    from pipeline.engine.shards import load_plan, plan_run
    check_run_id(run_id)
    with open_root(root, run_id) as (local_root, hooks):
        store = ArtifactStore(local_root, run_id)
        with run_lock(store.run_dir, run_id):
            plan_run(store, input_path, shards, True, log)
            plan = load_plan(store.run_dir)
    return plan.ids if plan is not None else [shard_id(0)]


MAX_RUN_ID = 128  # bytes (UTF-8); a folder name may have 255 (NAME_MAX): room to spare


def check_run_id(run_id: str) -> str:
    """``run_id`` if it is a usable run folder name, else ``ValueError`` with a one-line reason.

    Allowed: 1..MAX_RUN_ID bytes of letters, digits, ``-``, ``_``, ``.``, not starting with ``.`` (the same
    alphabet :class:`~pipeline.core.artifacts.ArtifactStore` enforces), so no id can leave ``runs/``
    (``..``, ``/``) or fail at ``mkdir`` with "File name too long"."""
    if len(run_id.encode("utf-8")) > MAX_RUN_ID:
        raise ValueError(f"run id is {len(run_id.encode('utf-8'))} bytes long; the most is {MAX_RUN_ID}")
    if not run_id or run_id.startswith(".") or not all(c.isalnum() or c in "-_." for c in run_id):
        raise ValueError(f"invalid run id {run_id[:40]!r}: use letters, digits, '-', '_' and '.', "
                         "not starting with '.'")
    return run_id


def safe_run_id(raw: str) -> str:
    """Map an orchestrator run id (e.g. ``manual__2026-11-30T10:00:00+00:00``) to a folder-safe id
    that :func:`check_run_id` accepts (a longer one is cut and suffixed with a hash of the whole)."""
    safe = "".join(c if (c.isalnum() or c in "-_.") else "-" for c in raw).strip(".-") or "default"
    if len(safe.encode("utf-8")) > MAX_RUN_ID:
        head = safe.encode("utf-8")[:MAX_RUN_ID - 13].decode("utf-8", errors="ignore")  # room for "-" + 12 hex
        safe = f"{head.rstrip('.-')}-{content_hash(raw, n=12)}"
    return safe

"""Run one stage or the whole pipeline: the single entry point of the CLI and the Airflow DAG.

A stage module (``pipeline/stages/<name>.py``) defines::

    NAME: str                      # e.g. "remove_loops"
    INPUTS: tuple[str, ...]        # upstream stage names it reads
    SCHEMA: pyarrow.Schema         # of its output rows
    USES_LLM: bool
    CONFIG: tuple[str, ...]        # PipelineConfig sections it reads (only these are fingerprinted)
    def prompt_files(ctx) -> list[str]       # template files hashed into the fingerprint
    def run(ctx: StageContext) -> StageOutput

The runner computes the stage fingerprint *before* running (inputs + config + prompt templates
+ model + code version); when a complete artifact with the same fingerprint exists the stage is
skipped. After running it checks the count invariant (units in = units out + quarantined), and
writes Parquet, quarantine and manifest atomically.
"""
from __future__ import annotations

import importlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from pipeline import __version__
from pipeline.core.artifacts import ArtifactError, ArtifactStore, EncodedPart, StageArtifact
from pipeline.core.config import PipelineConfig, to_dict
from pipeline.core.fsutil import sha256_file
from pipeline.core.lineage import content_hash, input_sha256
from pipeline.core.records import QuarantineRow, to_table
from pipeline.core.stage import StageContext, StageOutput, StageResult
from pipeline.stages import STAGES

MAX_LISTED_INPUTS = 1000  # input files listed one by one in the parse manifest


class CountMismatch(RuntimeError):
    """A stage lost or invented rows: units in != units out + quarantined."""


class StageFailed(RuntimeError):
    """A stage could not do its work (e.g. the LLM endpoint is down); nothing is written, so a
    rerun (or an Airflow retry) redoes it, paying only for answers not already cached."""


#: Quarantine reasons that mean the endpoint failed, not the data: too many fail the stage.
TRANSPORT_REASONS = ("connection_error", "timeout", "http_error")
MAX_LISTED_FAILED = 1000  # failed request keys listed one by one in a manifest


def failed_request_facts(out: "StageOutput", fp: str, retry: bool = True) -> dict[str, Any]:
    """The manifest entries that record a stage's failed LLM requests (issue 14, hole 3).

    Returns ``{"fingerprint": fp}`` when every request succeeded. Otherwise the recorded
    fingerprint is a hash of ``fp`` and the failed ``(key, reason)`` pairs, so that (a) the next
    plain run finds no match and reruns the stage, sending only the failed requests again (the
    client caches successful answers only), and (b) a later stage built on this incomplete
    artifact is stale once the rerun changes it. Then also ``fingerprint_complete`` (``fp``) and
    ``failed_requests``: ``{total, by_reason, keys (first MAX_LISTED_FAILED, sorted),
    quarantine_rows (request rows beyond the units' own rows)}``. ``out.failed_requests`` holds
    ``JSONResult`` objects (``key``, ``error``). ``retry=False`` (``llm.retry_failed``) records
    the failures but keeps ``fp``: the stage counts as complete.
    """
    failed = sorted((r.key, r.error or "llm_failed") for r in out.failed_requests)
    summary = {"total": len(failed), "by_reason": dict(sorted(Counter(e for _, e in failed).items())),
               "keys": [k for k, _ in failed[:MAX_LISTED_FAILED]], "quarantine_rows": len(out.request_quarantine)}
    if not failed or not retry:
        return {"fingerprint": fp, "failed_requests": summary}
    return {"fingerprint": content_hash({"fingerprint": fp, "failed_requests": failed}, n=32),
            "fingerprint_complete": fp, "failed_requests": summary}


def stage_module(name: str):
    if name not in STAGES:
        raise ValueError(f"unknown stage {name!r}; stages: {', '.join(STAGES)}")
    return importlib.import_module(f"pipeline.stages.{name}")


def check_fresh(store: ArtifactStore, stage: str, seen: set[str] | None = None) -> None:
    """Raise ``ArtifactError`` when ``stage``'s artifact (or an ancestor's) was built from an
    upstream artifact that has since been rewritten, e.g. parse rerun on a new input but dedupe
    not: running a later stage on it would silently mix two inputs."""
    seen = seen if seen is not None else set()
    if stage in seen:
        return
    seen.add(stage)
    art = store.require(stage)
    for inp in art.manifest.get("inputs", []):
        # "stage" + "content_sha256" since fingerprints name no location; "uri" + "fingerprint" before
        up = inp.get("stage") or os.path.basename(os.path.normpath(inp.get("uri", "")))
        key = "content_sha256" if "content_sha256" in inp else "fingerprint"
        if key not in inp or up not in STAGES:
            continue
        current = store.require(up)
        now = current.content_sha256 if key == "content_sha256" else current.fingerprint
        if now != inp[key]:
            raise ArtifactError(
                f"stage '{stage}' of run {store.run_id} is stale: it was built from '{up}' {inp[key][:12]} "
                f"but '{up}' is now {now[:12]}; rerun from '{stage}' on "
                f"(e.g. --stages {','.join(STAGES[STAGES.index(stage):])}) or the whole run")
        check_fresh(store, up, seen)


def _input_fingerprint(ctx: StageContext, mod) -> list[dict[str, str]]:
    for s in mod.INPUTS:  # never build on a stale upstream artifact
        check_fresh(ctx.store, s)
    if not mod.INPUTS:  # parse reads files
        from pipeline.formats.discover import list_input_files
        # One digest over (relative path, sha256) of every file: constant memory however many
        # files; the per-file list is kept in the manifest only for small inputs.
        import hashlib
        root = ctx.input_path if os.path.isdir(ctx.input_path) else os.path.dirname(ctx.input_path)
        digest, listing, n = hashlib.sha256(), [], 0
        for p in list_input_files(ctx.input_path):  # serial: threads only fight over the GIL here
            rel, sha = os.path.relpath(p, root), input_sha256(p)
            digest.update(f"{rel}\0{sha}\n".encode())
            n += 1
            if n <= MAX_LISTED_INPUTS:
                listing.append({"uri": rel, "sha256": sha})
        return [{"files": n, "sha256": digest.hexdigest(), "listed": listing if n <= MAX_LISTED_INPUTS else []}]
    # What upstream artifacts hold, not where they are: a moved run folder or another --root
    # keeps every fingerprint (and an upstream rerun that wrote the same bytes reruns nothing).
    return [{"stage": s, "content_sha256": ctx.upstream(s).content_sha256} for s in mod.INPUTS]


def fingerprint(ctx: StageContext, name: str, model_id: str = "",
                inputs: list[dict[str, Any]] | None = None) -> tuple[str, dict[str, Any]]:
    """Stage fingerprint and the facts it was computed from (stored in the manifest).

    ``inputs`` replaces the input fingerprint when the stage computed it itself (parse hashes
    its files in its workers while reading them; the value is the same)."""
    mod = stage_module(name)
    # keyed by path relative to the project (two templates may share a file name)
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    prompts = {os.path.relpath(os.path.abspath(p), top): sha256_file(p) for p in mod.prompt_files(ctx)}
    facts = {
        "stage": name,
        "inputs": inputs if inputs is not None else _input_fingerprint(ctx, mod),
        "env": ctx.env,
        "config": _config_facts(ctx.config, mod),
        "prompts": prompts,
        "model": model_id if mod.USES_LLM else "",
        "code_version": __version__,
    }
    return content_hash(facts, n=32), facts


def _config_facts(config: PipelineConfig, mod) -> dict[str, Any]:
    """The config a stage's fingerprint covers: only the sections it declares in ``CONFIG`` (so
    changing ``build_pairs.max_tokens`` reruns validate and, through its input fingerprint, export,
    but not the LLM stages before it), plus the result-relevant
    LLM settings for LLM stages. The LLM transport settings (URL, concurrency, timeouts) do not
    change results: they stay out, so pointing at a replica of the same model reruns nothing.
    A stage module without ``CONFIG`` gets the whole config (safe default)."""
    full = to_dict(config)
    sections = getattr(mod, "CONFIG", None)
    facts = full if sections is None else {s: full[s] for s in sections}
    if mod.USES_LLM or sections is None:
        facts["llm"] = {k: full["llm"][k] for k in ("model", "temperature", "max_tokens", "seed")}
    return facts


def run_stage(name: str, ctx: StageContext, model_id: str = "", force: bool = False,
              log: Callable[[str], None] = print) -> StageResult:
    """Run stage ``name`` of the run in ``ctx`` unless an identical artifact exists.

    Raises:
        ArtifactError: an upstream stage has no complete artifact.
        CountMismatch: the stage's counts do not reconcile (a bug: nothing is written).
    """
    mod = stage_module(name)
    existing = ctx.store.load(name)
    # A stage that reports its own input fingerprint (parse) need not hash its inputs up front
    # when nothing could be skipped anyway: one read of every file instead of two.
    deferred = getattr(mod, "REPORTS_INPUT_FINGERPRINT", False) and (force or existing is None)
    fp, facts = "", {}
    if not deferred:
        fp, facts = fingerprint(ctx, name, model_id)
        if existing and existing.fingerprint == fp and not force:
            log(f"[{name}] unchanged (fingerprint {fp[:12]}): skipped")
            return StageResult(name, existing.path, existing.manifest["counts"]["out"], fp, True, existing.manifest)
        if existing and existing.manifest.get("fingerprint_complete") == fp and not force:
            n_failed = existing.manifest["failed_requests"]["total"]
            log(f"[{name}] {n_failed} LLM request(s) failed last time: rerunning to retry them "
                "(answers received before come from the LLM cache)")

    t0 = time.monotonic()
    llm_before = ctx._llm.stats_snapshot() if (mod.USES_LLM and ctx._llm is not None) else None
    out: StageOutput = mod.run(ctx)

    def finish(n_rows: int, n_quarantined: int) -> tuple[dict[str, Any], dict[str, bytes | str]]:
        nonlocal fp, facts
        reported = out.counters.pop("input_fingerprint", None)
        if deferred:
            fp, facts = fingerprint(ctx, name, model_id, inputs=reported)
        units_in = out.rows_in if out.units_in is None else out.units_in
        units_out = n_rows if out.units_out is None else out.units_out
        if units_in != units_out + n_quarantined:
            raise CountMismatch(f"[{name}] units in {units_in} != out {units_out} + quarantined {n_quarantined}")
        transport = {r: out.reasons[r] for r in TRANSPORT_REASONS if out.reasons.get(r)}
        if mod.USES_LLM and sum(transport.values()) > ctx.config.llm.max_endpoint_failure_rate * max(units_in, 1):
            raise StageFailed(
                f"[{name}] {sum(transport.values())} of {units_in} items failed at the LLM endpoint after retries "
                f"({', '.join(f'{k}={v}' for k, v in transport.items())}): is "
                f"{ctx.config.llm.base_url or 'the embedded server'} reachable and the model/key right? The stage "
                f"was not written; rerun it (answers already received are cached).")
        llm_stats = ctx._llm.stats_delta(llm_before) if (mod.USES_LLM and ctx._llm is not None) else {}
        failed = failed_request_facts(out, fp, ctx.config.llm.retry_failed)
        return {
            "stage": name, "run_id": ctx.store.run_id, **facts, **failed,
            "input_path": ctx.input_path if not mod.INPUTS else "",
            "counts": {"in": out.rows_in, "units_in": units_in, "units_out": units_out,
                       "out": n_rows, "quarantined": n_quarantined,
                       "quarantine_reasons": dict(sorted(out.reasons.items()))},
            "counters": out.counters, "llm": llm_stats, "wall_s": round(time.monotonic() - t0, 3),
        }, out.extra_files

    if out.stream is not None:  # large stages: bounded memory, rows never all in memory
        def batches():
            for rows, qrows in out.stream:
                if isinstance(qrows, EncodedPart):  # encoded by a worker: it counted its reasons
                    out.reasons.update(qrows.reasons or {})
                else:
                    out.reasons.update(q.reason for q in qrows)
                yield rows, qrows
        art = ctx.store.write_stream(name, mod.SCHEMA, batches(), finish)
    else:
        out.reasons.update(q.reason for q in out.quarantine)
        manifest, extra = finish(len(out.rows), len(out.quarantine))
        art = ctx.store.write(name, to_table(out.rows, mod.SCHEMA), out.quarantine + out.request_quarantine,
                              manifest, extra, split_files=getattr(mod, "SPLIT_FILES", None))
    c = art.manifest["counts"]
    log(f"[{name}] in={c['in']} out={c['out']} quarantined={c['quarantined']} "
        f"{c['quarantine_reasons'] or ''} ({art.manifest['wall_s']:.1f}s)")
    failed = art.manifest.get("failed_requests") or {}
    if failed.get("total") and art.manifest.get("fingerprint_complete"):
        log(f"[{name}] {failed['total']} LLM request(s) failed {failed['by_reason']}: raw output quarantined; "
            "the stage is recorded as incomplete and a plain rerun retries exactly those requests")
    return StageResult(name, art.path, c["out"], art.fingerprint, False, art.manifest)


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


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True)


def run_pipeline(root: str, run_id: str, input_path: str, config: PipelineConfig, env: str = "auto",
                 stages: tuple[str, ...] | list[str] | None = None, force: bool = False,
                 log: Callable[[str], None] = print) -> list[StageResult]:
    """Run ``stages`` (default: all, in order) of run ``run_id`` under ``root``.

    Later stages read earlier stages' artifacts from the same run, so ``stages=["distill"]``
    reruns only distillation. The LLM (embedded server unless ``config.llm.base_url``) is
    opened lazily and closed at the end.

    The whole call holds the run's lock (:mod:`pipeline.core.runlock`): a second process on the same
    run id gets :class:`~pipeline.core.runlock.RunLocked` at once. Under the lock, each stage's
    temporary folders left by a killed process are removed before it runs.

    Raises ``ValueError`` for an invalid run id (:func:`check_run_id`) or an unknown stage.
    """
    import contextlib
    from pipeline.llm.provider import llm_factory, model_id_for
    from pipeline.core.runlock import run_lock

    check_run_id(run_id)
    names = list(stages or STAGES)
    for n in names:
        stage_module(n)  # fail fast on a typo
    names.sort(key=STAGES.index)
    store = ArtifactStore(root, run_id)
    results = []
    with run_lock(store.run_dir, run_id), contextlib.ExitStack() as stack:
        ctx = StageContext(store, config, input_path=input_path, env=env,
                           llm_factory=llm_factory(config.llm, store.run_dir, stack))
        model = ""
        if any(stage_module(n).USES_LLM for n in names):
            model = model_id_for(config.llm)
        for n in names:
            remove_stale_temp(store, n, log)
            results.append(run_stage(n, ctx, model_id=model, force=force, log=log))
    return results


def remove_stale_temp(store: ArtifactStore, stage: str, log: Callable[[str], None] = print) -> list[str]:
    """Remove ``.<stage>.tmp-*`` / ``.<stage>.old-*`` folders of ``store``'s run (left when a process
    was killed inside ``ArtifactStore._transaction``); returns their names.

    Only safe while holding the run lock (:func:`run_pipeline` does): then no live process can
    be writing into them."""
    import shutil
    if not os.path.isdir(store.run_dir):
        return []
    stale = sorted(f for f in os.listdir(store.run_dir)
                   if f.startswith((f".{stage}.tmp-", f".{stage}.old-")) and os.path.isdir(os.path.join(store.run_dir, f)))
    for f in stale:
        shutil.rmtree(os.path.join(store.run_dir, f), ignore_errors=True)
    if stale:
        log(f"[{stage}] removed {len(stale)} temporary folder(s) left by a killed run: {', '.join(stale)}")
    return stale


def run_task(stage: str, *, root: str, run_id: str, input_path: str = "", env: str = "auto",
             config_path: str | None = None, llm_base_url: str = "", llm_model: str = "",
             log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one stage for an orchestrator task and return the small XCom reference
    ``{uri, rows, fingerprint}``. Same code path as ``skillpipe run --stages <stage>``."""
    from pipeline.core.config import load_config
    cfg = load_config(config_path)
    if llm_base_url:
        cfg.llm.base_url = llm_base_url
    if llm_model:
        cfg.llm.model = llm_model
    (result,) = run_pipeline(root, run_id, input_path, cfg, env=env, stages=[stage], log=log)
    return result.xcom()


MAX_RUN_ID = 128  # bytes (UTF-8); a folder name may have 255 (NAME_MAX): room to spare


def check_run_id(run_id: str) -> str:
    """``run_id`` if it is a usable run folder name, else ``ValueError`` with a one-line reason.

    Allowed: 1..MAX_RUN_ID bytes of letters, digits, ``-``, ``_``, ``.``, not starting with ``.`` (the same
    alphabet :class:`~pipeline.core.artifacts.ArtifactStore` enforces), so no id can leave ``runs/``
    (``..``, ``/``) or fail at ``mkdir`` with "File name too long" (issue 14, hole 7)."""
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

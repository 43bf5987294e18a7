"""Freshness of a run's artifacts: never build on an artifact whose upstream has since been rewritten.

Each artifact's manifest records what it was built from (``inputs``: the upstream stage and the
content hash it read). When an upstream is rewritten (parse rerun on a new input, remove_loops
not), its content hash no longer matches; :func:`check_fresh` refuses such an artifact, and
every ancestor's, before a stage runs on it (:func:`pipeline.engine.runner.run_stage`) or a step
after the data stages fingerprints it (:func:`pipeline.core.manifest.upstream_facts`).
"""
from __future__ import annotations

import os

from pipeline.core.artifacts import ArtifactError, ArtifactStore
from pipeline.core.layout import STAGES


def check_fresh(store: ArtifactStore, stage: str, seen: set | None = None, shard: str | None = None) -> None:
    """Raise ``ArtifactError`` when ``stage``'s artifact (or its shard ``shard``'s, or an
    ancestor's) was built from an upstream artifact that has since been rewritten, e.g. parse
    rerun on a new input but remove_loops not: running a later stage on it would silently mix
    two inputs. A sharded stage's stage manifest is checked shard by shard."""
    seen = seen if seen is not None else set()
    if (stage, shard) in seen:
        return
    seen.add((stage, shard))
    art = store.require(stage, shard)
    if shard is None and art.manifest.get("shards"):
        for s in art.manifest["shards"]:
            check_fresh(store, stage, seen, s["id"])
        return
    for inp in art.manifest.get("inputs", []):
        # "stage" + "content_sha256" since fingerprints name no location; "uri" + "fingerprint" before
        up = inp.get("stage") or os.path.basename(os.path.normpath(inp.get("uri", "")))
        key = "content_sha256" if "content_sha256" in inp else "fingerprint"
        if key not in inp or up not in STAGES:
            continue
        up_label = f" {inp['shard']}" if inp.get("shard") else ""
        up_stage = store.load(up) if inp.get("shard") else None
        if up_stage is not None and inp["shard"] not in {s["id"] for s in up_stage.manifest.get("shards") or []}:
            raise ArtifactError(  # the upstream was written again in another shard layout (a new plan)
                f"stage '{stage}'{f' {shard}' if shard else ''} of run {store.run_id} is stale: it was built "
                f"from '{up}'{up_label}, which the run no longer has ('{up}' was rerun with another shard "
                f"count); rerun from '{stage}' on (e.g. --stages {','.join(STAGES[STAGES.index(stage):])})")
        current = store.require(up, inp.get("shard"))
        now = current.content_sha256 if key == "content_sha256" else current.fingerprint
        if now != inp[key]:
            raise ArtifactError(
                f"stage '{stage}'{f' {shard}' if shard else ''} of run {store.run_id} is stale: it was built "
                f"from '{up}'{up_label} {inp[key][:12]} "
                f"but '{up}' is now {now[:12]}; rerun from '{stage}' on "
                f"(e.g. --stages {','.join(STAGES[STAGES.index(stage):])}) or the whole run")
        check_fresh(store, up, seen, inp.get("shard"))

"""The shard plan of a run: which input files each shard of the map stages reads.

The input files (:func:`pipeline.formats.discover.list_input_files`, sorted by path) are cut into
**groups**, the unit parse selects in: consecutive files of one folder (an ``envNNN`` folder of a
SkillRL tree), so an environment instance and all its trajectories stay together. Contiguous
runs of groups, in path order, are assigned to ``n`` shards balanced by bytes (the linear
partition that minimises the largest shard: a binary search on the largest shard's bytes with a
greedy fill, O(groups x log(total bytes))). Shard ids are ``shard-00000``, ``shard-00001``...

Because shards are contiguous in path order, reading the shards one after another is reading the
input in the order an unsharded run reads it; the global pass of parse (``Parse.reduce_shards``)
relies on that.

The plan is stored once per run as ``runs/<run_id>/_plan/shards.json``
(``{"input_root", "shards": [{"id", "files" (relative to input_root), "bytes"}], "fingerprint"}``)
and rewritten only when it changes. A run without a plan file (written before sharding, or whose
stages were run one by one) is a one-shard run. With one shard every stage keeps the flat layout
``runs/<run_id>/<stage>/part-*.parquet``; with more, a map stage writes
``runs/<run_id>/<stage>/shard-NNNNN/`` (see :mod:`pipeline.core.artifacts`).
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass

from pipeline.core import recorder
from pipeline.core.artifacts import MANIFEST, StageArtifact
from pipeline.core.fsutil import atomic_write, atomic_write_json
from pipeline.core.layout import is_shard_id, shard_id
from pipeline.core.lineage import content_hash
from pipeline.core.manifest import failure_sentence
from pipeline.formats.discover import file_groups, input_root, list_input_files

PLAN_DIR = "_plan"  # "_": not a stage folder (inspect and the report skip it)
PLAN_FILE = "shards.json"
#: Input bytes per shard when the shard count is automatic. 256 MiB of traces is ~25,000
#: trajectories of the SkillRL txt layout (~10 KB each), minutes per LLM stage on a hosted
#: endpoint: short enough for a retry to be cheap, long enough that task overhead stays small.
BYTES_PER_SHARD = 256 * 2**20


def partition(weights: list[int], n: int) -> list[int]:
    """Cut ``weights`` (in order) into ``min(n, len(weights))`` contiguous non-empty runs whose
    largest sum is as small as possible; returns the start index of each run (first is 0).
    Raises ``ValueError`` for ``n < 1``."""
    if n < 1:
        raise ValueError(f"shard count must be at least 1, got {n}")
    n = min(n, len(weights))
    if n <= 1:
        return [0]

    def fill(cap: int) -> list[int]:  # greedy: start a new run when the next weight does not fit
        starts, acc = [0], 0
        for i, w in enumerate(weights):
            if acc + w > cap and acc > 0:
                starts.append(i)
                acc = 0
            acc += w
        return starts

    lo, hi = max(weights), sum(weights)
    while lo < hi:  # smallest cap that needs at most n runs
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if len(fill(mid)) <= n else (mid + 1, hi)
    starts = fill(lo)
    while len(starts) < n:  # fewer runs than asked: split the run with the most items
        bounds = starts + [len(weights)]
        k = max(range(len(starts)), key=lambda j: bounds[j + 1] - bounds[j])
        starts.insert(k + 1, (bounds[k] + bounds[k + 1] + 1) // 2)
    return starts


@dataclass
class ShardPlan:
    """The shards of a run. ``shards``: ``[{"id", "files": [path relative to input_root], "bytes"}]``
    in path order; ``fingerprint``: a hash of the shard listing (ids, files, sizes)."""
    input_root: str
    shards: list[dict]
    fingerprint: str

    @property
    def ids(self) -> list[str]:
        """The shard ids (``shard-NNNNN``) in plan order."""
        return [s["id"] for s in self.shards]

    @property
    def sharded(self) -> bool:
        """More than one shard: map stages write ``shard-NNNNN/`` artifacts."""
        return len(self.shards) > 1

    def files(self, shard: str) -> list[str]:
        """Paths of ``shard``'s input files (under ``input_root``), in path order; ``KeyError``
        for an unknown shard id."""
        for s in self.shards:
            if s["id"] == shard:
                return [os.path.join(self.input_root, f) for f in s["files"]]
        raise KeyError(f"no shard {shard!r} in the plan (shards: {', '.join(self.ids[:5])}...)")

    def to_json(self) -> dict:
        """The JSON-ready plan ``{input_root, shards, fingerprint}`` stored in :func:`plan_path`."""
        return {"input_root": self.input_root, "shards": self.shards, "fingerprint": self.fingerprint}


def make_plan(input_path: str, shards: int | None = None, bytes_per_shard: int = BYTES_PER_SHARD) -> ShardPlan:
    """Plan the files under ``input_path`` into ``shards`` shards (``None`` or 0: one per
    ``bytes_per_shard`` bytes of input, at least 1); fewer when there are fewer groups.
    Raises ``FileNotFoundError`` when ``input_path`` does not exist, ``ValueError`` for a
    negative count."""
    if shards is not None and shards < 0:
        raise ValueError(f"shard count must be >= 0 (0 = automatic), got {shards}")
    root = input_root(input_path)
    groups = file_groups(list_input_files(input_path))
    sizes = [[_size(p) for p in g] for g in groups]
    weights = [sum(s) for s in sizes]
    n = shards or max(1, -(-sum(weights) // bytes_per_shard))
    starts = partition(weights, n) if groups else [0]
    bounds = starts + [len(groups)]
    listing = []
    for i in range(len(starts)):
        files = [os.path.relpath(p, root) for g in groups[bounds[i]:bounds[i + 1]] for p in g]
        listing.append({"id": shard_id(i), "files": files, "bytes": sum(weights[bounds[i]:bounds[i + 1]])})
    return ShardPlan(root, listing, content_hash(listing, n=32))


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:  # a dangling link: parse quarantines it; it weighs nothing here
        return 0


def plan_path(run_dir: str) -> str:
    """Where the plan of run folder ``run_dir`` is stored: ``<run_dir>/_plan/shards.json``."""
    return os.path.join(run_dir, PLAN_DIR, PLAN_FILE)


def load_plan(run_dir: str) -> ShardPlan | None:
    """The stored plan of the run folder ``run_dir``, or ``None`` when it has none (a one-shard
    run). Raises ``ValueError`` for an unreadable plan file."""
    path = plan_path(run_dir)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return ShardPlan(d["input_root"], d["shards"], d["fingerprint"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"unreadable shard plan {path} ({type(e).__name__}: {e}); plan again "
                         "(skillpipe run --stages parse --shards N)") from None


def save_plan(run_dir: str, plan: ShardPlan) -> bool:
    """Store ``plan`` as the run's plan unless the stored one has the same fingerprint and
    input root; True when it was written."""
    old = load_plan(run_dir) if os.path.exists(plan_path(run_dir)) else None
    if old is not None and old.fingerprint == plan.fingerprint and old.input_root == plan.input_root:
        return False
    os.makedirs(os.path.dirname(plan_path(run_dir)), exist_ok=True)
    atomic_write_json(plan_path(run_dir), plan.to_json())
    return True


def _sum(values: list):
    """Counts/counters of the shards added up: numbers summed, dicts merged key by key, any
    other value kept when every shard has the same one, else the sorted distinct values."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return sum(values)
    if all(isinstance(v, dict) for v in values):
        keys = sorted({k for v in values for k in v})
        return {k: _sum([v[k] for v in values if k in v]) for k in keys}
    distinct = sorted({json.dumps(v, sort_keys=True, default=str) for v in values})
    return values[0] if len(distinct) == 1 else [json.loads(d) for d in distinct]


def _llm_sum(sections: list[dict]) -> dict:
    """The shards' LLM sections added up, with the per-row figures recomputed from the sums
    (:func:`pipeline.llm.accounting.per_row`); ``{}`` when no shard used the LLM."""
    from pipeline.llm.accounting import per_row
    total = _sum(sections)
    return per_row(total) if total else total


def _failed_facts(ids: list[str], arts: list) -> dict:
    """The failed LLM requests of the shards ``arts`` summed, and the shards recorded as
    incomplete (a plain rerun retries them) with a ``fingerprint_complete``; ``{}`` when none."""
    out: dict = {}
    failed = [a.manifest["failed_requests"] for a in arts if (a.manifest.get("failed_requests") or {}).get("total")]
    if failed:
        out["failed_requests"] = {"total": sum(f["total"] for f in failed),
                                  "by_reason": _sum([f.get("by_reason") or {} for f in failed]),
                                  "final": sum(f.get("final", 0) for f in failed)}
    incomplete = [s for s, a in zip(ids, arts) if a.manifest.get("fingerprint_complete")]
    if incomplete:
        out["incomplete_shards"] = incomplete
        out["fingerprint_complete"] = content_hash(
            [a.manifest.get("fingerprint_complete") or a.fingerprint for a in arts], n=32)
    return out


def _counts(name: str, arts: list) -> dict:
    """The shards' counts added up, built again by :func:`pipeline.core.recorder.counts` (so units
    in = out + quarantined is checked in total too). A shard recorded before quarantine kinds
    were counted has only units."""
    c = _sum([a.manifest["counts"] for a in arts])
    kinds = c.get("quarantine_kinds") or ({"unit": c["quarantined"]} if c.get("quarantined") else {})
    tally = recorder.QuarantineTally(Counter(kinds), Counter(c.get("quarantine_reasons") or {}))
    return recorder.counts(c["in"], c["out"], tally, units_in=c.get("units_in"), units_out=c.get("units_out"),
                           where=name)


def collect(ctx, name: str, log=print):
    """Write (or keep) the stage manifest of sharded stage ``name`` from its shards' manifests:
    ``shards`` (id, fingerprint, content_sha256, counts, llm per shard), the counts and counters
    summed (in = out + quarantined holds in total since it holds per shard), ``files`` (the
    shards' files as ``shard-NNNNN/<name>`` plus the stage's :meth:`Stage.reduce_shards` files),
    written by the recorder (:func:`pipeline.core.recorder.record`) with a ``content_sha256`` over
    the shards' content hashes and those files. Idempotent: an existing stage manifest built from
    the same shard manifests is kept. Shard folders the plan no longer has are removed. Failed LLM
    requests of the shards are summed (``failed_requests``: total, by reason, final); shards
    recorded as incomplete are listed (``incomplete_shards``), and then ``fingerprint_complete``
    is set, as for an unsharded stage. Returns the stage's
    :class:`~pipeline.core.artifacts.StageArtifact`.

    ``ctx``: a :class:`~pipeline.stage.stage.StageContext` with ``plan`` set. Raises
    ``ArtifactError`` when a shard has no complete artifact."""
    import hashlib
    import shutil
    from pipeline.stages import get_stage
    store, plan = ctx.store, ctx.plan
    arts = [store.require(name, sid) for sid in plan.ids]
    listing = [{"id": sid, "fingerprint": a.fingerprint, "content_sha256": a.content_sha256,  # llm: a --force rerun
                "counts": a.manifest["counts"], "llm": a.manifest.get("llm") or {}} for sid, a in zip(plan.ids, arts)]
    key = content_hash(listing, plan.fingerprint, [a.manifest for a in arts], n=32)  # any shard rewritten: redo
    existing = store.load(name)
    if existing is not None and existing.manifest.get("collect_key") == key:
        return existing
    folder = store.stage_dir(name)
    for d in os.listdir(folder):
        if is_shard_id(d) and d not in set(plan.ids):  # left by an earlier plan with more shards
            shutil.rmtree(os.path.join(folder, d), ignore_errors=True)
    extra = get_stage(name).reduce_shards(ctx, arts)
    content = [(s["id"], s["content_sha256"]) for s in listing]
    for fname in sorted(extra):
        data = extra[fname] if isinstance(extra[fname], bytes) else extra[fname].encode("utf-8")
        os.makedirs(os.path.dirname(os.path.join(folder, fname)), exist_ok=True)
        atomic_write(os.path.join(folder, fname), data)
        content.append((fname, hashlib.sha256(data).hexdigest()))
    manifest = {
        "stage": name, "run_id": store.run_id, "shards": listing,
        "plan_fingerprint": plan.fingerprint, "collect_key": key,
        "input_path": ctx.input_path if not get_stage(name).inputs else "",
        "fingerprint": content_hash([s["fingerprint"] for s in listing], n=32), "inputs": [],
        "counts": _counts(name, arts),
        "counters": _sum([a.manifest.get("counters") or {} for a in arts]),
        "llm": _llm_sum([a.manifest.get("llm") or {} for a in arts]),
        "wall_s": round(sum(a.manifest.get("wall_s", 0.0) for a in arts), 3),
        **_failed_facts(plan.ids, arts),
    }
    files = [f"{sid}/{f}" for sid, a in zip(plan.ids, arts) for f in a.manifest.get("files", [])] + list(extra)
    manifest = recorder.record(folder, manifest, files, content=content)
    c = manifest["counts"]
    log(f"[{name}] {len(arts)} shards: in={c['in']} out={c['out']} quarantined={c['quarantined']} "
        f"{c['quarantine_reasons'] or ''}")
    if failure_sentence(manifest):
        log(f"[{name}] {failure_sentence(manifest)}")
    return StageArtifact(folder, manifest)


def plan_run(store, input_path: str, shards: int | None, reads_input: bool, log=print) -> ShardPlan | None:
    """The plan a run uses: ``None`` for a one-shard run (flat layout), else the stored plan.

    When the run reads its input (``reads_input``: parse is among the stages) the input is
    planned again, into ``shards`` shards (``0``: automatic; ``None``: as many as the run's
    stored plan has, else automatic) and stored if it changed; a map stage folder left in the
    flat layout by a one-shard run is removed when the run becomes sharded. Otherwise the stored
    plan is used as is. ``store``: the run's ``ArtifactStore``. Raises ``ValueError`` when
    ``shards`` differs from the stored plan of a run that does not read its input."""
    import shutil
    from pipeline.stages import STAGES, get_stage
    stored = load_plan(store.run_dir)
    if not reads_input:
        if shards and stored is not None and len(stored.shards) != shards:
            raise ValueError(f"run {store.run_id} is planned into {len(stored.shards)} shards; to use {shards}, "
                             "rerun from parse (--stages parse,... --shards N)")
        return stored if stored is not None and stored.sharded else None
    if shards is None and stored is not None:
        shards = len(stored.shards)
    plan = make_plan(input_path, shards)
    if save_plan(store.run_dir, plan):
        fewer = f"; {shards} asked, but a folder is never split" if shards and len(plan.shards) < shards else ""
        log(f"[plan] {len(plan.shards)} shard(s) of {sum(s['bytes'] for s in plan.shards) / 1e6:.1f} MB "
            f"(plan {plan.fingerprint[:12]}){fewer}")
    if not plan.sharded:
        return None
    for name in STAGES:
        folder = store.stage_dir(name)
        m = os.path.join(folder, MANIFEST)
        if get_stage(name).sharded and os.path.exists(m):
            with open(m, encoding="utf-8") as f:
                flat = "shards" not in json.load(f)
            if flat:  # one-shard layout: its parts would be read as the stage's rows
                shutil.rmtree(folder, ignore_errors=True)
    return plan

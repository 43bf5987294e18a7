"""Human-readable views of artifacts: schema/counts/sample rows, and SFT-pair lineage."""
from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core import layout
from pipeline.core.artifacts import MANIFEST, quarantine_dir, read_parquet_dir


def _short(v: Any, n: int = 160) -> Any:
    if isinstance(v, str) and len(v) > n:
        return v[:n] + f"… (+{len(v) - n} chars)"
    if isinstance(v, list):
        return [_short(x, n) for x in v[:5]] + ([f"… (+{len(v) - 5} items)"] if len(v) > 5 else [])
    if isinstance(v, dict):
        return {k: _short(x, n) for k, x in v.items()}
    return v


def _load(path: str, quarantine: bool) -> tuple[pa.Table, dict]:
    if os.path.isfile(path) and path.endswith(".jsonl"):  # export's LLaMA-Factory files
        import pyarrow.json as pj
        try:
            return pj.read_json(path), {}
        except pa.ArrowInvalid as e:
            raise ValueError(f"{path} is not readable JSON lines: {e}") from None
    if os.path.isfile(path):
        try:
            return pq.read_table(path), {}
        except (pa.ArrowInvalid, OSError) as e:
            raise ValueError(f"{path} is not a Parquet file (inspect reads stage folders, their part-*.parquet "
                             f"and export's .jsonl files): {e}") from None
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no such artifact: {path}")
    manifest = {}
    mpath = os.path.join(path, MANIFEST)
    if os.path.exists(mpath):
        with open(mpath, encoding="utf-8") as f:
            try:
                manifest = json.load(f)
            except ValueError as e:
                raise ValueError(f"unreadable manifest {mpath}: {e}") from None
    return read_parquet_dir(quarantine_dir(path) if quarantine else path), manifest


#: Manifests of the training steps (not Parquet artifacts): shown as JSON.
STEP_MANIFESTS = tuple(layout.STEP_MANIFESTS.values())


def _describe_run(path: str) -> str:
    out = [f"run: {os.path.abspath(path)}"]
    from pipeline.stages import STAGES
    order = (*STAGES, *layout.STEP_MANIFESTS)
    for name in sorted(os.listdir(path), key=lambda n: (order.index(n) if n in order else len(order), n)):
        mpath = os.path.join(path, name, MANIFEST)
        if os.path.exists(mpath):
            with open(mpath, encoding="utf-8") as f:
                m = json.load(f)
            c = m.get("counts", {})
            out.append(f"  {name:10s} in={c.get('in')} out={c.get('out')} quarantined={c.get('quarantined')} "
                       f"{c.get('quarantine_reasons') or ''}")
        elif any(os.path.exists(os.path.join(path, name, s)) for s in STEP_MANIFESTS):
            out.append(f"  {name:10s} (training step: skillpipe inspect {os.path.join(path, name)})")
    return "\n".join(out)


def describe(path: str, rows: int = 3, quarantine: bool = False) -> str:
    """Schema, row count, manifest counts and the first ``rows`` rows (long text shortened).

    ``path`` may also be a run folder (one line per stage) or a training-step folder
    (``sft_fit``/``grpo``: its manifest), or the URI of an artifact folder on object storage
    (``s3://.../runs/<id>/<stage>``: the committed artifact, pulled by
    :func:`pipeline.engine.remote.open_artifact`). Raises ``FileNotFoundError`` / ``ArtifactError``.
    """
    from pipeline.core.storage import is_remote
    from pipeline.engine.remote import open_artifact, pull_run
    shown = path.rstrip("/") if is_remote(path) else os.path.abspath(path)
    if is_remote(path):
        root, run_id, rest = split_run_uri(path)
        if run_id and not rest:  # a whole run: its stage manifests, pulled
            local = pull_run(root, run_id)
            return f"run: {shown} (local mirror {local})\n" + _describe_run(local).partition("\n")[2]
        path = open_artifact(path)
    if os.path.isdir(path) and layout.is_run_dir(path):
        return _describe_run(path)
    for name in STEP_MANIFESTS:
        if os.path.isdir(path) and os.path.exists(os.path.join(path, name)):
            with open(os.path.join(path, name), encoding="utf-8") as f:
                return f"{os.path.join(os.path.abspath(path), name)}:\n" + json.dumps(_short(json.load(f)), indent=2)
    table, manifest = _load(path, quarantine)
    out = [f"artifact: {shown}{' (quarantine)' if quarantine else ''}",
           f"rows: {table.num_rows}", "schema:"]
    out += [f"  {f.name}: {f.type}" for f in table.schema]
    if manifest:
        out.append(f"stage: {manifest.get('stage')}  fingerprint: {manifest.get('fingerprint', '')[:16]}  "
                   f"wall_s: {manifest.get('wall_s')}")
        out.append("counts: " + json.dumps(manifest.get("counts", {}), ensure_ascii=False))
        if manifest.get("llm"):
            out.append("llm: " + json.dumps(manifest["llm"]))
    for i, row in enumerate(table.slice(0, rows).to_pylist()):
        out.append(f"--- row {i}")
        out.append(json.dumps(_short(row), ensure_ascii=False, indent=2, default=str))
    return "\n".join(out)


def split_run_uri(uri: str) -> tuple[str, str, str]:
    """``(root, run id, rest)`` of an object-storage URI ``<root>/runs/<run id>[/<rest>]``, e.g.
    ``s3://b/p/runs/r1/export`` -> ``("s3://b/p", "r1", "export")``; ``("", "", "")`` when the
    URI has no ``runs/<run id>`` part."""
    head, sep, tail = uri.rstrip("/").rpartition("/runs/")
    if not sep or not tail:
        return "", "", ""
    run_id, _, rest = tail.partition("/")
    return head, run_id, rest


def _run_dir(path: str) -> str:
    """The local run folder ``path`` is in; for an object-storage URI the whole run pulled into
    the local mirror (:func:`pipeline.engine.remote.pull_run`)."""
    from pipeline.core.storage import is_remote
    from pipeline.engine.remote import pull_run
    if is_remote(path):
        root, run_id, _ = split_run_uri(path)
        if not run_id:
            raise ValueError(f"{path} is not inside a runs/<run_id>/ folder")
        return pull_run(root, run_id)
    p = os.path.abspath(path)
    while p != os.path.dirname(p):
        if layout.is_run_dir(p):
            return p
        p = os.path.dirname(p)
    raise ValueError(f"{path} is not inside a runs/<run_id>/ folder")


def _rows(run_dir: str, stage: str, quarantine: bool = False) -> list[dict]:
    folder = os.path.join(run_dir, stage)
    if not os.path.isdir(folder):
        return []
    return read_parquet_dir(quarantine_dir(folder) if quarantine else folder).to_pylist()


def lineage_report(path: str, pair_id: str) -> str:
    """Walk SFT pair ``pair_id`` back to its source file/line, trajectory, step, memories, skills.

    ``path`` is any folder inside the run (``runs/<id>/export``, or ``s3://.../runs/<id>/export``:
    the run is pulled). Raises ``KeyError`` if the pair is in neither export nor build_pairs.
    """
    run_dir = _run_dir(path)
    pair = next((r for s in ("export", "build_pairs") for r in _rows(run_dir, s) if r["pair_id"] == pair_id), None)
    if pair is None:
        q = next((r for r in _rows(run_dir, "build_pairs", quarantine=True) if r["item_id"] == pair_id), None)
        if q is not None:
            raise KeyError(f"pair {pair_id} was quarantined by build_pairs: {q['reason']} ({q['detail']}); "
                           f"source {q['source_uri']} line {q['line']}")
        raise KeyError(f"pair {pair_id} not found in {run_dir}/export or build_pairs")
    traj = next((t for s in ("verify", "remove_loops", "parse") for t in _rows(run_dir, s)
                 if t["trajectory_id"] == pair["trajectory_id"]), None)
    out = [f"SFT pair      {pair_id}  (split={pair.get('split')}, env={pair['env']}, category={pair['category']})",
           f"  model       {pair['model']}   prompt_sha {pair['prompt_sha'][:16]}",
           f"  target      {_short(pair['output'], 200)}"]
    if traj is None:
        out.append(f"trajectory    {pair['trajectory_id']}  (not found in verify/remove_loops/parse artifacts)")
    else:
        parse_manifest = os.path.join(run_dir, "parse", MANIFEST)
        input_root = ""
        if os.path.exists(parse_manifest):
            with open(parse_manifest, encoding="utf-8") as f:
                input_root = json.load(f).get("input_path", "")
                if input_root and not os.path.isdir(input_root):
                    input_root = os.path.dirname(input_root)
        out += [f"source        {os.path.join(input_root, traj['source_uri'])}",
                f"  record      #{traj['record_index']} ({traj['source_format']}), first line {traj['source_line']}",
                f"trajectory    {traj['trajectory_id']}  instance={traj['env_instance']} outcome={traj['outcome']} "
                f"reward={traj['reward']}",
                f"  task        {traj['task']}"]
        steps = traj["steps"]
        k = pair["step_index"]
        if 0 <= k < len(steps):
            st = steps[k]
            out.append(f"step          {pair['step_id']}  index {k}, source line {st['line']}")
            out.append(f"  action      {st['action']}")
        else:
            out.append(f"step          {pair['step_id']}  (synthetic turn after the last step)")
        if traj.get("removed_step_indices"):
            out.append(f"  steps removed (remove_loops loops, verify cuts): {traj['removed_step_indices']}")
    mems = {m["memory_id"]: m for m in _rows(run_dir, "memory")}
    out.append(f"memories      {len(pair['memory_ids'])}")
    for mid in pair["memory_ids"]:
        m = mems.get(mid)
        out.append(f"  {mid}  " + (_short(m["contextual_description"], 120) if m else "(not found)"))
    skills = {s["skill_id"]: s for s in _rows(run_dir, "skills")}
    out.append(f"skills        {len(pair['skill_ids_used'])} (bank {pair['bank_version'][:12]})")
    for sid in pair["skill_ids_used"]:
        s = skills.get(sid)
        if s:
            out.append(f"  {sid}  [{s['kind']}{'/' + s['category'] if s['category'] else ''}] "
                       f"{s['title'] or s['description']}  <- memories {', '.join(s['source_memory_ids'][:4])}"
                       + (" …" if len(s["source_memory_ids"]) > 4 else ""))
        else:
            out.append(f"  {sid}  (not found)")
    return "\n".join(out)

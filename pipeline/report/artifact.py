"""``skillpipe inspect PATH --html OUT``: one artifact as a self-contained HTML page.

Shows what ``skillpipe inspect`` prints (schema, row count, manifest counts and LLM use, sample
rows) as tables: a stage folder, its quarantine folder, a Parquet part or an export ``.jsonl``.
A training-step folder (``sft_fit``, ``grpo``) shows its manifest.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from typing import Any

from pipeline.core.artifacts import LEGACY_QUARANTINE_DIR, QUARANTINE_DIR, quarantine_dir
from pipeline.core.layout import is_run_dir
from pipeline.inspect import STEP_MANIFESTS, _load
from pipeline.report.render import environment

MAX_CELL = 400  # characters per table cell


def _cell(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
    return s if len(s) <= MAX_CELL else s[:MAX_CELL] + f"… (+{len(s) - MAX_CELL} chars)"


def _quarantine_path(path: str, quarantine: bool) -> str:
    if not quarantine:
        return path
    folder = quarantine_dir(path)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"no quarantine folder ({QUARANTINE_DIR} or {LEGACY_QUARANTINE_DIR}) in {path}")
    return folder


def artifact_facts(path: str, rows: int = 20, quarantine: bool = False) -> dict[str, Any]:
    """``{path, kind, rows, schema: [(name, type)], manifest, counts, llm, sample: {columns, rows}}``.

    Raises ``FileNotFoundError`` (no such artifact), ``ValueError`` (not Parquet/JSONL, or a run
    folder: use ``skillpipe report``), ``pipeline.core.artifacts.ArtifactError`` (no parts)."""
    apath = os.path.abspath(path)
    if os.path.isdir(path) and is_run_dir(apath):
        raise ValueError(f"{path} is a whole run: use `skillpipe report {os.path.basename(apath)} "
                         f"--root {os.path.dirname(os.path.dirname(apath))}`")
    for name in STEP_MANIFESTS:
        mpath = os.path.join(path, name)
        if os.path.isdir(path) and os.path.exists(mpath):
            with open(mpath, encoding="utf-8") as f:
                manifest = json.load(f)
            return {"path": mpath, "kind": "training step manifest", "rows": None, "schema": [], "counts": {},
                    "llm": {}, "manifest_json": json.dumps(manifest, indent=2, ensure_ascii=False, default=str),
                    "sample": {"columns": [], "rows": []}}
    folder = _quarantine_path(path, quarantine) if os.path.isdir(path) else path
    table, manifest = _load(path, quarantine and os.path.isdir(path))  # manifest: the stage folder's
    sample = table.slice(0, rows).to_pylist()
    return {"path": os.path.abspath(folder), "kind": "quarantine" if quarantine else "artifact",
            "rows": table.num_rows, "schema": [(f.name, str(f.type)) for f in table.schema],
            "counts": manifest.get("counts") or {}, "llm": manifest.get("llm") or {},
            "stage": manifest.get("stage", ""), "fingerprint": manifest.get("fingerprint", ""),
            "wall_s": manifest.get("wall_s"), "manifest_json": "",
            "sample": {"columns": table.column_names, "rows": [[_cell(r[c]) for c in table.column_names]
                                                               for r in sample]}}


def write_artifact_html(path: str, out: str, rows: int = 20, quarantine: bool = False) -> str:
    """Render :func:`artifact_facts` of ``path`` to ``out`` (HTML); returns ``out``'s absolute path."""
    facts = artifact_facts(path, rows, quarantine)
    html = environment().get_template("artifact.html.j2").render(
        a=facts, zip=zip, generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        f.write(html)
    return out

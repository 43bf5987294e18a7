"""The report's usefulness facts: the think gains of the exported pairs and each bank item's score.

Read from the artifacts (the ``usefulness`` column of ``export``, else of the ``usefulness`` stage,
and of ``skills``) and from the two manifests' gate counts, so the report shows what the dataset
card shows (:mod:`pipeline.usefulness.card`).
"""
from __future__ import annotations

import os
from typing import Any

from pipeline.report.bankinfo import read_rows


def facts(run_dir: str, stages: list[dict[str, Any]]) -> dict[str, Any]:
    """``{gains: [float], items: [{title, kind, env, score, lo, hi, n}], gated_thinks, gated_items,
    note}``; ``note`` says why nothing is shown when no score exists."""
    stage = "export" if os.path.isdir(os.path.join(run_dir, "export")) else "usefulness"
    pairs = read_rows(run_dir, stage, ["usefulness"]) if os.path.isdir(os.path.join(run_dir, stage)) else []
    gains = [p["usefulness"]["gain"] for p in pairs if p.get("usefulness")]
    skills = read_rows(run_dir, "skills") if os.path.isdir(os.path.join(run_dir, "skills")) else []
    items = sorted(({"title": s.get("title") or s.get("description") or "", "kind": s["kind"], "env": s.get("env") or "",
                     **{k: s["usefulness"][k] for k in ("score", "lo", "hi", "n")}}
                    for s in skills if s.get("usefulness")), key=lambda i: i["score"])
    manifests = {s["stage"]: s["manifest"] for s in stages}
    gated_thinks = ((manifests.get("usefulness") or {}).get("counts") or {}).get("quarantine_reasons", {}).get("no_gain", 0)
    per_env = ((manifests.get("skills") or {}).get("counters") or {}).get("usefulness") or {}
    gated_items = sum(rec.get("quarantined", 0) for rec in per_env.values())
    note = "" if gains or items else "no think or bank item of this run carries a usefulness score (gate off?)"
    return {"gains": gains, "items": items, "gated_thinks": gated_thinks, "gated_items": gated_items,
            "bank_vs_none": {env: rec.get("bank_vs_none") for env, rec in per_env.items()}, "note": note}

"""Teacher comparison: the data stages on the shipped sample, once per embedded teacher model.

For each candidate (the embedded aliases of ``pipeline.llm.weights.MODELS`` by default;
``--models a,b``) this runs ``skillpipe run --input data/samples --llm-model <alias>`` in a fresh
root, in its own process (each teacher starts its own llama.cpp server), then reads the stage
manifests and prints one row per teacher:

* memory kept / trajectories in; skill-bank items kept (skills + mistakes) and items quarantined
  by rule; distill kept / successful trajectories in, and of the kept ones how many have at
  least one think the model wrote (the rest are all recorded thoughts); SFT pairs exported;
* completion tokens per second over the LLM stages' wall time, and the data stages' wall time;
* every stage's quarantine reasons (below the table).

Run: ``.venv/bin/python bench/teacher.py`` (the 1.5B teacher takes 15-30 min on 2 cores, the
135M one about 10 min) or ``make teacher``. ``--keep DIR`` keeps the run roots. The table in
README "Teacher" is this script's output. Last line: ``best=<alias> memory=<k/n> bank=<n>
distill=<k/n>``, the teacher with the most kept rows (memory + bank + distill).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from pipeline.core.layout import run_dir, stage_manifest_path  # noqa: E402
from pipeline.core.waits import run_bounded  # noqa: E402
from pipeline.llm.weights import MODELS  # noqa: E402

RUN_TIMEOUT_S = 6 * 3600.0  # one teacher's data stages on the sample, on CPU: past this the run hangs

LLM_STAGES = ("memory", "skills", "distill")


def manifest(root: str, run_id: str, stage: str) -> dict:
    """The stage manifest of a run, ``{}`` when the stage wrote none."""
    path = stage_manifest_path(root, run_id, stage)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def distill_split(root: str, run_id: str) -> tuple[int, int]:
    """``(kept rows with a think the model wrote, kept rows whose thinks are all recorded)``."""
    import pyarrow.dataset as ds
    path = os.path.join(run_dir(root, run_id), "distill")
    if not os.path.isdir(path):
        return 0, 0
    models = ds.dataset(path, format="parquet", exclude_invalid_files=True).to_table(columns=["model"]).column(0)
    models = models.to_pylist()
    return sum(m not in ("source", "none") for m in models), sum(m == "source" for m in models)


def run_teacher(alias: str, root: str, sample: str) -> dict:
    """Run the data stages with ``alias`` under ``root``; returns the figures of one table row."""
    run_id = f"teacher-{alias}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("SKILLPIPE_LLM_MODEL", None)
    cmd = [sys.executable, "-m", "pipeline.cli", "run", "--input", sample, "--run-id", run_id, "--root", root,
           "--llm-model", alias]
    t0 = time.monotonic()
    done = run_bounded(cmd, RUN_TIMEOUT_S, f"skillpipe run with {alias}", cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"{alias}: skillpipe run exited {done.returncode}:\n{done.stderr[-3000:]}")
    return figures(alias, root, run_id, wall)


def figures(alias: str, root: str, run_id: str, wall: float) -> dict:
    """The table row of a finished run (see module docstring)."""
    m = {s: manifest(root, run_id, s) for s in ("memory", "skills", "distill", "export", *LLM_STAGES)}
    distill = m["distill"].get("counts", {})
    not_success = distill.get("quarantine_reasons", {}).get("not_success", 0)
    written, recorded = distill_split(root, run_id)
    llm = [m[s].get("llm", {}) for s in LLM_STAGES]
    llm_wall = sum(m[s].get("wall_s", 0.0) for s in LLM_STAGES)
    completion = sum(x.get("completion_tokens", 0) for x in llm)
    skills = m["skills"].get("counters", {})
    return {
        "teacher": alias,
        "memory": f"{m['memory'].get('counts', {}).get('out', 0)}/{m['memory'].get('counts', {}).get('in', 0)}",
        "bank": sum((skills.get("skills") or {}).values()),
        "bank_quarantined": skills.get("items_quarantined") or {},
        "distill": f"{distill.get('out', 0)}/{distill.get('in', 0) - not_success}",
        "distill_written_recorded": f"{written}/{recorded}",
        "pairs": m["export"].get("counts", {}).get("out", 0),
        "prompt_tokens": sum(x.get("prompt_tokens", 0) for x in llm),
        "completion_tokens": completion,
        "tokens_per_s": round(completion / llm_wall, 1) if llm_wall else 0.0,
        "data_stages_s": round(wall, 1),
        "reasons": {s: m[s].get("counts", {}).get("quarantine_reasons", {}) for s in LLM_STAGES},
    }


def table(rows: list[dict]) -> str:
    """The comparison as a Markdown table, then each teacher's quarantine reasons."""
    head = ("| teacher | memory kept | bank items | distill kept (of successes) | model-written / all-recorded "
            "| pairs | completion tok/s | data stages wall |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        lines.append(f"| {r['teacher']} | {r['memory']} | {r['bank']} | {r['distill']} | "
                     f"{r['distill_written_recorded']} | {r['pairs']} | {r['tokens_per_s']} | {r['data_stages_s']} s |")
    for r in rows:
        lines.append(f"\n{r['teacher']}: quarantine reasons {json.dumps(r['reasons'])}; bank items quarantined "
                     f"{json.dumps(r['bank_quarantined'])}; tokens prompt {r['prompt_tokens']}, completion "
                     f"{r['completion_tokens']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated embedded aliases")
    ap.add_argument("--input", default=os.path.join(REPO, "data", "samples"), help="trace folder (default: the sample)")
    ap.add_argument("--keep", default="", help="keep the run roots in this folder (default: a temporary one)")
    args = ap.parse_args(argv)
    aliases = [a for a in args.models.split(",") if a]
    unknown = [a for a in aliases if a not in MODELS]
    if unknown:
        ap.error(f"unknown embedded model(s) {unknown}; known: {', '.join(MODELS)}")
    with tempfile.TemporaryDirectory(prefix="skillpipe-teacher-") as tmp:
        root = args.keep or tmp
        rows = [run_teacher(a, os.path.join(root, a), args.input) for a in aliases]
    print(table(rows))
    best = max(rows, key=lambda r: int(r["memory"].split("/")[0]) + r["bank"] + int(r["distill"].split("/")[0]))
    print(f"best={best['teacher']} memory={best['memory']} bank={best['bank']} distill={best['distill']}")
    from bench.results import write_result  # the result file (bench/results.py)
    write_result("teacher", {"best": best["teacher"], "teachers": rows}, {"models": aliases, "input": args.input})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark results as data: one dated JSON file per run under ``bench/results/``.

A benchmark script calls :func:`write_result` once its headline figures are known; the file it
writes is what ``docs/benchmarks.md`` and the results table of ``README.md`` are rendered from
(``bench/render_results.py``), so no figure is copied into the docs by hand. One file::

    {"name": "soak",                          # the kind of benchmark (render_results.KINDS)
     "date": "2026-12-06T21:10:04+00:00",     # when the run ended (UTC); a day alone for old runs
     "commit": "c066c67",                     # HEAD of the checkout that ran it (+dirty: local changes)
     "machine": {"cpu": "AMD EPYC", "cores": 2, "ram_gb": 23.4, "load_avg_1m": 0.4},
     "command": "bench/soak.py --runs 100",   # what ran
     "budget": {...},                         # arguments and limits that shape the figures
     "figures": {...},                        # the measured values (JSON numbers and strings)
     "notes": ["..."]}                        # findings in words, each a full sentence

Where a file goes: ``$SKILLPIPE_BENCH_RESULTS`` names another folder (``off``: write nothing);
under pytest (``PYTEST_CURRENT_TEST`` is set, also in the benchmark processes a test starts) no
file is written unless ``out_dir`` is given, so the test suite's small runs of the benchmarks
leave ``bench/results/`` as it is.

Recording a ``make run`` (the README's table of what it gives)::

    make run                                        # writes runs/sample/...
    .venv/bin/python bench/results.py make-run      # reads its manifests, writes bench/results/<date>-make_run.json
    .venv/bin/python bench/render_results.py        # README table and docs/benchmarks.md from the files
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pipeline.core.layout import run_dir, stage_manifest_path  # noqa: E402
from pipeline.core.waits import run_bounded  # noqa: E402

RESULTS_DIR = os.path.join(ROOT, "bench", "results")
ENV_DIR = "SKILLPIPE_BENCH_RESULTS"
#: The LLM stages of a run, whose wall time and calls a make_run result records one by one.
LLM_STAGES = ("memory", "skills", "distill")


def machine() -> dict[str, Any]:
    """The CPU model, the number of CPUs this process may use, the RAM in GiB (``None`` where the
    system does not say) and the 1-minute load average when the result is written (other work on a
    shared machine moves every timing)."""
    cpu, ram = platform.processor() or platform.machine(), None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
        with open("/proc/meminfo", encoding="utf-8") as f:
            kib = next((int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:")), 0)
        ram = round(kib / 2**20, 1) if kib else None
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu, "cores": cores, "ram_gb": ram, "load_avg_1m": round(os.getloadavg()[0], 2)}


def commit(root: str = ROOT) -> str:
    """The short HEAD commit of ``root`` ('' outside a git checkout), ``+dirty`` when tracked files
    have local changes."""
    try:
        head = run_bounded(["git", "-C", root, "rev-parse", "--short", "HEAD"], 10.0, capture_output=True,
                           text=True).stdout.strip()
        dirty = run_bounded(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"], 10.0,
                            capture_output=True, text=True).stdout.strip()
    except (OSError, TimeoutError):
        return ""
    return head + ("+dirty" if head and dirty else "")


def results_dir(out_dir: str | None = None) -> str | None:
    """Where :func:`write_result` writes: ``out_dir`` when given, else ``$SKILLPIPE_BENCH_RESULTS``
    (``off`` or empty: nowhere), else nowhere under pytest, else ``bench/results/``."""
    if out_dir:
        return out_dir
    if ENV_DIR in os.environ:
        value = os.environ[ENV_DIR].strip()
        return None if value in ("", "off") else value
    return None if os.environ.get("PYTEST_CURRENT_TEST") else RESULTS_DIR


def file_name(doc: dict[str, Any]) -> str:
    """``<YYYY-MM-DD>-<HHMMSS>-<name>.json`` from the result's date (``000000`` for a day alone)."""
    stamp = doc["date"].replace(":", "")
    day, _, rest = stamp.partition("T")
    return f"{day}-{(rest[:6] or '000000')}-{doc['name']}.json"


def write_result(name: str, figures: dict[str, Any], budget: dict[str, Any] | None = None, *,
                 command: str | None = None, notes: list[str] | tuple[str, ...] = (),
                 out_dir: str | None = None) -> str | None:
    """Write one result file for benchmark ``name`` and return its path (``None`` when
    :func:`results_dir` says nowhere). ``figures``: the measured values; ``budget``: the
    arguments that shape them; ``command``: what ran (default: this process's command line)."""
    folder = results_dir(out_dir)
    if folder is None:
        return None
    doc = {"name": name, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": commit(), "machine": machine(),
           "command": command or shlex.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
           "budget": budget or {}, "figures": figures, "notes": list(notes)}
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, file_name(doc))
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")
    os.replace(path + ".tmp", path)
    return path


def load_results(folder: str = RESULTS_DIR) -> list[dict[str, Any]]:
    """Every result file of ``folder``, oldest first (by date, then file name), each with its file
    name under ``"file"``."""
    docs = []
    for fn in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if fn.endswith(".json"):
            with open(os.path.join(folder, fn), encoding="utf-8") as f:
                docs.append({**json.load(f), "file": fn})
    return sorted(docs, key=lambda d: (d.get("recorded") or d["date"], d["file"]))


def latest(docs: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The newest result of benchmark ``name`` in ``docs`` (:func:`load_results`' order)."""
    return next((d for d in reversed(docs) if d["name"] == name), None)


def _manifest(root: str, run_id: str, stage: str) -> dict[str, Any]:
    path = stage_manifest_path(root, run_id, stage)
    if not os.path.exists(path):
        raise SystemExit(f"no manifest at {path}: run `make run` (or skillpipe run --run-id {run_id}) first")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def model_written(root: str, run_id: str) -> int:
    """Distilled trajectories with at least one think the model wrote (``model`` is ``source``
    when every think was recorded by the source)."""
    from pipeline.engine.remote import read_table
    models = read_table(os.path.join(run_dir(root, run_id), "distill")).column("model").to_pylist()
    return sum(m != "source" for m in models)


def make_run_figures(root: str, run_id: str) -> dict[str, Any]:
    """The figures of a finished data run (its stage manifests): what the README's table shows."""
    m = {s: _manifest(root, run_id, s) for s in ("verify", *LLM_STAGES, "export")}
    stages = [s for s in ("parse", "remove_loops", "verify", "split", *LLM_STAGES, "build_pairs", "export")
              if os.path.exists(stage_manifest_path(root, run_id, s))]
    llm = [m[s].get("llm") or {} for s in LLM_STAGES]
    distill = m["distill"]["counts"]
    return {
        "data_stages_s": round(sum(_manifest(root, run_id, s)["wall_s"] for s in stages)),
        "stage_s": {s: round(m[s]["wall_s"]) for s in LLM_STAGES},
        "llm_calls": sum(x.get("calls", 0) for x in llm),
        "tokens": sum(x.get("prompt_tokens", 0) + x.get("completion_tokens", 0) for x in llm),
        "prompt_tokens": sum(x.get("prompt_tokens", 0) for x in llm),
        "cached_prompt_tokens": sum(x.get("cached_prompt_tokens", 0) for x in llm),
        "completion_tokens": sum(x.get("completion_tokens", 0) for x in llm),
        "trajectories": m["verify"]["counts"]["units_in"],
        "verify_demoted": (m["verify"].get("counters") or {}).get("demoted", 0),
        "memory_kept": m["memory"]["counts"]["units_out"], "memory_in": m["memory"]["counts"]["units_in"],
        "bank_items": m["skills"]["counts"]["out"],
        "distill_kept": distill["units_out"],
        "distill_successes": distill["units_in"] - distill["quarantine_reasons"].get("not_success", 0),
        "distill_model_written": model_written(root, run_id),
        "pairs": m["export"]["counts"]["out"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Record the figures of a finished `make run` as a result file.")
    p.add_argument("what", choices=["make-run"], help="the kind of run to record")
    p.add_argument("--root", default=ROOT, help="the root the run was written under")
    p.add_argument("--run-id", default="sample", help="the run id (make run: sample)")
    p.add_argument("--wall-s", type=float, default=None, help="wall time of the whole make run, when timed")
    p.add_argument("--note", action="append", default=[], help="a finding in words (repeatable)")
    a = p.parse_args(argv)
    figures = make_run_figures(a.root, a.run_id)
    if a.wall_s is not None:
        figures["make_run_s"] = round(a.wall_s)
    path = write_result("make_run", figures, {"run_id": a.run_id, "input": "data/samples"},
                        command="make run", notes=a.note)
    print(json.dumps(figures))
    print(f"result: {path or '(not written)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

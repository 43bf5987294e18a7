"""Benchmark: parse + dedupe of a SkillRL rollout tree on one worker, paired with the reference.

Not a test (timings depend on the machine). Targets: wall time <= 0.5x the SkillRL reference
scripts (``parse_alfworld.py`` + ``dedupe_repetitions.py``) on the same tree, peak RSS <= 300 MB
and flat as the input grows 10x.

The reference is either the real SkillRL scripts (``--reference-scripts DIR``: the reference
repository's ``preprocess/`` folder; run as they are, with their default arguments, from a copy)
or, without them, :mod:`bench.reference_model`, our own re-implementation of their written
description (one process, regex parse of every file, env selection, ``json.dump``, actions-only
dedupe reading and writing JSON). Each repeat runs the reference (its two steps, as two
processes, like the reference's shell script) and ours (``parse`` + ``remove_loops`` through
``runner.run_stage`` with default settings: the stages' process pools use one worker per CPU
this process may use), alternating which goes first, each in a fresh subprocess, on the
same tree, after one read of every file to warm the page cache. Pairing in one run matters on
a shared machine: both sides see the same load.

Usage::

    python bench/parse_dedupe.py                       # generates --envs 3000 --seed 1 (182 MB), then deletes it
    python bench/parse_dedupe.py --envs 30000 --tmp /tmp   # 1.8 GB tree
    python bench/parse_dedupe.py --tree DIR --repeats 5    # reuse an existing tree
    python bench/parse_dedupe.py --tree DIR --repeats 7 --reference-scripts PATH/preprocess  # the real scripts
    python bench/parse_dedupe.py --tree DIR --repeats 0    # ours only, once (no reference runs)
    python bench/parse_dedupe.py --tree DIR --phases       # ours phase by phase on one core (see phases())

Output: per run ``ref ...`` / ``ours ...`` lines (work wall time, CPU seconds of the process and
its workers during the work, process wall time including interpreter start and imports), then
medians, ``ratio_to_reference=<ours wall median / ref wall median>`` (the target's figure),
``cpu_ratio_to_reference`` (CPU seconds; less sensitive to other load, but it does not credit
our use of several cores), ``process_ratio_to_reference`` (whole processes, start-up included),
the load average before and after, and as the last line ``wall_s=<ours median> peak_rss_mb=<y>``.
``wall_s`` covers both stages including the input fingerprint (every input file is hashed) and
the Parquet writes; tree generation is excluded. ``peak_rss_mb`` is the conservative figure
``maxrss(main process) + maxrss(largest worker)`` (forked workers share pages with the parent,
so this over-counts); each ours run also prints the peaks of the sampled sums over its process
tree: ``sampled_tree_peak_rss_mb`` (counts shared pages once per process) and
``sampled_tree_peak_pss_mb`` (proportional set size: shared pages split among the processes
that map them, the honest total; sampled every 0.1 s / 0.5 s, so short spikes can be missed).

History: until 2026-12 the ratio divided our wall time by a constant 5.9 s, the real reference
scripts measured once on an earlier machine; it is no longer used.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pipeline.core.waits import run_bounded  # noqa: E402  (standard library only: no import cost here)

CHILD_TIMEOUT_S = 3600.0  # one benchmark process (minutes on the 1.8 GB tree): past this it hangs
# the project's synthetic rollout-tree generator, shipped with the tests (tests/fixtures/tools/SOURCE.md)
TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures", "tools",
                    "make_skillrl_rollouts.py")


def _pss_mb(pid: int) -> float:
    """Proportional set size of ``pid`` in MB (shared pages split among their users), or 0."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _tree_rss_sampler(stop: threading.Event, peak: list[float]) -> None:
    """Every 0.1 s: peak[0] = max sum of RSS; every 0.5 s: peak[1] = max sum of PSS, over this
    process and its children (the probe itself costs ~2% of a core). RSS counts pages shared with the forked workers once per process; PSS splits
    them, so its sum is the honest total."""
    try:
        import psutil
    except ImportError:  # optional: the conservative rusage figure is always printed
        return
    me = psutil.Process()
    tick = 0
    while not stop.is_set():
        try:
            procs = [me] + me.children(recursive=True)
            peak[0] = max(peak[0], sum(p.memory_info().rss for p in procs) / 2**20)
            if tick % 5 == 0:  # reading smaps costs ~2 ms per process: keep the probe light
                peak[1] = max(peak[1], sum(_pss_mb(p.pid) for p in procs))
        except psutil.Error:
            pass
        tick += 1
        stop.wait(0.1)


def _rusage_cpu() -> float:
    """CPU seconds (user + system) of this process and its reaped children so far."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(tree: str) -> None:
    """Ours, in this process: parse + remove_loops of ``tree`` into a temporary store; prints
    counts, ``work_wall_s``, ``work_cpu_s`` and memory figures (module docstring)."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.config import PipelineConfig
    from pipeline.engine.runner import run_stage
    from pipeline.stage.stage import StageContext

    store_root = tempfile.mkdtemp(prefix="skillpipe-bench-")
    stop, peak = threading.Event(), [0.0, 0.0]
    sampler = threading.Thread(target=_tree_rss_sampler, args=(stop, peak), daemon=True)
    sampler.start()
    try:
        ctx = StageContext(ArtifactStore(store_root, "bench"), PipelineConfig(), input_path=tree)
        cpu0, t0 = _rusage_cpu(), time.perf_counter()
        for stage in ("parse", "remove_loops"):
            s0 = time.perf_counter()
            res = run_stage(stage, ctx, force=True, log=lambda s: None)
            c = res.manifest["counts"]
            print(f"{stage}: in={c['in']} out={c['out']} quarantined={c['quarantined']} "
                  f"{c['quarantine_reasons']} {time.perf_counter() - s0:.2f}s")
        wall, cpu = time.perf_counter() - t0, _rusage_cpu() - cpu0
    finally:
        stop.set()
        sampler.join(timeout=5.0)  # it wakes every 0.1 s
        shutil.rmtree(store_root, ignore_errors=True)
    self_ru, kids_ru = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    me, kids = self_ru.ru_maxrss / 1024, kids_ru.ru_maxrss / 1024
    print(f"main_peak_rss_mb={me:.0f} largest_worker_peak_rss_mb={kids:.0f} sampled_tree_peak_rss_mb={peak[0]:.0f} "
          f"sampled_tree_peak_pss_mb={peak[1]:.0f} cores={len(os.sched_getaffinity(0))}")
    print(f"work_wall_s={wall:.3f} work_cpu_s={cpu:.3f} peak_rss_mb={me + kids:.0f}")


def _read_texts(paths: list[str]) -> list[tuple[str, str]]:
    """``[(path, text)]``: each file read, SHA-256 hashed (as parse hashes its inputs) and decoded."""
    import hashlib
    out = []
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        hashlib.sha256(data).hexdigest()
        out.append((path, data.decode("utf-8")))
    return out


def _encode(trajs: list) -> list:
    """``trajs`` as Parquet parts of 500 rows, as a parse worker encodes them."""
    from pipeline.core.artifacts import PartEncoder
    from pipeline.core.records import TRAJECTORY_SCHEMA
    from pipeline.formats.common import trajectories_table
    enc = PartEncoder(TRAJECTORY_SCHEMA)
    for i in range(0, len(trajs), 500):
        enc.write(trajectories_table(trajs[i:i + 500]))
    return enc.finish()


def phases(tree: str) -> None:
    """Ours, phase by phase, in this process on one core (no pool): CPU seconds of listing the
    files, reading + hashing + decoding them, the txt reader (trajectory ids included), content
    digests, Arrow columns + Parquet encoding, and loop removal on those tables. Prints
    ``phase_<name>_cpu_s=<x>`` lines (and ``reader_ids_cpu_s``, the ids' share of the reader),
    their sum, and ``bound_without_reader_cpu_s``: the sum with the reader's own work set to
    zero (its ids kept), the least CPU any faster reader could leave for this pipeline.
    Selection, manifests and the process pools are not in the sum."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import pyarrow as pa

    from pipeline.core.artifacts import decode_part
    from pipeline.core.config import PipelineConfig
    from pipeline.core.lineage import trajectory_id
    from pipeline.formats import skillrl_txt
    from pipeline.formats.common import Source, _content
    from pipeline.formats.discover import list_input_files
    from pipeline.selection import content_digest
    from pipeline.stages.remove_loops import remove_loops_table

    pa.array([], pa.int32())  # pyarrow's lazy pandas import: not a phase
    cpu = {}

    def timed(name, fn):
        t0 = time.process_time()
        out = fn()
        cpu[name] = time.process_time() - t0
        return out

    files = timed("list", lambda: list_input_files(tree))
    texts = timed("read_hash_decode", lambda: _read_texts(files))
    trajs = timed("reader", lambda: [t for path, text in texts for t in skillrl_txt.read(
        Source(path, None, 1.0, os.path.relpath(path, tree), text)) if not hasattr(t, "reason")])
    # the ids are computed inside the reader; timed again here so the bound can keep them
    ids = timed("ids_within_reader", lambda: [trajectory_id(t.source_uri, t.record_index, _content(
        t.env, t.task, t.outcome, t.reward, t.steps)) for t in trajs])
    assert ids == [t.trajectory_id for t in trajs], "ids recomputed differently"
    timed("content_digest", lambda: [content_digest(t) for t in trajs])
    tables = [decode_part(p) for p in timed("arrow_parquet", lambda: _encode(trajs))]
    min_actions = PipelineConfig().remove_loops.min_actions
    timed("remove_loops", lambda: [remove_loops_table(t, min_actions) for t in tables])
    ids_cpu = cpu.pop("ids_within_reader")
    for name, sec in cpu.items():
        print(f"phase_{name}_cpu_s={sec:.2f}" + (f" reader_ids_cpu_s={ids_cpu:.2f}" if name == "reader" else ""))
    total = sum(cpu.values())
    print(f"trajectories={len(trajs)} phases_cpu_s={total:.2f} "
          f"bound_without_reader_cpu_s={total - cpu['reader'] + ids_cpu:.2f}")


def _values(text: str) -> dict[str, float]:
    """Every ``key=<number>`` token of a child's output (a later one wins)."""
    out = {}
    for tok in text.split():
        key, eq, val = tok.partition("=")
        if eq:
            try:
                out[key] = float(val)
            except ValueError:
                pass
    return out


def _child(cmd: list[str]) -> tuple[dict[str, float], float]:
    """Run one benchmark process; ``(its key=value figures, its wall seconds seen from here)``.
    Raises ``CalledProcessError`` (with its output printed) when it fails."""
    t0 = time.perf_counter()
    proc = run_bounded(cmd, CHILD_TIMEOUT_S, os.path.basename(cmd[1]), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        print(proc.stdout + proc.stderr, file=sys.stderr)
        proc.check_returncode()
    return _values(proc.stdout), wall


def run_reference(tree: str) -> dict[str, float]:
    """One reference run: its parse step, then its dedupe step, two processes on a fresh work
    folder. ``{wall_s, cpu_s, process_wall_s, peak_rss_mb, kept_trajectories}`` (work figures summed)."""
    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_model.py")
    work = tempfile.mkdtemp(prefix="skillrl-ref-")
    try:
        parse, p_wall = _child([sys.executable, model, "parse", tree, work])
        dedupe, d_wall = _child([sys.executable, model, "dedupe", work])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"wall_s": parse["wall_s"] + dedupe["wall_s"], "cpu_s": parse["cpu_s"] + dedupe["cpu_s"],
            "process_wall_s": p_wall + d_wall, "peak_rss_mb": max(parse["peak_rss_mb"], dedupe["peak_rss_mb"]),
            "kept_trajectories": parse["kept_trajectories"]}


REAL_SCRIPTS = ("parse_alfworld.py", "dedupe_repetitions.py")


def run_real_reference(tree: str, scripts: str) -> dict[str, float]:
    """One run of the real SkillRL scripts in ``scripts`` (``preprocess/`` of the reference
    repository), as its ``run_alfworld.sh`` runs them, with their default arguments, from a copy
    in a temporary folder (nothing is written next to the originals). ``{wall_s, cpu_s,
    process_wall_s, kept_trajectories}``: they time nothing themselves, so ``wall_s`` is the two
    processes' wall time seen from here (their start-up is a few stdlib imports), ``cpu_s`` comes
    from ``RUSAGE_CHILDREN``, and ``kept_trajectories`` is 0 (they select 100 environments by
    default, so their output is not ours to compare; only the time is)."""
    work = tempfile.mkdtemp(prefix="skillrl-real-")
    try:
        for name in REAL_SCRIPTS:
            shutil.copy(os.path.join(scripts, name), work)
        parsed, cleaned = os.path.join(work, "processed_trajectories.json"), os.path.join(work, "cleaned.json")
        cpu0, t0 = _children_cpu(), time.perf_counter()
        for cmd in ([os.path.join(work, REAL_SCRIPTS[0]), "--input_dir", tree, "--output_file", parsed],
                    [os.path.join(work, REAL_SCRIPTS[1]), "--input_file", parsed, "--output_file", cleaned]):
            run_bounded([sys.executable, *cmd], CHILD_TIMEOUT_S, os.path.basename(cmd[0]), capture_output=True, check=True)
        wall = time.perf_counter() - t0
        return {"wall_s": wall, "cpu_s": _children_cpu() - cpu0, "process_wall_s": wall, "kept_trajectories": 0}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_ours(tree: str) -> dict[str, float]:
    """One run of ours in a fresh process (:func:`measure`): ``{wall_s, cpu_s, process_wall_s,
    peak_rss_mb, sampled_tree_peak_rss_mb, sampled_tree_peak_pss_mb, kept_trajectories}``
    (kept: remove_loops' rows, next to the reference's kept count)."""
    vals, wall = _child([sys.executable, os.path.abspath(__file__), "--tree", tree, "--repeats", "0"])
    return {"wall_s": vals["work_wall_s"], "cpu_s": vals["work_cpu_s"], "process_wall_s": wall,
            "peak_rss_mb": vals["peak_rss_mb"], "sampled_tree_peak_rss_mb": vals["sampled_tree_peak_rss_mb"],
            "sampled_tree_peak_pss_mb": vals["sampled_tree_peak_pss_mb"],
            "kept_trajectories": vals["out"]}  # the last out= is remove_loops' (measure prints it last)


def warm_page_cache(tree: str) -> int:
    """Read every file under ``tree`` once (so neither side pays the first read); returns bytes read."""
    total = 0
    for folder, _, names in os.walk(tree):
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                while chunk := f.read(1 << 20):
                    total += len(chunk)
    return total


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def paired(tree: str, repeats: int, scripts: str = "") -> None:
    """``repeats`` times: the reference (the real scripts in ``scripts`` when given, else
    :mod:`bench.reference_model`) and ours, each in fresh processes, alternating which goes first;
    prints per-run figures, medians and ratios (module docstring)."""
    reference = (lambda t: run_real_reference(t, scripts)) if scripts else run_reference
    print(f"warmed page cache: {warm_page_cache(tree) / 2**20:.0f} MB; cores={len(os.sched_getaffinity(0))} "
          f"load_before={'/'.join(f'{x:.2f}' for x in os.getloadavg())}")
    refs, ours = [], []
    for i in range(repeats):
        order = [("ref", reference, refs), ("ours", run_ours, ours)]
        for side, fn, runs in order if i % 2 == 0 else order[::-1]:
            r = fn(tree)
            runs.append(r)
            print(f"{side} run {i + 1}: " + " ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
    med = {side: {k: _median(runs, k) for k in ("wall_s", "cpu_s", "process_wall_s")}
           for side, runs in (("ref", refs), ("ours", ours))}
    for side in ("ref", "ours"):
        print(f"{side}_median: " + " ".join(f"{k}={v:.2f}" for k, v in med[side].items()))
    print(f"load_after={'/'.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"cpu_ratio_to_reference={med['ours']['cpu_s'] / med['ref']['cpu_s']:.3f} "
          f"process_ratio_to_reference={med['ours']['process_wall_s'] / med['ref']['process_wall_s']:.3f}")
    print(f"ratio_to_reference={med['ours']['wall_s'] / med['ref']['wall_s']:.3f}")
    print(f"wall_s={med['ours']['wall_s']:.2f} peak_rss_mb={max(r['peak_rss_mb'] for r in ours):.0f}")
    from bench.results import write_result  # the result file (bench/results.py)
    write_result("parse_dedupe", {"ours_wall_s": round(med["ours"]["wall_s"], 2), "reference_wall_s": round(med["ref"]["wall_s"], 2),
                                  "ratio_to_reference": round(med["ours"]["wall_s"] / med["ref"]["wall_s"], 3),
                                  "cpu_ratio_to_reference": round(med["ours"]["cpu_s"] / med["ref"]["cpu_s"], 3),
                                  "peak_rss_mb": round(max(r["peak_rss_mb"] for r in ours))},
                 {"tree": f"{len(os.listdir(tree))} envs", "pairs": repeats,
                  "reference": "real SkillRL scripts" if scripts else "reference model"})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", help="existing rollout tree to reuse (skips generation)")
    p.add_argument("--envs", type=int, default=3000, help="env folders of the generated tree (4 files each)")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated tree")
    p.add_argument("--repeats", type=int, default=3, help="paired runs (reference, ours); 0 = ours once, here")
    p.add_argument("--phases", action="store_true",
                   help="instead: ours phase by phase on one core (CPU seconds each), and the bound a faster reader could reach")
    p.add_argument("--reference-scripts", default="", metavar="DIR",
                   help="pair with the real SkillRL scripts (parse_alfworld.py, dedupe_repetitions.py) in DIR, "
                        "e.g. the reference repository's preprocess/ folder, instead of bench/reference_model.py")
    p.add_argument("--tmp", default=None, help="where to generate the tree (default: system temp)")
    p.add_argument("--tool", default=TOOL, help="make_skillrl_rollouts.py")
    a = p.parse_args()
    if a.tree:
        if a.phases:
            phases(a.tree)
        else:
            measure(a.tree) if a.repeats == 0 else paired(a.tree, a.repeats, a.reference_scripts)
        return
    tmp = tempfile.mkdtemp(prefix="skillrl-tree-", dir=a.tmp)
    try:
        t0 = time.monotonic()
        subprocess.run([sys.executable, a.tool, tmp, "--envs", str(a.envs), "--seed", str(a.seed)], check=True,
                       timeout=CHILD_TIMEOUT_S)
        print(f"generated --envs {a.envs} --seed {a.seed} in {time.monotonic() - t0:.1f}s")
        if a.phases:
            subprocess.run([sys.executable, os.path.abspath(__file__), "--tree", tmp, "--phases"], check=True,
                           timeout=CHILD_TIMEOUT_S)
        elif a.repeats == 0:  # a fresh process, so the generator does not count in the child rusage
            subprocess.run([sys.executable, os.path.abspath(__file__), "--tree", tmp, "--repeats", "0"], check=True,
                           timeout=CHILD_TIMEOUT_S)
        else:
            paired(tmp, a.repeats, a.reference_scripts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

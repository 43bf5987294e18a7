"""Benchmark: parse + dedupe of a SkillRL rollout tree into Parquet, through ``runner.run_stage``.

Not a test (timings depend on the machine). Issue 3 targets: wall time <= 0.5x the reference
scripts on the same tree (``parse_alfworld.py`` + ``dedupe_repetitions.py``: ~5.9 s together for
``--envs 3000`` on these machines), peak RSS <= 300 MB and flat as the input grows 10x.

Usage::

    python bench/parse_dedupe.py                       # generates --envs 3000 --seed 1 (182 MB), then deletes it
    python bench/parse_dedupe.py --envs 30000 --tmp /tmp   # 1.8 GB tree
    python bench/parse_dedupe.py --tree DIR            # reuse an existing tree

Output: per-stage counts and seconds, ``ratio_to_reference=<wall/5.9>``, and as the last line
``wall_s=<x> peak_rss_mb=<y>``. ``wall_s`` covers both stages including the input fingerprint
(every input file is hashed) and the Parquet writes; tree generation is excluded.
``peak_rss_mb`` is the conservative figure ``maxrss(this process) + maxrss(largest worker)``
(forked workers share pages with the parent, so this over-counts); the peaks of the sampled sums
over the process tree are printed as ``sampled_tree_peak_rss_mb`` (counts shared pages once per
process) and ``sampled_tree_peak_pss_mb`` (proportional set size: shared pages split among the
processes that map them, the honest total; sampled every 0.1 s / 0.5 s, so short spikes can be
missed).
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REFERENCE_S = 5.9  # reference parse + dedupe on the --envs 3000 --seed 1 tree
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


def measure(tree: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.config import PipelineConfig
    from pipeline.core.runner import run_stage
    from pipeline.core.stage import StageContext

    store_root = tempfile.mkdtemp(prefix="skillpipe-bench-")
    stop, peak = threading.Event(), [0.0, 0.0]
    sampler = threading.Thread(target=_tree_rss_sampler, args=(stop, peak), daemon=True)
    sampler.start()
    try:
        ctx = StageContext(ArtifactStore(store_root, "bench"), PipelineConfig(), input_path=tree)
        t0 = time.monotonic()
        for stage in ("parse", "remove_loops"):
            s0 = time.monotonic()
            res = run_stage(stage, ctx, force=True, log=lambda s: None)
            c = res.manifest["counts"]
            print(f"{stage}: in={c['in']} out={c['out']} quarantined={c['quarantined']} "
                  f"{c['quarantine_reasons']} {time.monotonic() - s0:.2f}s")
        wall = time.monotonic() - t0
    finally:
        stop.set()
        sampler.join()
        shutil.rmtree(store_root, ignore_errors=True)
    self_ru, kids_ru = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    me, kids = self_ru.ru_maxrss / 1024, kids_ru.ru_maxrss / 1024
    cpu = self_ru.ru_utime + self_ru.ru_stime + kids_ru.ru_utime + kids_ru.ru_stime
    # CPU seconds do not depend on other load on the machine; wall time does.
    print(f"cpu_s={cpu:.2f} (main {self_ru.ru_utime + self_ru.ru_stime:.2f}, workers "
          f"{kids_ru.ru_utime + kids_ru.ru_stime:.2f}) cores={len(os.sched_getaffinity(0))}")
    print(f"main_peak_rss_mb={me:.0f} largest_worker_peak_rss_mb={kids:.0f} sampled_tree_peak_rss_mb={peak[0]:.0f} "
          f"sampled_tree_peak_pss_mb={peak[1]:.0f}")
    print(f"ratio_to_reference={wall / REFERENCE_S:.3f}")
    print(f"wall_s={wall:.2f} peak_rss_mb={me + kids:.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", help="existing rollout tree to reuse (skips generation)")
    p.add_argument("--envs", type=int, default=3000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tmp", default=None, help="where to generate the tree (default: system temp)")
    p.add_argument("--tool", default=TOOL, help="make_skillrl_rollouts.py")
    a = p.parse_args()
    if a.tree:
        measure(a.tree)
        return
    tmp = tempfile.mkdtemp(prefix="skillrl-tree-", dir=a.tmp)
    try:
        t0 = time.monotonic()
        subprocess.run([sys.executable, a.tool, tmp, "--envs", str(a.envs), "--seed", str(a.seed)], check=True)
        print(f"generated --envs {a.envs} --seed {a.seed} in {time.monotonic() - t0:.1f}s")
        # measure in a fresh process so the generator does not count in the child rusage
        subprocess.run([sys.executable, os.path.abspath(__file__), "--tree", tmp], check=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

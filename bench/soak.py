"""Soak: parse + remove_loops many times in fresh processes, each under a watchdog.

Each run is ``skillpipe run --input TREE --stages parse,remove_loops --force`` in its own process
(its own process group), on a SkillRL tree made by ``tests/fixtures/tools/make_skillrl_rollouts.py``
(``--envs 3000 --seed 1``: 12,000 files) in a temporary folder, or on ``--tree``. A run still
going after ``--limit-s`` is a **hang**: the watchdog records the stack of every process of its
group (``py-spy dump``, the dev extra; without it the kernel's view from ``/proc``: state, wait
channel, pending and caught signals) into ``--stacks``, kills the group and goes on. A run that
exits non-zero is a failure; a process of a finished run's group still alive 2 s later is a
leftover. ``--workers N`` sets ``$SKILLPIPE_WORKERS`` (1 = no pool: both stages in-process).

Targets: ``hangs=0`` over >= 100 runs, and p99 <= 1.5 x p50 of the run wall times (a tail that
long would be a run that stalled and then went on).

Run: ``.venv/bin/python bench/soak.py [--runs 100] [--workers 0] [--envs 3000] [--seed 1]
[--tree DIR] [--limit-s 120] [--stacks DIR]``. About 6 s a run on 2 shared cores. Prints one
line per hang or failure, a line with failures, leftovers, the p99/p50 ratio and the load
average, and last ``hangs=N runs=M p50_s=... p99_s=... max_s=...``.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(REPO, "tests", "fixtures", "tools", "make_skillrl_rollouts.py")
P99_OVER_P50 = 1.5


@dataclass
class Soak:
    """What the runs gave: wall seconds of finished runs, hangs, failures, leftovers."""
    times: list[float] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)      # path of each hang's stack file
    failures: list[str] = field(default_factory=list)   # "run i: rc N: last stderr line"
    leftovers: int = 0

    def percentile(self, q: float) -> float:
        """The ``q`` quantile (0-1) of the finished runs' wall times (nearest rank), 0 without runs."""
        if not self.times:
            return 0.0
        ordered = sorted(self.times)
        return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]

    def last_line(self, runs: int) -> str:
        """``hangs=N runs=M p50_s=... p99_s=... max_s=...``."""
        return (f"hangs={len(self.hangs)} runs={runs} p50_s={self.percentile(0.5):.2f} "
                f"p99_s={self.percentile(0.99):.2f} max_s={max(self.times, default=0.0):.2f}")


def group_pids(pgid: int) -> list[int]:
    """Live process ids of process group ``pgid`` (``pgrep``); zombies included."""
    out = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True, timeout=10).stdout
    return [int(p) for p in out.split()]


def proc_facts(pid: int) -> str:
    """The kernel's view of ``pid``: state, threads, signal masks, and each thread's wait channel."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            keep = [ln for ln in f.read().splitlines()
                    if ln.split(":")[0] in ("Name", "State", "PPid", "Threads", "SigPnd", "ShdPnd", "SigBlk", "SigCgt")]
        chans = []
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):
            with open(f"/proc/{pid}/task/{tid}/wchan", encoding="utf-8") as f:
                chans.append(f"thread {tid} waits in {f.read().strip() or '-'}")
        return "\n".join(keep + chans)
    except OSError as e:
        return f"(gone: {e})"


def stack_of(pid: int) -> str:
    """``py-spy dump`` of ``pid`` (native frames too) when py-spy is installed, else :func:`proc_facts`."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    facts = proc_facts(pid)
    if not os.path.exists(spy):
        return facts + "\n(py-spy not installed: pip install -e '.[dev]')"
    try:
        dump = subprocess.run([spy, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
        return facts + "\n" + dump.stdout + dump.stderr
    except subprocess.TimeoutExpired:
        return facts + "\n(py-spy dump gave no answer within 60 s)"


def record_hang(proc: subprocess.Popen, run: int, stacks: str, limit_s: float) -> str:
    """Write the stacks of ``proc``'s process group to ``stacks/hang-<run>.txt``, kill the group;
    returns the file's path."""
    os.makedirs(stacks, exist_ok=True)
    path = os.path.join(stacks, f"hang-{run:04d}.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"run {run}: still running after {limit_s:g} s; load average {os.getloadavg()}\n")
        for pid in group_pids(proc.pid):
            f.write(f"\n===== pid {pid} =====\n{stack_of(pid)}\n")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    return path


def one_run(cmd: list[str], env: dict, run: int, a: argparse.Namespace, soak: Soak) -> None:
    """Run ``cmd`` once under the watchdog and add its outcome to ``soak``."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=a.limit_s)
    except subprocess.TimeoutExpired:
        soak.hangs.append(record_hang(proc, run, a.stacks, a.limit_s))
        print(f"run {run}: HANG (> {a.limit_s:g} s), stacks in {soak.hangs[-1]}", flush=True)
        return
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        last = (err.decode(errors="replace").strip().splitlines() or [""])[-1]
        soak.failures.append(f"run {run}: rc {proc.returncode}: {last[:300]}")
        print(soak.failures[-1], flush=True)
        return
    soak.times.append(wall)
    time.sleep(0.05)
    if group_pids(proc.pid):
        time.sleep(2.0)
        left = group_pids(proc.pid)
        soak.leftovers += len(left)
        if left:
            print(f"run {run}: processes {left} outlived it", flush=True)
            os.killpg(proc.pid, signal.SIGKILL)


def soak_runs(tree: str, work: str, a: argparse.Namespace) -> Soak:
    """``a.runs`` watched runs of parse + remove_loops on ``tree`` (outputs under ``work``)."""
    env = {**os.environ, "PYTHONPATH": REPO, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if a.workers:
        env["SKILLPIPE_WORKERS"] = str(a.workers)
    cmd = [sys.executable, "-m", "pipeline.cli", "run", "--input", tree, "--stages", "parse,remove_loops",
           "--root", work, "--run-id", "soak", "--force"]
    soak = Soak()
    for run in range(a.runs):
        one_run(cmd, env, run, a, soak)
    return soak


def summary(soak: Soak, a: argparse.Namespace) -> str:
    """The line before the last: failures, leftovers, the tail ratio against its target, load."""
    p50, p99 = soak.percentile(0.5), soak.percentile(0.99)
    ratio = p99 / p50 if p50 else 0.0
    return (f"workers={a.workers or 'auto'} failures={len(soak.failures)} leftovers={soak.leftovers} "
            f"p99/p50={ratio:.2f} (target <= {P99_OVER_P50}) load_avg_1/5/15={'/'.join(f'{x:.2f}' for x in os.getloadavg())}")


def make_tree(out: str, envs: int, seed: int) -> str:
    """Generate the SkillRL tree of ``envs`` environments into ``out``; returns ``out``."""
    subprocess.run([sys.executable, TOOL, out, "--envs", str(envs), "--seed", str(seed)], check=True,
                   stdout=subprocess.DEVNULL, timeout=600)
    return out


def reliability_section(work: str, runs: int = 20, envs: int = 3000) -> tuple[str, str, str]:
    """The soak section of ``bench/reliability.py``: ``runs`` watched runs on the default pool
    size, generated tree of ``envs`` environments under ``work``; ``(title, Markdown table,
    verdict line)``."""
    a = argparse.Namespace(runs=runs, workers=0, limit_s=120.0, stacks=os.path.join(work, "stacks"))
    soak = soak_runs(make_tree(os.path.join(work, "tree"), envs, 1), os.path.join(work, "root"), a)
    p50, p99 = soak.percentile(0.5), soak.percentile(0.99)
    ok = not soak.hangs and not soak.failures and not soak.leftovers and p99 <= P99_OVER_P50 * p50
    table = ("| runs | hangs | failures | leftover processes | p50 s | p99 s | max s | p99/p50 |\n"
             "|---|---|---|---|---|---|---|---|\n"
             f"| {runs} | {len(soak.hangs)} | {len(soak.failures)} | {soak.leftovers} | {p50:.2f} | {p99:.2f} "
             f"| {max(soak.times, default=0.0):.2f} | {p99 / p50 if p50 else 0.0:.2f} |")
    hangs = f"; stacks: {', '.join(soak.hangs)}" if soak.hangs else ""
    verdict = (f"{'OK' if ok else 'NOT OK'}: hangs={len(soak.hangs)} in {runs} runs, p99/p50={p99 / p50 if p50 else 0.0:.2f} "
               f"(target <= {P99_OVER_P50}), load average {'/'.join(f'{x:.2f}' for x in os.getloadavg())}{hangs}")
    return (f"5. soak: parse + remove_loops {runs} times on {envs * 4:,} files, each under a watchdog", table, verdict)


def main() -> None:
    """Command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--workers", type=int, default=0, help="pool workers ($SKILLPIPE_WORKERS; 0 = one per CPU)")
    ap.add_argument("--envs", type=int, default=3000, help="environments of the generated tree (4 files each)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tree", default="", help="an existing input tree instead of a generated one")
    ap.add_argument("--limit-s", type=float, default=120.0, help="a run still going after this is a hang")
    ap.add_argument("--stacks", default="", help="folder for the hangs' stacks (default: soak-stacks in the temp folder's parent)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="skillpipe-soak-") as work:
        a.stacks = a.stacks or os.path.join(tempfile.gettempdir(), "skillpipe-soak-stacks")
        tree = a.tree or make_tree(os.path.join(work, "tree"), a.envs, a.seed)
        soak = soak_runs(tree, os.path.join(work, "root"), a)
    print(summary(soak, a))
    print(soak.last_line(a.runs))
    sys.path.insert(0, REPO)
    from bench.results import write_result  # the result file (bench/results.py)
    p50, p99 = soak.percentile(0.5), soak.percentile(0.99)
    write_result("soak", {"runs": a.runs, "hangs": len(soak.hangs), "failures": len(soak.failures), "leftovers": soak.leftovers,
                          "p50_s": round(p50, 2), "p99_s": round(p99, 2), "max_s": round(max(soak.times, default=0.0), 2),
                          "p99_over_p50": round(p99 / p50, 2) if p50 else None},
                 {"tree": a.tree or f"{a.envs} envs, seed {a.seed}", "runs": a.runs, "workers": a.workers or "default",
                  "limit_s": a.limit_s})


if __name__ == "__main__":
    main()

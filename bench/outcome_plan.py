"""The outcome experiment's plan: which arm and SFT seed runs, what it should cost, how far it is.

* :func:`plan_units`: one **unit** per arm and SFT seed (SFT then the held-out evaluation; the
  base model: the evaluation alone), seed-major so that an interrupted run has every arm's seed 0
  first.
* :func:`timings` reads the phase times of the newest full outcome run in ``bench/results/``
  (:mod:`bench.results`) and :func:`estimate` scales them to the planned budget: data stages by
  training games, SFT by steps x batch, evaluation by held-out games (linear, an approximation).
  Parallel workers share the cores, so a recorded worker phase is converted to core-seconds with
  the run's ``3-4 arms (wall)`` x ``min(jobs, cores)`` / sum of its worker phases.
* :class:`Progress` prints one line per phase or unit started and finished, with the elapsed time
  and an ETA from the estimates.
"""
from __future__ import annotations

import dataclasses
import os
import re
import time
from typing import Any, Callable, Iterable

from bench.outcome_arms import Arm

#: Minutes the default experiment should take on the 2-core development machine.
TARGET_MIN = 150
#: Wall seconds assumed for the usefulness scoring of the gated arm (bank items on held-out steps,
#: then every think) until a run records its ``2b data (gated arm)`` phase: not measured yet.
USEFULNESS_ASSUMED_S = 300.0


@dataclasses.dataclass(frozen=True)
class Unit:
    """One arm and SFT seed (``seed`` None: the base model's evaluation); ``est_s`` its estimated
    core-seconds."""
    arm: str
    seed: int | None
    run_id: str
    est_s: float = 0.0

    @property
    def label(self) -> str:
        return self.arm if self.seed is None else f"{self.arm} seed {self.seed}"


def plan_units(arms: Iterable[Arm], run_id: str, seeds: int) -> list[Unit]:
    """The units of ``arms`` with ``seeds`` SFT seeds for the seeded arms (:meth:`Arm.seeds`):
    trained arms seed by seed (all seed 0s, then all seed 1s...), the base model's evaluation last."""
    arms = list(arms)
    units = []
    for k in range(max(seeds, 1)):
        units += [Unit(w.name, k, w.run_id(run_id)) for w in arms if k in w.seeds(seeds)]
    return units + [Unit(w.name, None, w.run_id(run_id)) for w in arms if not w.trained]


@dataclasses.dataclass(frozen=True)
class Timings:
    """Recorded phase times (seconds) of one outcome run and the budget they were measured at."""
    source: str
    train_tasks: int
    sft_steps: int
    sft_batch: int
    eval_episodes: int
    rollouts_s: float
    skills_data_s: float
    thinks_data_s: float
    gated_data_s: float
    gated_measured: bool
    sft_core_s: float
    eval_core_s: float
    base_eval_core_s: float


#: The run these defaults come from (used when bench/results has no full outcome run).
BUILTIN = "bench/results/2026-12-06-134100-outcome.json"
_BUILTIN_WALL = {"1 gold/noisy rollouts": 5, "2 data pipeline (skills arm)": 919, "2b data (thinks arm)": 530,
                 "4 eval base": 1167, "3 SFT (actions)": 615, "4 eval actions": 556, "3 SFT (thinks)": 488,
                 "4 eval thinks": 757, "3 SFT (skills)": 647, "4 eval skills": 950, "3-4 arms (wall)": 1604,
                 "skills": 78, "distill (skills arm)": 636}
_BUILTIN_DOC = {"file": os.path.basename(BUILTIN), "machine": {"cores": 2},
                "budget": {"train_tasks": 12, "sft_steps": 24, "eval_episodes": 60, "jobs": 4},
                "figures": {"wall_s": _BUILTIN_WALL}}
_SFT = re.compile(r"^3 SFT \((.+)\)$")
_EVAL = re.compile(r"^4 eval (.+)$")


def _usable(doc: dict[str, Any]) -> bool:
    wall = (doc.get("figures") or {}).get("wall_s") or {}
    return (doc.get("name") == "outcome" and "3-4 arms (wall)" in wall and "2 data pipeline (skills arm)" in wall
            and any(_SFT.match(k) for k in wall) and (doc.get("budget") or {}).get("eval_episodes", 0) >= 30)


def timings(docs: list[dict[str, Any]] | None = None) -> Timings:
    """:class:`Timings` of the newest usable outcome result in ``docs`` (default
    :func:`bench.results.load_results`; usable: it records the skills arm's data, SFT and the
    arms' wall time, with 30 or more held-out games), else of :data:`BUILTIN`."""
    if docs is None:
        from bench.results import load_results
        docs = load_results()
    doc = next((d for d in reversed(docs) if _usable(d)), _BUILTIN_DOC)
    wall, budget = doc["figures"]["wall_s"], doc.get("budget") or {}
    cores = int((doc.get("machine") or {}).get("cores") or 2)
    parallel = max(1, min(int(budget.get("jobs") or 1), cores))
    sft = [v for k, v in wall.items() if _SFT.match(k)]
    evals = {_EVAL.match(k).group(1): v for k, v in wall.items() if _EVAL.match(k) and "GRPO" not in k}
    worker = sum(sft) + sum(evals.values())
    factor = wall["3-4 arms (wall)"] * parallel / worker if worker else 1.0
    trained = [v for k, v in evals.items() if k != "base"] or list(evals.values()) or [0.0]
    eval_core = sum(trained) / len(trained) * factor
    gated = wall.get("2b data (gated arm)")
    return Timings(
        source=doc.get("file", BUILTIN), train_tasks=int(budget.get("train_tasks") or 12),
        sft_steps=int(budget.get("sft_steps") or 24), sft_batch=int(budget.get("sft_batch") or 2),
        eval_episodes=int(budget.get("eval_episodes") or 60), rollouts_s=float(wall.get("1 gold/noisy rollouts", 0)),
        skills_data_s=float(wall["2 data pipeline (skills arm)"]),
        thinks_data_s=float(wall.get("2b data (thinks arm)", wall.get("distill (skills arm)", 0))),
        gated_data_s=float(gated) if gated is not None else
        float(wall.get("skills", 0)) + float(wall.get("distill (skills arm)", wall.get("2b data (thinks arm)", 0)))
        + USEFULNESS_ASSUMED_S,
        gated_measured=gated is not None, sft_core_s=sum(sft) / len(sft) * factor, eval_core_s=eval_core,
        base_eval_core_s=evals["base"] * factor if "base" in evals else eval_core)


def estimate(a: Any, units: list[Unit], t: Timings, cores: int) -> tuple[list[tuple[str, float]], list[Unit], int]:
    """``(phases, units, parallel)``: the wall seconds of each phase (data phases one after the
    other, then the units ``parallel`` = min(``a.jobs``, ``cores``) at a time) and the units with
    their core-seconds, for the budget ``a`` (train_tasks, sft_steps, sft_batch, eval_episodes,
    arms, jobs) from the recorded :class:`Timings` ``t``."""
    data = a.train_tasks / t.train_tasks
    sft = a.sft_steps * a.sft_batch / (t.sft_steps * t.sft_batch)
    games = a.eval_episodes / t.eval_episodes
    units = [dataclasses.replace(u, est_s=t.base_eval_core_s * games if u.seed is None else
                                 t.sft_core_s * sft + t.eval_core_s * games) for u in units]
    parallel = max(1, min(a.jobs, cores))
    phases = [("1 gold/noisy rollouts", t.rollouts_s * data), ("2 data pipeline (skills arm)", t.skills_data_s * data)]
    phases += [("2b data (thinks arm)", t.thinks_data_s * data)] if "thinks" in a.arms else []
    phases += [("2b data (gated arm)", t.gated_data_s * data)] if "gated" in a.arms else []
    phases.append((f"3-4 SFT + eval ({len(units)} units, {parallel} at a time)",
                   sum(u.est_s for u in units) / parallel))
    return phases, units, parallel


def fmt_s(sec: float) -> str:
    """``1h05m``, ``12m03s`` or ``45s``."""
    sec = max(0, int(round(sec)))
    h, m, s = sec // 3600, sec // 60 % 60, sec % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def plan_text(a: Any, arms: list[Arm], phases: list[tuple[str, float]], units: list[Unit], t: Timings,
              parallel: int, target_min: float = TARGET_MIN) -> list[str]:
    """The plan printed at the start (and alone with ``--dry-run``): the arms, the units, the
    estimated minutes per phase and in all against ``target_min``."""
    lines = [f"outcome plan: {len(arms)} arms, {len(units)} SFT/eval units, {a.eval_episodes} held-out games each "
             f"(dev seeds {a.eval_seed0}..{a.eval_seed0 + a.eval_episodes - 1}), {a.train_tasks} training games, "
             f"SFT {a.sft_steps} steps x batch {a.sft_batch}",
             f"  {'arm':8s} {'seeds':8s} {'usefulness':10s} {'data stages it runs':45s} run id"]
    for w in arms:
        seeds = ",".join(map(str, w.seeds(a.seeds))) or "-"
        stages = ("(none: the skills arm's prompts)" if not w.trained else
                  " ".join(w.own_stages) if len(w.own_stages) < 6 else "all")
        lines.append(f"  {w.name:8s} {seeds:8s} {w.usefulness:10s} {stages:45s} {w.run_id(a.run_id)}")
    lines.append(f"estimated wall time (phase times of {t.source} scaled to this budget; {a.jobs} workers, "
                 f"{parallel} units' worth of cores at a time):")
    for name, sec in phases:
        note = " (usefulness scoring assumed, not measured yet)" if "gated" in name and not t.gated_measured else ""
        lines.append(f"  {name:52s} {sec / 60:6.1f} min{note}")
    sft, games = a.sft_steps * a.sft_batch / (t.sft_steps * t.sft_batch), a.eval_episodes / t.eval_episodes
    lines.append(f"  (a unit, in core-minutes: SFT {t.sft_core_s * sft / 60:.1f} + eval {t.eval_core_s * games / 60:.1f}; "
                 f"the base model's eval {t.base_eval_core_s * games / 60:.1f})")
    total = sum(s for _, s in phases) / 60
    over = total > target_min
    lines.append(f"  {'total':52s} {total:6.1f} min; target {target_min:g} min: "
                 + ("OVER: cut --train-tasks or --sft-steps, never --eval-episodes or --seeds" if over else "within"))
    return lines


class Progress:
    """Progress lines with an ETA. ``data`` are the data phases (name, estimated wall seconds),
    run one after the other; ``units`` run ``parallel`` at a time (their ``est_s`` core-seconds).
    ``clock`` and ``out`` are injectable for tests."""

    def __init__(self, data: list[tuple[str, float]], units: list[Unit], parallel: int,
                 clock: Callable[[], float] = time.monotonic, out: Callable[[str], None] = print):
        self.est = {**dict(data), **{u.label: u.est_s for u in units}}
        self.units = {u.label for u in units}
        self.parallel, self.clock, self.out = max(1, parallel), clock, out
        self.t0 = clock()
        self.started: dict[str, float] = {}
        self.done: set[str] = set()

    def eta_s(self) -> float:
        """Seconds left by the estimates: data phases not finished (less what a running one has
        spent), then the units' core-seconds left over the parallel workers (a running unit is
        credited its share of the cores since it started)."""
        now = self.clock()
        running = [k for k in self.started if k not in self.done and k in self.units]
        data = units = 0.0
        for k, est in self.est.items():
            if k in self.done:
                continue
            spent = now - self.started[k] if k in self.started else 0.0
            if k in self.units:
                units += max(0.0, est - spent * self.parallel / max(len(running), self.parallel))
            else:
                data += max(0.0, est - spent)
        return data + units / self.parallel

    def _line(self, text: str) -> None:
        self.out(f"[outcome {fmt_s(self.clock() - self.t0)}] {text}; ETA {fmt_s(self.eta_s())}")

    def start(self, name: str) -> None:
        self.started[name] = self.clock()
        n = f" (unit {sum(k in self.units for k in self.started)}/{len(self.units)})" if name in self.units else ""
        self._line(f"started {name}{n}")

    def finish(self, name: str, reused: bool = False) -> None:
        took = self.clock() - self.started.get(name, self.clock())
        self.done.add(name)
        how = " (reused: fingerprints unchanged)" if reused else ""
        n = f"; {len(self.done & self.units)}/{len(self.units)} units done" if name in self.units else ""
        self._line(f"finished {name} in {fmt_s(took)}{how}{n}")


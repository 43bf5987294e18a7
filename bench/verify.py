"""Precision and recall of the verify stage's rules, on valid trajectories made invalid on purpose.

    .venv/bin/python bench/verify.py                                  # the shipped sample + 40 TextWorld games
    .venv/bin/python bench/verify.py --real ../shared/data/real       # every clean real record of a data folder

Clean bases:

* **TextWorld Express gold rollouts** (``--tw-games`` per game of ``twc`` and ``coin``): the
  engine's own plan, played in the engine, so true by construction. Their corruptions are labelled
  by a *second* engine (its own JVM) replaying the changed record: the steps where its answer
  differs from the record, or where the action is not valid, are the truth; the checker (another
  JVM) must find exactly those. Uncorrupted, they must give no finding at all.
* **Real ALFWorld and WebShop records** (``--real``, default ``data/samples``): the successes the
  checker finds clean (ReAct's ALFWorld transcripts are real game output; the ETO and WebShop
  records are clean by the checker, so they test the corruptions, not the base).

Corruptions (:mod:`bench.verify_corrupt`): ALFWorld drop a ``take``, rename a receptacle
(``sink basin 1``), swap ``go to R`` with the ``take`` from R after it, add a second ``take``,
drop the last action, insert a refused command, insert a command outside the grammar, hide an
object in a later listing, heat/cool/clean with the wrong appliance; WebShop click an option or
product that is not shown, swap the search with the click after it, drop the purchase, insert a
refused click, search on an item page, an action outside the grammar; Search/QA drop the answer,
a search outside the syntax, a wrong answer (records with a gold answer); TextWorld drop a
``take``, swap two steps, add an invalid action, drop the last action. Not measured here (no
corruption makes them alone; each has a unit test on a changed real record):
``receptacle_closed``, ``object_not_there`` and SkillRL's ``not_admissible``.

Scoring per rule R: a finding of R on a variant at its broken step counts as a true positive
when R is the expected rule or another rule true there (``Variant.also``); a finding of R on an
uncorrupted base, before the broken step, or at it when R is not true there, is a false positive;
findings after the broken step are the record's later consequences (counted, not scored). Recall:
variants expecting R where R was found at the broken step. The last line gives the smallest
precision and recall over the rules and the findings on uncorrupted gold rollouts.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import verify_corrupt as vc  # noqa: E402
from pipeline.core.records import Step, Trajectory  # noqa: E402
from pipeline.verify import AlfworldChecker, SearchChecker, TextworldChecker, WebshopChecker  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIONS = {"success_threshold": 1.0, "qa_min_f1": 1.0}


def real_bases(folder: str) -> dict[str, list[Trajectory]]:
    """Clean successes of ``folder`` per checker: ``{"alfworld": [...], "webshop": [...], "search": [...]}``."""
    from pipeline.formats.discover import list_input_files, read_file
    out: dict[str, list[Trajectory]] = {"alfworld": [], "webshop": [], "search": []}
    checkers = {"alfworld": AlfworldChecker(), "webshop": WebshopChecker(), "search": SearchChecker()}
    for path in list_input_files(folder):
        for t in read_file(path):
            if not isinstance(t, Trajectory) or not t.success:
                continue
            for name, c in checkers.items():
                if c.applies(t) and _clean(c, t):
                    out[name].append(t)
    return out


def _clean(checker, t: Trajectory) -> bool:
    v = checker.check(t, OPTIONS)
    return not v.findings and v.goal_reached is not False


def tw_bases(games: int) -> list[Trajectory]:
    """Gold rollouts of ``games`` seeds of ``twc`` and ``coin`` (default one-room parameters)."""
    from pipeline.envs.sim.textworld import EnvTask, TextWorldExpressEnv
    from pipeline.verify.textworld import gold_trajectory
    with TextWorldExpressEnv() as env:
        return [gold_trajectory(env, EnvTask(game, seed)) for game in ("twc", "coin") for seed in range(games)]


def tw_variants(t: Trajectory) -> list[vc.Variant]:
    """TextWorld corruptions of ``t`` (their truth is set later by a second engine)."""
    out = []
    takes = [i for i, s in enumerate(t.steps) if s.action and s.action.startswith("take")]
    if takes:
        i = takes[0]
        out.append(vc.Variant("drop_take", vc.renumber(t, t.steps[:i] + t.steps[i + 1:]), i, ""))
    if len(t.steps) > 3:
        steps = list(t.steps)
        steps[1], steps[2] = steps[2], steps[1]
        out.append(vc.Variant("swap_steps", vc.renumber(t, steps), 1, ""))
    bad = Step(1, "eat the table", "I'm not sure what you mean.")
    out.append(vc.Variant("invalid_action", vc.renumber(t, t.steps[:1] + [bad] + t.steps[1:]), 1, ""))
    last = vc.drop_last(t)
    return out + ([last] if last else [])


def tw_truth(variants: list[vc.Variant]) -> list[vc.Variant]:
    """Each variant labelled by a fresh engine: the first step whose action is not valid or whose
    recorded observation differs from the engine's, and the rules true there (or the goal)."""
    from pipeline.envs.sim.textworld import TextWorldExpressEnv
    from pipeline.verify.textworld import _norm, task_of
    out = []
    with TextWorldExpressEnv() as env:
        for v in variants:
            r = env.reset(task_of(v.traj))
            valid, rules, won = list(r.admissible_actions), (), False
            for s in v.traj.steps[1:]:
                t = env.step(s.action or "")
                rules = (("env_rejected",) if s.action not in valid else ()) + \
                    (("observation_mismatch",) if _norm(t.observation) != _norm(s.observation) else ())
                if rules:
                    out.append(dataclasses.replace(v, step=s.index, expected=rules[0], also=rules[1:]))
                    break
                valid, won = list(t.admissible_actions), t.won
            if not rules and not won:
                out.append(dataclasses.replace(v, step=v.traj.steps[-1].index, expected="goal_not_reached"))
            elif not rules:
                out.append(dataclasses.replace(v, expected=""))  # the engine accepts it: not a corruption
    return out


@dataclasses.dataclass
class Score:
    """Counts of one ``checker.rule``."""
    expected: int = 0
    tp: int = 0
    fp: int = 0
    found: int = 0         # variants expecting the rule where it was found at the broken step
    later: int = 0         # findings after the broken step (consequences)


def score(checker, bases: list[Trajectory], variants: list[vc.Variant], table: dict[str, Score]) -> int:
    """Add ``checker``'s findings on ``bases`` and ``variants`` to ``table``; returns the number
    of findings on the uncorrupted ``bases``."""
    on_bases = 0
    for t in bases:
        for f in checker.check(t, OPTIONS).findings:
            table[f"{checker.name}.{f.rule}"].fp += 1
            on_bases += 1
    for v in variants:
        true_here = {v.expected, *v.also} - {""}
        if v.expected:
            table[f"{checker.name}.{v.expected}"].expected += 1
        hit = set()
        for f in checker.check(v.traj, OPTIONS).findings:
            s = table[f"{checker.name}.{f.rule}"]
            if f.index > v.step and v.expected:
                s.later += 1
            elif f.index == v.step and f.rule in true_here:
                if f.rule not in hit:
                    s.tp += 1
                    hit.add(f.rule)
            else:
                s.fp += 1
        if v.expected in hit:
            table[f"{checker.name}.{v.expected}"].found += 1
    return on_bases


def report(table: dict[str, Score], kinds: Counter, gold_flags: int, n_gold: int) -> None:
    """Print the per-rule table and the summary line."""
    print(f"variants: {dict(sorted(kinds.items()))}")
    print(f"{'rule':42s} {'expected':>8s} {'tp':>5s} {'fp':>5s} {'precision':>9s} {'recall':>7s} {'later':>6s}")
    precisions, recalls = [], []
    for rule, s in sorted(table.items()):
        p = s.tp / (s.tp + s.fp) if s.tp + s.fp else float("nan")
        r = s.found / s.expected if s.expected else float("nan")
        precisions += [p] if s.tp + s.fp else []
        recalls += [r] if s.expected else []
        print(f"{rule:42s} {s.expected:8d} {s.tp:5d} {s.fp:5d} {p:9.3f} {r:7.3f} {s.later:6d}")
    print(f"findings on {n_gold} uncorrupted TextWorld gold rollouts: {gold_flags}")
    print(f"verify: min_precision={min(precisions):.3f} min_recall={min(recalls):.3f} gold_flags={gold_flags}")
    from bench.results import write_result  # the result file (bench/results.py)
    write_result("verify", {"min_precision": round(min(precisions), 3), "min_recall": round(min(recalls), 3),
                            "gold_flags": gold_flags, "variants": sum(kinds.values())}, {"textworld_gold": n_gold})


def main(argv: list[str] | None = None) -> None:
    """Build the bases and variants, score every checker, print the table (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--real", default=os.path.join(REPO, "data", "samples"), help="folder of real records")
    ap.add_argument("--tw-games", type=int, default=20, help="TextWorld Express seeds per game (twc, coin)")
    args = ap.parse_args(argv)
    table: dict[str, Score] = defaultdict(Score)
    kinds: Counter = Counter()
    bases = real_bases(args.real)
    for name, checker, corruptions in (("alfworld", AlfworldChecker(), vc.ALFWORLD),
                                       ("webshop", WebshopChecker(), vc.WEBSHOP),
                                       ("search", SearchChecker(), vc.SEARCH)):
        variants = [v for t in bases[name] for c in corruptions if (v := c(t)) is not None]
        kinds.update(f"{name}.{v.kind}" for v in variants)
        score(checker, bases[name], variants, table)
    gold = tw_bases(args.tw_games)
    variants = [v for v in tw_truth([v for t in gold for v in tw_variants(t)]) if v.expected]
    kinds.update(f"textworld.{v.kind}" for v in variants)
    checker = TextworldChecker()
    try:
        gold_flags = score(checker, gold, variants, table)
    finally:
        checker.close()
    print(f"clean bases: alfworld {len(bases['alfworld'])}, webshop {len(bases['webshop'])}, "
          f"search {len(bases['search'])}, "
          f"textworld gold {len(gold)} (won {sum(t.success for t in gold)})")
    report(table, kinds, gold_flags, len(gold))


if __name__ == "__main__":
    main()

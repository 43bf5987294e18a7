"""Game-by-game statistics of the outcome experiment (bench/outcome.py): pooled success over SFT
seeds and held-out games, and paired differences between arms.

Input shape, per arm: ``{seed: {game: won}}`` (:func:`per_game` of each seed's evaluation rows;
``game`` is the row's ``instance``, e.g. ``coin-dev-100``; an untrained arm has one "seed"). Every
arm plays the same held-out games, so two arms can be compared game by game.

* **Share of a game**: the arm's wins on that game divided by its seeds (0, 1/3, 2/3 or 1 with three
  seeds).
* **Pooled success** of an arm (:func:`pooled`): the mean share over games, which is wins / (seeds x
  games) when every seed played every game. Its 95 % interval is a **percentile bootstrap over
  games**: the games are resampled with replacement, each resampled game bringing all its seeds,
  since the seeds of one game are not independent draws (an easy game is won by every seed).
* **Paired difference** X - Y (:func:`paired`): per game, X's share minus Y's share; the estimate
  is their mean over the games both arms played, and its 95 % interval the same percentile
  bootstrap over games of the per-game differences (the pairing is kept: a resampled game brings
  both arms' results). The interval **excludes 0** when both ends are on the same side of 0.

The bootstrap draws :data:`N_BOOT` resamples with ``random.Random(seed)`` (default seed 0), so a
rerun prints the same interval; ends are the ``floor(B * 0.025)``-th and ``ceil(B * 0.975)``-th
smallest resampled means (1-based). Reference: B. Efron and R. Tibshirani, *An Introduction to the
Bootstrap* (1993), ch. 13 (percentile interval).
"""
from __future__ import annotations

import math
import random
from typing import Any, Iterable, Mapping

#: Bootstrap resamples of every interval.
N_BOOT = 10_000
#: Seed of the bootstrap's random.Random.
BOOT_SEED = 0
#: The paired comparisons the experiment reports: (arm, arm it is compared with, what the difference measures).
PAIRED = (("gated", "actions", "thinks and a bank that passed the usefulness gate, against plain demonstrations"),
          ("gated", "skills", "the usefulness gate (same teacher, bank gated or not)"),
          ("skills", "actions", "ungated thinks and bank, against plain demonstrations"))

PerSeed = Mapping[int, Mapping[str, bool]]


def per_game(rows: Iterable[Mapping[str, Any]]) -> dict[str, bool]:
    """``{instance: won}`` of one evaluation's episode rows (``sft.eval.EPISODE_SCHEMA``).
    Raises ``ValueError`` when a game occurs twice (an evaluation plays each game once)."""
    out: dict[str, bool] = {}
    for r in rows:
        game = str(r["instance"])
        if game in out:
            raise ValueError(f"game {game} occurs twice in one evaluation")
        out[game] = bool(r["won"])
    return out


def shares(results: PerSeed) -> dict[str, float]:
    """``{game: wins over seeds / seeds that played it}`` over every game any seed played."""
    games = sorted({g for by_game in results.values() for g in by_game})
    out = {}
    for g in games:
        played = [by_game[g] for by_game in results.values() if g in by_game]
        out[g] = sum(played) / len(played)
    return out


def bootstrap_ci(values: list[float], n_boot: int = N_BOOT, seed: int = BOOT_SEED,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (module docstring): ``n_boot``
    resamples of ``len(values)`` drawn with replacement by ``random.Random(seed)``. ``(nan, nan)``
    for no value."""
    if not values:
        return math.nan, math.nan
    rng, n = random.Random(seed), len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(n_boot))
    alpha = (1 - level) / 2
    lo = means[max(math.floor(n_boot * alpha), 1) - 1]
    hi = means[min(math.ceil(n_boot * (1 - alpha)), n_boot) - 1]
    return lo, hi


def pooled(results: PerSeed, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict[str, Any]:
    """One arm pooled over seeds and games: ``{"seeds", "games", "episodes", "wins", "rate",
    "ci95": [lo, hi], "per_seed": {seed: {"wins", "episodes", "rate"}}}`` (rates rounded to 4
    places; ``rate`` is the mean share over games)."""
    sh = shares(results)
    lo, hi = bootstrap_ci(list(sh.values()), n_boot, seed)
    wins = sum(sum(g.values()) for g in results.values())
    episodes = sum(len(g) for g in results.values())
    return {"seeds": len(results), "games": len(sh), "episodes": episodes, "wins": wins,
            "rate": _r(sum(sh.values()) / len(sh)) if sh else None, "ci95": [_r(lo), _r(hi)] if sh else None,
            "per_seed": {s: {"wins": sum(g.values()), "episodes": len(g),
                             "rate": _r(sum(g.values()) / len(g)) if g else None} for s, g in sorted(results.items())}}


def paired(x: PerSeed, y: PerSeed, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict[str, Any]:
    """X - Y game by game (module docstring): ``{"games", "seeds": [x's, y's], "diff", "ci95",
    "excludes_zero", "x_better", "y_better", "tied"}`` (the last three count games by the sign of
    their difference). Raises ``ValueError`` when the arms share no game."""
    sx, sy = shares(x), shares(y)
    games = sorted(set(sx) & set(sy))
    if not games:
        raise ValueError("the two arms played no game in common")
    d = [sx[g] - sy[g] for g in games]
    lo, hi = bootstrap_ci(d, n_boot, seed)
    return {"games": len(games), "seeds": [len(x), len(y)], "diff": _r(sum(d) / len(d)), "ci95": [_r(lo), _r(hi)],
            "excludes_zero": lo > 0 or hi < 0, "x_better": sum(v > 0 for v in d), "y_better": sum(v < 0 for v in d),
            "tied": sum(v == 0 for v in d)}


def _r(v: float) -> float:
    return round(v, 4)


def seed_line(arm: str, seed: int | None, s: Mapping[str, Any]) -> str:
    """``<arm> seed <k>: wins/games = rate`` (``<arm>:`` for an arm without SFT seed)."""
    who = arm if seed is None else f"{arm} seed {seed}"
    return f"{who}: {s['wins']}/{s['episodes']} = {s['rate']:.3f}"


def pooled_line(arm: str, p: Mapping[str, Any]) -> str:
    """``outcome: <arm> pooled <rate> over <seeds> seed(s) x <games> games [lo, hi] (bootstrap over games)``."""
    lo, hi = p["ci95"]
    return (f"outcome: {arm} pooled {p['rate']:.3f} ({p['wins']}/{p['episodes']}) over {p['seeds']} "
            f"seed{'s' if p['seeds'] != 1 else ''} x {p['games']} games, 95% bootstrap interval over games "
            f"[{lo:.3f}, {hi:.3f}]")


def paired_line(x: str, y: str, what: str, p: Mapping[str, Any]) -> str:
    """The verdict line of one paired comparison: the difference, its interval and whether the
    interval excludes 0 (and which arm is better then)."""
    lo, hi = p["ci95"]
    if p["excludes_zero"]:
        how = f"the interval excludes 0: {x if p['diff'] > 0 else y} better"
    else:
        how = "the interval includes 0: no difference shown"
    return (f"outcome: {x} vs {y} ({what}): paired difference {p['diff']:+.3f} per game over {p['games']} games "
            f"({p['seeds'][0]} vs {p['seeds'][1]} seeds; {x} better on {p['x_better']}, {y} on {p['y_better']}, "
            f"{p['tied']} tied), 95% paired bootstrap interval [{lo:+.3f}, {hi:+.3f}]; {how}")


def verdict(game: str, results: Mapping[str, PerSeed | None], n_boot: int = N_BOOT,
            seed: int = BOOT_SEED) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """``(lines, pooled by arm, paired by "x-y")`` of every arm's results (None: the arm had no SFT
    pair, so nothing was trained): one line per arm without pairs, one pooled line per evaluated
    arm, the best arm by pooled rate, then each :data:`PAIRED` comparison whose arms both have
    results."""
    lines = [f"outcome: {game} {k}: no SFT pair survived the quality rules, nothing to train"
             for k, v in results.items() if v is None]
    done = {k: v for k, v in results.items() if v}
    if not done:
        return lines + [f"outcome: {game}: no arm was evaluated"], {}, {}
    pools = {k: pooled(v, n_boot, seed) for k, v in done.items()}
    lines += [pooled_line(k, p) for k, p in pools.items()]
    top = max(p["rate"] for p in pools.values())
    lines.append(f"outcome: {game} best pooled arm {' = '.join(k for k, p in pools.items() if p['rate'] == top)} "
                 f"{top:.3f}")
    pairs = {}
    for x, y, what in PAIRED:
        if x in done and y in done:
            pairs[f"{x}-{y}"] = {"x": x, "y": y, "what": what, **paired(done[x], done[y], n_boot, seed)}
            lines.append(paired_line(x, y, what, pairs[f"{x}-{y}"]))
    return lines, pools, pairs

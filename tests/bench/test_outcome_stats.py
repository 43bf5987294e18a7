"""bench/outcome_stats.py: per-game results, pooled success over seeds and games, the paired
difference between two arms and its bootstrap interval, on hand-built per-game results."""
import random

import pytest

from bench import outcome_stats as st

GAMES = [f"coin-dev-{100 + i}" for i in range(6)]


def _arm(*seeds):
    """``{seed: {game: won}}`` from one 0/1 string per seed (a character per game of GAMES)."""
    return {k: {g: c == "1" for g, c in zip(GAMES, wins)} for k, wins in enumerate(seeds)}


# shares: gated 1, 2/3, 2/3, 0, 1/3, 1; actions 2/3, 0, 0, 0, 0, 2/3
GATED = _arm("111001", "110001", "101011")
ACTIONS = _arm("100001", "000001", "100000")


def test_per_game_of_eval_rows_and_a_game_twice():
    rows = [{"instance": "coin-dev-100", "won": True, "seed": 100}, {"instance": "coin-dev-101", "won": False}]
    assert st.per_game(rows) == {"coin-dev-100": True, "coin-dev-101": False}
    with pytest.raises(ValueError, match="coin-dev-100 occurs twice"):
        st.per_game(rows + rows[:1])


def test_shares_are_wins_over_the_seeds_that_played_the_game():
    assert st.shares(GATED) == {GAMES[0]: 1.0, GAMES[1]: 2 / 3, GAMES[2]: 2 / 3, GAMES[3]: 0.0, GAMES[4]: 1 / 3,
                                GAMES[5]: 1.0}
    assert st.shares({0: {"a": True}, 1: {"a": False, "b": True}}) == {"a": 0.5, "b": 1.0}


def test_pooled_rate_over_seeds_and_games():
    p = st.pooled(GATED)
    assert (p["seeds"], p["games"], p["episodes"], p["wins"], p["rate"]) == (3, 6, 18, 11, 0.6111)
    assert p["per_seed"] == {0: {"wins": 4, "episodes": 6, "rate": 0.6667}, 1: {"wins": 3, "episodes": 6, "rate": 0.5},
                             2: {"wins": 4, "episodes": 6, "rate": 0.6667}}
    lo, hi = p["ci95"]
    assert lo < p["rate"] < hi
    assert p["ci95"] == [0.3333, 0.8889]  # regression value: random.Random(0), 10 000 resamples


def test_paired_difference_game_by_game():
    p = st.paired(GATED, ACTIONS)
    # per game 1/3, 2/3, 2/3, 0, 1/3, 1/3: mean 7/18
    assert (p["games"], p["seeds"], p["diff"]) == (6, [3, 3], 0.3889)
    assert (p["x_better"], p["y_better"], p["tied"]) == (5, 0, 1)
    assert p["ci95"] == [0.2222, 0.5556] and p["excludes_zero"]  # regression value, as above
    q = st.paired(ACTIONS, GATED)  # the same draws, mirrored
    assert q["diff"] == -0.3889 and q["ci95"] == [-0.5556, -0.2222] and q["excludes_zero"]
    assert (q["x_better"], q["y_better"]) == (0, 5)


def test_paired_interval_that_includes_zero_and_a_constant_difference():
    mixed = st.paired(_arm("110000"), _arm("011000"))  # +1, 0, -1, 0, 0, 0
    assert mixed["diff"] == 0.0 and mixed["ci95"][0] < 0 < mixed["ci95"][1] and not mixed["excludes_zero"]
    same = st.paired(_arm("111111"), _arm("000000"))
    assert same["diff"] == 1.0 and same["ci95"] == [1.0, 1.0] and same["excludes_zero"]


def test_paired_uses_only_the_games_both_played_and_fails_without_one():
    p = st.paired({0: {"a": True, "b": True}}, {0: {"a": False, "c": True}})
    assert (p["games"], p["diff"]) == (1, 1.0)
    with pytest.raises(ValueError, match="no game in common"):
        st.paired({0: {"a": True}}, {0: {"b": True}})


def test_bootstrap_is_seeded_and_uses_the_percentile_ends():
    values = [0.0, 0.5, 1.0, 1.0]
    assert st.bootstrap_ci(values, 500, seed=3) == st.bootstrap_ci(values, 500, seed=3)
    assert st.bootstrap_ci([0.25] * 7) == (0.25, 0.25)
    for n_boot, ends in ((4, (0, 3)), (1000, (24, 974))):  # floor(B * 0.025)-th and ceil(B * 0.975)-th, 1-based
        rng = random.Random(0)
        means = sorted(sum(rng.choices(values, k=4)) / 4 for _ in range(n_boot))
        assert st.bootstrap_ci(values, n_boot, seed=0) == (means[ends[0]], means[ends[1]])


def test_verdict_lines_pooled_best_and_the_paired_comparisons():
    lines, pools, pairs = st.verdict("coin", {"base": {0: dict.fromkeys(GAMES, False)}, "actions": ACTIONS,
                                              "skills": None, "gated": GATED})
    assert lines[0] == "outcome: coin skills: no SFT pair survived the quality rules, nothing to train"
    assert lines[1] == ("outcome: base pooled 0.000 (0/6) over 1 seed x 6 games, 95% bootstrap interval over games "
                        "[0.000, 0.000]")
    assert lines[3] == ("outcome: gated pooled 0.611 (11/18) over 3 seeds x 6 games, 95% bootstrap interval over "
                        "games [0.333, 0.889]")
    assert lines[4] == "outcome: coin best pooled arm gated 0.611"
    assert lines[5] == ("outcome: gated vs actions (thinks and a bank that passed the usefulness gate, against plain "
                        "demonstrations): paired difference +0.389 per game over 6 games (3 vs 3 seeds; gated better "
                        "on 5, actions on 0, 1 tied), 95% paired bootstrap interval [+0.222, +0.556]; the interval "
                        "excludes 0: gated better")
    assert len(lines) == 6 and list(pairs) == ["gated-actions"]  # the pairs with skills need its results
    assert set(pools) == {"base", "actions", "gated"} and pairs["gated-actions"]["x"] == "gated"
    tie = st.verdict("coin", {"gated": _arm("110000"), "skills": _arm("011000")})[0]
    assert tie[2] == "outcome: coin best pooled arm gated = skills 0.333"
    assert tie[3].endswith("the interval includes 0: no difference shown")
    assert st.verdict("coin", {"gated": None})[0][-1] == "outcome: coin: no arm was evaluated"

"""bench/outcome_plan.py: the units of the seed plan, the cost estimate from recorded phase times,
the printed plan and the progress lines with their ETA."""
import copy
from types import SimpleNamespace

import pytest

from bench import outcome_plan as pl
from bench.outcome_arms import ARMS, arm


def _args(**kw):
    base = dict(train_tasks=12, sft_steps=24, sft_batch=2, eval_episodes=60, eval_seed0=100, jobs=4, seeds=3,
                run_id="o", arms=[a.name for a in ARMS])
    return SimpleNamespace(**{**base, **kw})


def test_units_seed_major_then_the_base_models_eval():
    units = pl.plan_units(ARMS, "o", 3)
    assert [u.label for u in units] == ["actions seed 0", "thinks seed 0", "skills seed 0", "gated seed 0",
                                        "actions seed 1", "skills seed 1", "gated seed 1", "actions seed 2",
                                        "skills seed 2", "gated seed 2", "base"]
    assert [u.run_id for u in units[:4]] == ["o-actions", "o-noskills", "o", "o-gated"] and units[-1].run_id == "o"
    assert [u.label for u in pl.plan_units([arm("gated"), arm("base")], "o", 1)] == ["gated seed 0", "base"]


def test_timings_from_the_builtin_run():
    """The run of bench/results/2026-12-06-134100-outcome.json: four workers on two cores took
    1604 s for 5180 worker-seconds, so a worker second is 1604 * 2 / 5180 core-seconds."""
    t = pl.timings([])
    f = 1604 * 2 / 5180
    assert t.source == "2026-12-06-134100-outcome.json" and (t.train_tasks, t.sft_steps, t.eval_episodes) == (12, 24, 60)
    assert t.sft_core_s == pytest.approx((615 + 488 + 647) / 3 * f)
    assert t.eval_core_s == pytest.approx((556 + 757 + 950) / 3 * f)
    assert t.base_eval_core_s == pytest.approx(1167 * f)
    assert (t.skills_data_s, t.thinks_data_s, t.gated_measured) == (919, 530, False)
    assert t.gated_data_s == 78 + 636 + pl.USEFULNESS_ASSUMED_S  # skills stage + distill + the assumed scoring


def test_timings_prefer_the_newest_full_run_and_its_measured_gated_phase():
    newer = copy.deepcopy(pl._BUILTIN_DOC)
    newer.update(name="outcome", file="new.json")
    newer["budget"]["jobs"] = 1  # one worker: worker seconds are core-seconds
    newer["figures"]["wall_s"] = {"2 data pipeline (skills arm)": 600, "2b data (gated arm)": 700,
                                  "3 SFT (gated seed 0)": 100, "3 SFT (gated seed 1)": 300,
                                  "4 eval gated seed 0": 200, "4 eval base": 50, "3-4 arms (wall)": 650}
    quick = {**copy.deepcopy(newer), "file": "quick.json", "budget": {"eval_episodes": 2}}
    t = pl.timings([newer, quick])
    assert t.source == "new.json" and t.gated_measured and t.gated_data_s == 700
    assert (t.sft_core_s, t.eval_core_s, t.base_eval_core_s) == (200, 200, 50)


def test_estimate_scales_phases_to_the_budget():
    t = pl.timings([])
    phases, units, parallel = pl.estimate(_args(), pl.plan_units(ARMS, "o", 3), t, cores=2)
    assert parallel == 2 and [n for n, _ in phases] == [
        "1 gold/noisy rollouts", "2 data pipeline (skills arm)", "2b data (thinks arm)", "2b data (gated arm)",
        "3-4 SFT + eval (11 units, 2 at a time)"]
    unit = t.sft_core_s + t.eval_core_s
    assert [u.est_s for u in units] == [pytest.approx(unit)] * 10 + [pytest.approx(t.base_eval_core_s)]
    assert phases[-1][1] == pytest.approx((10 * unit + t.base_eval_core_s) / 2)
    half, _, _ = pl.estimate(_args(train_tasks=6, sft_steps=12, eval_episodes=30, arms=["actions"]),
                             pl.plan_units([arm("actions")], "o", 3), t, cores=2)
    assert [n for n, _ in half][2:] == ["3-4 SFT + eval (3 units, 2 at a time)"]  # no thinks or gated data
    assert half[1][1] == pytest.approx(919 / 2)
    assert half[-1][1] == pytest.approx(3 * unit / 2 / 2)


def test_plan_text_names_arms_seeds_and_the_budget_verdict():
    a = _args()
    t = pl.timings([])
    phases, units, parallel = pl.estimate(a, pl.plan_units(ARMS, "o", 3), t, cores=2)
    lines = pl.plan_text(a, list(ARMS), phases, units, t, parallel)
    assert lines[0].startswith("outcome plan: 5 arms, 11 SFT/eval units, 60 held-out games each (dev seeds 100..159)")
    assert lines[2].split() == ["base", "-", "off", "(none:", "the", "skills", "arm's", "prompts)", "o"]
    assert lines[6].split() == ["gated", "0,1,2", "quarantine", "skills", "distill", "build_pairs", "usefulness",
                                "export", "o-gated"]
    assert "usefulness scoring assumed, not measured yet" in lines[11]
    assert lines[-1].split()[:2] == ["total", f"{sum(s for _, s in phases) / 60:.1f}"]
    assert lines[-1].endswith("target 150 min: within")
    over = pl.plan_text(a, list(ARMS), phases, units, t, parallel, target_min=60)[-1]
    assert over.endswith("OVER: cut --train-tasks or --sft-steps, never --eval-episodes or --seeds")


def test_fmt_s():
    assert [pl.fmt_s(s) for s in (0, 45, 725, 3900)] == ["0s", "45s", "12m05s", "1h05m"]


def test_progress_lines_and_eta_with_a_fake_clock():
    now, out = [0.0], []
    units = [pl.Unit("actions", 0, "o-actions", 600.0), pl.Unit("gated", 0, "o-gated", 600.0),
             pl.Unit("base", None, "o", 300.0)]
    p = pl.Progress([("data", 120.0)], units, parallel=2, clock=lambda: now[0], out=out.append)
    assert p.eta_s() == 120 + 1500 / 2
    p.start("data")
    now[0] = 100.0
    p.finish("data", reused=False)
    assert p.eta_s() == 750
    p.start("actions seed 0")
    p.start("gated seed 0")
    now[0] = 400.0  # each of the two running units had a core for 300 s
    assert p.eta_s() == (300 + 300 + 300) / 2
    p.finish("actions seed 0", reused=True)
    assert out == ["[outcome 0s] started data; ETA 14m30s",
                   "[outcome 1m40s] finished data in 1m40s; ETA 12m30s",
                   "[outcome 1m40s] started actions seed 0 (unit 1/3); ETA 12m30s",
                   "[outcome 1m40s] started gated seed 0 (unit 2/3); ETA 12m30s",
                   "[outcome 6m40s] finished actions seed 0 in 5m00s (reused: fingerprints unchanged); "
                   "1/3 units done; ETA 5m00s"]

"""bench/verify.py on the shipped sample and a few TextWorld games: every measured rule at 1.0."""
from __future__ import annotations

from bench import verify as bench_verify
from bench import verify_corrupt as vc
from pipeline.verify import AlfworldChecker


def test_bench_prints_precision_and_recall_per_rule(capsys):
    bench_verify.main(["--tw-games", "2"])
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "verify: min_precision=1.000 min_recall=1.000 gold_flags=0"
    rules = {line.split()[0] for line in out if line.startswith(("alfworld.", "webshop.", "textworld."))}
    assert {"alfworld.not_held", "alfworld.unknown_receptacle", "alfworld.holds_two", "alfworld.not_at_receptacle",
            "webshop.click_not_shown", "textworld.env_rejected"} <= rules


def test_a_corruption_names_its_broken_step():
    bases = bench_verify.real_bases(bench_verify.os.path.join(bench_verify.REPO, "data", "samples"))
    mug = next(t for t in bases["alfworld"] if t.task.startswith("heat some mug"))  # ETO alfworld_53
    v = vc.drop_take(mug)
    assert (v.step, v.expected, mug.steps[2].action) == (3, "not_held", "take mug 1 from sinkbasin 1")
    assert v.traj.steps[3].action == "heat mug 1 with microwave 1"
    assert [(f.index, f.rule) for f in AlfworldChecker().check(v.traj, {}).findings][0] == (3, "not_held")

"""bench/outcome.py's reporting: interval verdict, data-quality metrics read from the export manifest."""
import importlib.util
import os

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.records import SFT_PAIR_SCHEMA, to_table
from sft.eval import summarize
from tests.helpers.paths import REPO

ROOT = REPO
spec = importlib.util.spec_from_file_location("outcome", os.path.join(ROOT, "bench", "outcome.py"))
outcome = importlib.util.module_from_spec(spec)
spec.loader.exec_module(outcome)


def _rows(wins, n):
    return [{"game": "coin", "won": i < wins, "reward": 10.0 * (i < wins), "score": float(i < wins), "steps": 2,
             "valid_steps": 2, "format_errors": 0, "inadmissible": 0} for i in range(n)]


def _summary(wins, n):
    return {**summarize(_rows(wins, n)), "policy": "p"}


def test_verdict_disjoint_and_overlapping(capsys):
    a = outcome.parse_args(["--quick"])
    assert (a.train_tasks, a.sft_steps, a.eval_episodes) == (4, 2, 2)
    timer = outcome.Timer()
    v = outcome.report(a, {"base": _summary(0, 20), "sft": _summary(9, 20)}, {"pairs": 3}, {}, timer)
    assert "DISJOINT (SFT better)" in v and "difference +0.450" in v  # [0, 0.161] vs [0.258, 0.658]
    v = outcome.report(a, {"base": _summary(1, 20), "sft": _summary(4, 20)}, {}, {}, timer)
    assert "overlap (target not reached)" in v
    out = capsys.readouterr().out
    assert "the export manifest has no data-quality metrics" in out and " 9/20 =0.450" in out


def test_quality_reads_the_export_manifest(tmp_path):
    a = outcome.parse_args(["--root", str(tmp_path), "--run-id", "q"])
    assert outcome.quality(a) == {}
    ArtifactStore(str(tmp_path), "q").write("export", to_table([], SFT_PAIR_SCHEMA), [],
                                            {"fingerprint": "f", "quality_metrics": {"skill_use_rate": 0.25,
                                                                                     "think_length": {"mean": 12}}})
    q = outcome.quality(a)
    assert q["skill_use_rate"] == 0.25 and outcome._flat(q) == [("skill_use_rate", 0.25), ("think_length.mean", 12)]
    # where export writes them: manifest["counters"]["quality_metrics"]
    ArtifactStore(str(tmp_path), "q").write("export", to_table([], SFT_PAIR_SCHEMA), [],
                                            {"fingerprint": "f", "counters": {"quality_metrics": {"pairs": 1}}})
    assert outcome.quality(a) == {"pairs": 1}

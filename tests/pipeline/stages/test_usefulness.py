"""Stage usefulness: every think scored, the gate's reasons and counts, and the empty think of
action-only SFT left alone. Real ALFWorld states (the shipped held-out probe set), real scorer."""
import dataclasses

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.records import DISTILLED_SCHEMA, SKILL_SCHEMA, TRAJECTORY_SCHEMA, to_table
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext
from pipeline.usefulness.heldout import probe_trajectories
from tests.helpers.build_pairs_data import SKILL, distilled

#: "put some candle on toilet": go to countertop 1, take candle 1, go to toilet 1, put candle 1 (the
#: record shows no admissible list, so no synthetic done turn)
TRAJ = next(t for t in probe_trajectories("alfworld") if t.task == "put some candle on toilet.")
THINKS = {0: "Candles are often kept on the countertop, so I look there first.",
          1: "The candle is right here on the countertop; I need it for the task, so I pick it up.",
          2: "I hold the candle and the task wants it on the toilet, so I head to the toilet.",
          3: "I am at the toilet with the candle in hand, so I place it here to finish the task."}


def run(tmp_path, thinks=THINKS, **usefulness):
    store = ArtifactStore(str(tmp_path), "r1")
    for stage, rows, schema in (("verify", [TRAJ.to_row()], TRAJECTORY_SCHEMA), ("skills", [SKILL], SKILL_SCHEMA),
                                ("distill", [distilled(TRAJ, thinks)], DISTILLED_SCHEMA)):
        store.write(stage, to_table(rows, schema), [], {"fingerprint": f"{stage}-fp"})
    cfg = PipelineConfig()
    cfg.build_pairs = dataclasses.replace(cfg.build_pairs, min_think_words=0)
    cfg.usefulness = dataclasses.replace(cfg.usefulness, threads=1, **usefulness)
    ctx = StageContext(store, cfg)
    run_stage("build_pairs", ctx, log=lambda s: None)
    res = run_stage("usefulness", ctx, log=lambda s: None)
    art = store.require("usefulness")
    return art.read_rows(), art.read_rows(quarantine=True), res.manifest


@pytest.fixture(scope="module")
def flagged(tmp_path_factory):
    return run(tmp_path_factory.mktemp("flag"), policy="flag")


def test_every_think_gets_a_score_with_its_scorer_and_version(flagged):
    rows, quarantine, manifest = flagged
    assert len(rows) == 4 and not quarantine
    for r in rows:
        u = r["usefulness"]
        assert -1 <= u["gain"] <= 1 and u["gain"] == pytest.approx(u["share"] - u["share_empty"], abs=1e-5)
        assert u["candidates"] >= 2 and u["scorer"].startswith("SmolLM2-135M-Instruct") and u["version"] == "1"
    assert manifest["counters"]["scored"] == 4
    assert manifest["counters"]["gain"]["n"] == 4


def test_flag_keeps_every_pair_and_marks_those_at_or_below_the_threshold(flagged):
    rows, _, _ = flagged
    for r in rows:
        assert ("no_gain" in r["flags"]) == (r["usefulness"]["gain"] <= 0.0)


def test_quarantine_keeps_counts_and_names_no_gain(tmp_path, flagged):
    gains = sorted(r["usefulness"]["gain"] for r in flagged[0])
    threshold = (gains[1] + gains[2]) / 2  # two pairs at or below, two above
    rows, quarantine, manifest = run(tmp_path, policy="quarantine", think_threshold=threshold)
    assert len(rows) == 2 and len(quarantine) == 2
    assert {q["reason"] for q in quarantine} == {"no_gain"}
    counts = manifest["counts"]
    assert counts["units_in"] == counts["units_out"] + counts["quarantined"] == 4
    assert all(r["usefulness"]["gain"] > threshold for r in rows)


def test_empty_thinks_of_action_only_sft_are_not_scored_and_pass(tmp_path):
    rows, quarantine, manifest = run(tmp_path, thinks={i: "" for i in THINKS}, policy="quarantine",
                                     think_threshold=0.5)
    assert not quarantine and all(r["usefulness"] is None for r in rows)
    assert manifest["counters"]["scored"] == 0


def test_off_scores_nothing(tmp_path):
    rows, quarantine, _ = run(tmp_path, policy="off")
    assert len(rows) == 4 and not quarantine and all(r["usefulness"] is None for r in rows)

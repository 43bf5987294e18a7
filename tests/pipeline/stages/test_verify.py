"""Stage ``verify``: verdicts, demotions, cuts, repairs, counts, and bad rows that never crash it."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import ConfigError, PipelineConfig, from_dict
from pipeline.core.records import TRAJECTORY_SCHEMA, Trajectory
from pipeline.engine.runner import run_stage
from pipeline.runconfig import check_verify_rules
from pipeline.stage.stage import StageContext
from pipeline.verify import Checker, register
from pipeline.verify import _REGISTERED
from tests.helpers.llm_stage_data import write_upstream
from tests.helpers.paths import FIXTURES, REPO

QUIET = dict(log=lambda m: None)


def run_verify(tmp_path, inp: str, cfg: PipelineConfig | None = None) -> tuple[ArtifactStore, dict]:
    """parse, remove_loops and verify of ``inp`` in a store under ``tmp_path``: ``(store, verify manifest)``."""
    store = ArtifactStore(str(tmp_path / "root"), "r")
    ctx = StageContext(store, cfg or PipelineConfig(), input_path=inp)
    for stage in ("parse", "remove_loops", "verify"):
        res = run_stage(stage, ctx, **QUIET)
    return store, res.manifest


def by_source_id(store: ArtifactStore) -> dict[str, dict]:
    out = {}
    for r in store.require("verify").read_rows():
        meta = json.loads(r["metadata"])
        out[meta.get("id") or meta.get("key") or r["env_instance"]] = {**r, "meta": meta}
    return out


def test_the_sample_demotes_alfworld_9_with_its_reasons_and_keeps_alfworld_0(tmp_path):
    store, m = run_verify(tmp_path, os.path.join(REPO, "data", "samples"))
    c = m["counts"]
    assert c["units_in"] == c["units_out"] + c["quarantined"] == 19 and c["quarantined"] == 0
    rows = by_source_id(store)
    nine, zero = rows["alfworld_9"], rows["alfworld_0"]
    assert (nine["outcome"], nine["reward"], nine["meta"]["outcome_source"]) == ("failure", 0.0, "verified")
    assert nine["meta"]["verify_demoted_from"] == {"outcome": "success", "reward": 10.0, "outcome_source": "assumed"}
    assert nine["meta"]["verify"]["steps"] == ["ok", "unknown_receptacle", "ok", "ok", "ok", "not_held",
                                               "unknown_receptacle,observation_contradicts",
                                               "unknown_receptacle,not_held,goal_not_reached"]
    assert (zero["outcome"], zero["meta"]["outcome_source"], zero["meta"]["verify"]["verdict"]) == (
        "success", "verified", "valid")
    (q,) = [q for q in store.require("verify").read_rows(quarantine=True) if q["item_id"] == nine["trajectory_id"]]
    assert q["reason"] == "unknown_receptacle" and q["line"] == 74  # the first rule broken, at its source line
    assert q["detail"].startswith("demoted to failure: left the SFT path, kept for memory and skills as a failure "
                                  "(success -> failure): step 1 (line 74) unknown_receptacle: 'dining table 1' is "
                                  "not a receptacle of this room")
    assert "step 5 (line 106) not_held: the agent holds nothing, not 'egg 1'" in q["detail"]
    assert m["counters"]["demoted"] == 4 and m["counters"]["demoted_reasons"] == {"not_admissible": 3,
                                                                                 "unknown_receptacle": 1}
    assert m["counters"]["by_source"]["alfworld/chat_json"]["valid"] == 3


def webshop_input(tmp_path, episodes: str = "react_webshop_episodes.txt") -> str:
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    shutil.copy(os.path.join(FIXTURES, "verify", episodes), d)
    return str(d)


def test_a_success_with_refused_clicks_is_cut_and_checks_clean(tmp_path):
    """fixed_10 (score 1.0) clicked two things the page did not show; each was answered
    'Invalid action!' and left the page as it was: both steps go, with their observations."""
    store, m = run_verify(tmp_path, webshop_input(tmp_path))
    ten = by_source_id(store)["fixed_10"]
    v = ten["meta"]["verify"]
    assert (ten["outcome"], v["verdict"], [c["index"] for c in v["cut"]]) == ("success", "cut", [2, 3])
    assert v["cut"][0]["rules"] == ["env_rejected", "click_not_shown"] and v["cut"][0]["observation"] == "Invalid action!"
    assert ten["removed_step_indices"] == [2, 3] and [s["index"] for s in ten["steps"]] == [0, 1, 2, 3, 4]
    assert all(s["observation"] != "Invalid action!" for s in ten["steps"])
    assert m["counters"]["cut_steps"] == 2 and m["counters"]["cut"] == 1
    cfg = PipelineConfig()
    cfg.verify.rejected_steps = "demote"
    store, m = run_verify(tmp_path / "demote", webshop_input(tmp_path), cfg)
    assert by_source_id(store)["fixed_10"]["meta"]["verify"]["verdict"] == "demoted"


def test_repair_names_fixes_the_table_but_not_the_egg(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    records = json.load(open(os.path.join(FIXTURES, "verify", "eto_alfworld_records.json"), encoding="utf-8"))
    (d / "nine.json").write_text(json.dumps([r for r in records if r["id"] == "alfworld_9"]), encoding="utf-8")
    cfg = from_dict({"verify": {"repair_names": True}})
    store, m = run_verify(tmp_path, str(d), cfg)
    (nine,) = by_source_id(store).values()
    v = nine["meta"]["verify"]
    assert [(r["index"], r["from"], r["to"]) for r in v["repairs"]] == [
        (1, "go to dining table 1", "go to diningtable 1"), (6, "go to dining table 1", "go to diningtable 1"),
        (7, "put egg 1 in/on dining table 1", "put egg 1 in/on diningtable 1")]
    assert [s["action"] for s in nine["steps"]][7] == "put egg 1 in/on diningtable 1"
    assert [(f["index"], f["rule"]) for f in v["findings"]] == [(5, "not_held"), (6, "observation_contradicts"),
                                                                 (7, "not_held"), (7, "goal_not_reached")]
    assert nine["outcome"] == "failure" and m["counters"]["repaired_steps"] == 3


def test_rules_can_be_switched_off_or_flagged_and_on_flagged_quarantine_drops_units(tmp_path):
    inp = webshop_input(tmp_path)
    off = from_dict({"verify": {"disabled_rules": ["goal_not_reached"], "flag_rules": ["webshop.click_not_shown"]}})
    store, _ = run_verify(tmp_path / "a", inp, off)
    ten = by_source_id(store)["fixed_10"]["meta"]["verify"]
    # the flagged rule acts on nothing: the refusals are still cut, and the cut steps keep both rules
    assert ten["verdict"] == "cut" and ten["flags"] == [] and ten["cut"][0]["rules"] == ["env_rejected", "click_not_shown"]
    assert all(f["rule"] != "goal_not_reached" for r in by_source_id(store).values()
               for f in r["meta"]["verify"]["findings"])
    quarantine = from_dict({"verify": {"on_flagged": "quarantine", "rejected_steps": "demote"}})
    store, m = run_verify(tmp_path / "b", inp, quarantine)
    c = m["counts"]
    assert c["quarantine_reasons"] == {"env_rejected": 1} and c["units_in"] == c["units_out"] + c["quarantined"] == 8
    with pytest.raises(ConfigError, match=r"verify.disabled_rules: unknown rules \['holds_three'\]"):
        check_verify_rules(from_dict({"verify": {"disabled_rules": ["holds_three"]}}).verify)


class Exploding(Checker):
    """A user checker that raises on one trajectory."""
    name = "exploding"
    RULES = {"boom": "always raises"}

    def applies(self, traj):
        return traj.env == "webshop"

    def check(self, traj, options):
        if traj.env_instance == "fixed_1":
            raise RuntimeError("checker bug")
        from pipeline.verify import Verdict
        return Verdict(self.name)


def test_malformed_rows_and_a_raising_checker_are_quarantined_and_counts_reconcile(tmp_path):
    store = ArtifactStore(str(tmp_path), "r")
    good = Trajectory("t-good", "webshop", "s1", "buy", "other", "failure", 0.0, [], "a.txt", "x", 0).to_row()
    good["steps"] = [{"index": 0, "action": None, "observation": "[Search]", "admissible_actions": [], "reward": 0.0,
                      "done": False, "thought": None, "line": 1}]
    no_steps = {**good, "trajectory_id": "t-empty", "steps": []}
    bad_index = {**good, "trajectory_id": "t-index", "steps": [{**good["steps"][0], "index": 5}]}
    write_upstream(store, "remove_loops", [good, no_steps, bad_index], TRAJECTORY_SCHEMA)
    res = run_stage("verify", StageContext(store, PipelineConfig()), **QUIET)
    c = res.manifest["counts"]
    assert (c["units_in"], c["units_out"], c["quarantined"]) == (3, 1, 2)
    details = {q["item_id"]: q["detail"] for q in store.require("verify").read_rows(quarantine=True)}
    assert details == {"t-empty": "no steps (not even the reset observation)",
                       "t-index": "step indices [5] are not 0..0"}
    register(Exploding)
    try:
        store2 = ArtifactStore(str(tmp_path / "two"), "r")
        ctx = StageContext(store2, PipelineConfig(), input_path=webshop_input(tmp_path))
        for stage in ("parse", "remove_loops"):
            run_stage(stage, ctx, **QUIET)
        res = run_stage("verify", ctx, **QUIET)
    finally:
        _REGISTERED.pop("exploding")
    assert res.manifest["counts"]["quarantine_reasons"] == {"verify_error": 1}
    (q,) = store2.require("verify").read_rows(quarantine=True)
    assert q["detail"] == "checker exploding raised RuntimeError: checker bug"
    assert res.manifest["counters"]["by_source"]["webshop/react_webshop_log"] == {
        "trajectories": 7, "failure": 6, "valid": 1, "rules": {}}  # the user checker, asked first, passed the rest


def test_no_exported_pair_targets_a_refused_or_impossible_action(tmp_path):
    """All stages on the sample plus the real WebShop fixture (refused clicks inside a success),
    with the schema stub as LLM and every content rule only counting: each exported pair's target
    is a step verify found clean, of a trajectory that stayed a success; alfworld_9 gives none."""
    from bench.reliability_stub import SchemaStub
    from pipeline.quality import QUALITY_RULES
    from pipeline.engine.runner import run_pipeline
    inp = tmp_path / "in"
    shutil.copytree(os.path.join(REPO, "data", "samples"), inp)
    shutil.copy(os.path.join(FIXTURES, "verify", "react_webshop_episodes.txt"), inp / "react-webshop")
    with SchemaStub() as stub:
        cfg = PipelineConfig()
        cfg.llm.base_url, cfg.llm.model, cfg.llm.structured_output = stub.base_url, "stub-model", "json_schema"
        cfg.quality.off_topic_threshold, cfg.quality.flag_rules = -1, list(QUALITY_RULES)
        run_pipeline(str(tmp_path), "r", str(inp), cfg, **QUIET)
    store = ArtifactStore(str(tmp_path), "r")
    verified = {r["trajectory_id"]: r for r in store.require("verify").read_rows()}
    pairs = store.require("export").read_rows()
    assert pairs and {verified[p["trajectory_id"]]["outcome"] for p in pairs} == {"success"}
    for p in pairs:
        steps = json.loads(verified[p["trajectory_id"]]["metadata"])["verify"]["steps"]
        assert p["synthetic"] or steps[p["step_index"]] == "ok", p["pair_id"]
    demoted = {t for t, r in verified.items() if json.loads(r["metadata"])["verify"]["verdict"] == "demoted"}
    assert len(demoted) == 4 and not demoted & {p["trajectory_id"] for p in pairs}
    cut = {t for t, r in verified.items() if json.loads(r["metadata"])["verify"]["verdict"] == "cut"}
    assert len(cut) == 1 and cut & {p["trajectory_id"] for p in pairs}  # fixed_10 teaches without its refused clicks
    assert not {"click[The Spicy Beef Backpacking Bundle]", "click[The Beef Backpacking Bundle]"} & {p["action"] for p in pairs}
    card = open(os.path.join(store.stage_dir("export"), "DATASET_CARD.md"), encoding="utf-8").read()
    assert "## Environment rules (verify)" in card and "| webshop/react_webshop_log | 9 | 2 | 1 | 0 | 0 | 6 | 0 |" in card


def test_the_dataset_card_shows_verify_counts_by_source_and_rule(tmp_path):
    from pipeline.verify.summary import card_section
    counters = {"valid": 3, "cut": 1, "cut_steps": 2, "demoted": 1, "failure": 2, "unchecked": 0,
                "outcome_verified": 4, "repaired_steps": 0, "demoted_reasons": {"not_held": 1},
                "by_source": {"alfworld/chat_json": {"trajectories": 4, "valid": 3, "demoted": 1,
                                                     "rules": {"not_held": 2, "goal_not_reached": 1}}}}
    text = card_section(counters)
    assert text.splitlines()[:3] == ["## Environment rules (verify)", "",
                                     "verify: 3 valid, 1 with refused steps cut (2 steps), 1 successes demoted to "
                                     "failures (off the SFT path), 2 recorded failures, 0 unchecked; 4 outcomes "
                                     "verified, 0 names repaired."]
    assert "| alfworld/chat_json | 4 | 3 | 0 | 1 | 0 | 0 | 0 | not_held 2, goal_not_reached 1 |" in text
    assert "Demoted (first rule broken): not_held 1." in text
    assert "were not checked" in card_section(None)

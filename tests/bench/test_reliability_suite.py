"""A small version of the reliability suite (bench/reliability.py sections 1-3), run through the
``skillpipe`` CLI against the schema stub: two kill -9 points of the CLI and one of a mapped shard task,
the classification of the LLM calls after a kill, five corrupt-input kinds, the key
scan and three path-escape attempts. The full suite is ``bench/reliability.py``."""
from __future__ import annotations

import os

import pytest

from bench import reliability_corrupt, reliability_kill, reliability_secrets, reliability_taskkill
from bench.reliability_common import FAKE_KEY, KEY_ENV, cache_keys, classify_calls, request_key, write_config
from bench.reliability_stub import SchemaStub, instance


def test_stub_answers_are_valid_instances_of_the_request_schema():
    schema = {"type": "object", "properties": {
        "thinks": {"type": "array", "items": False, "prefixItems": [
            {"type": "object", "properties": {"step_index": {"type": "integer", "const": 3},
                                              "think": {"type": "string", "minLength": 1, "maxLength": 20}}},
            {"type": "object", "properties": {"step_index": {"type": "integer", "const": 4},
                                              "think": {"type": "string", "minLength": 1, "maxLength": 20}}}]},
        "kind": {"enum": ["a", "b"]}, "note": {"type": ["null", "string"], "maxLength": 5}}}
    value = instance(schema, seed=1)
    assert [t["step_index"] for t in value["thinks"]] == [3, 4]
    assert all(1 <= len(t["think"]) <= 20 for t in value["thinks"])
    assert value["thinks"][0]["think"] != value["thinks"][1]["think"]
    assert value["kind"] == "b" and len(value["note"]) == 5


def test_kill_during_parse_write_and_memory_then_rerun_is_identical(tmp_path):
    res = reliability_kill.matrix(str(tmp_path), points=[("parse", "write", 0), ("memory", "time", 0)],
                                  log=lambda s: None)
    assert [(r.target, r.mode) for r in res] == [("parse", "write"), ("memory", "time")]
    assert (res[0].hit, res[0].temp_at_kill) == ("parse", 1)  # killed inside the writer's transaction
    for r in res:
        assert (r.rerun_rc, r.identical, r.temp_left, r.procs_left, r.reconciled) == (0, True, 0, 0, True), r
        assert r.extra_calls >= 0 and r.calls.repeated == 0


def test_calls_after_a_kill_are_classified_by_what_the_killed_client_held():
    # killed process sent a, b, c; it had stored a and b; only a reached a remote cache part
    got = classify_calls(["a", "b", "c", "c", "d"], ["a", "b", "c"], stored={"a", "b"}, visible={"a"})
    assert (got.repeated, got.uncheckpointed, got.in_flight, got.new, got.in_flight_at_kill) == (1, 1, 2, 1, 1)
    local = classify_calls(["c", "d"], ["a", "b", "c"], stored={"a", "b"}, visible={"a", "b"})
    assert (local.repeated, local.uncheckpointed, local.in_flight, local.new) == (0, 0, 1, 1)


def test_request_key_is_the_clients_cache_key(tmp_path, monkeypatch):
    """A request the client sent to the stub maps to the key of the answer it cached."""
    from pipeline.core.config import load_config
    from pipeline.llm.cache import CACHE_FILE
    from pipeline.llm.client import LLMClient
    from pipeline.llm.types import JSONRequest
    monkeypatch.setenv(KEY_ENV, FAKE_KEY)
    with SchemaStub() as stub:
        cfg = load_config(write_config(str(tmp_path / "c.yaml"), stub.base_url)).llm
        client = LLMClient(cfg, cache_path=str(tmp_path / CACHE_FILE))
        client.complete_json_many([JSONRequest("r1", [{"role": "user", "content": "hi"}],
                                          {"type": "object", "properties": {"x": {"type": "string"}}})])
        assert len(stub.requests) == 1 and cache_keys(str(tmp_path / CACHE_FILE)) == {request_key(stub.requests[0])}


def test_kill_of_a_memory_shard_task_then_retry_is_identical(tmp_path):
    """kill -9 of run_task("memory", shard="shard-00000") (3 shards, local root) after its first
    LLM request, the same call again, the rest of the run up to memory: rows equal the unkilled
    run's, no answer the killed task had stored asked again."""
    res = reliability_taskkill.matrix(str(tmp_path), points=[("local", "memory", "shard-00000", "request", 0)],
                                      upto="memory", latency_s=0.1, log=lambda s: None)
    r = res[0]
    assert (r.task, r.hit, r.retry_rc, r.finish_ok, r.identical, r.temp_left, r.procs_left) == (
        "memory[shard-00000]", "in task", 0, True, True, 0, 0), r
    assert r.calls.repeated == 0 and r.calls.in_flight_at_kill >= 1 and r.calls.in_flight <= r.calls.in_flight_at_kill


KINDS = {k.name: k for k in reliability_corrupt.KINDS}


def test_corrupt_kinds_are_quarantined_and_good_rows_kept(tmp_path):
    names = ["truncated_json", "nan_reward", "deeply_nested_jsonl_line", "symlink_loop", "duplicate_trajectories"]
    with SchemaStub() as stub:
        res = reliability_corrupt.matrix(str(tmp_path), stub.base_url, [KINDS[n] for n in names], log=lambda s: None)
    got = {r.kind: (r.rc, r.reasons, r.good_out, r.reconciled, r.outcome) for r in res}
    assert got == {
        "truncated_json": (0, "invalid_json=1", 3, True, "ok"),
        "nan_reward": (0, "non_finite_reward=1", 3, True, "ok"),
        "deeply_nested_jsonl_line": (0, "invalid_json=1", 5, True, "ok"),
        "symlink_loop": (0, "unreadable_file=2", 3, True, "ok"),
        "duplicate_trajectories": (0, "duplicate_trajectory=3", 3, True, "ok"),
    }


def test_trajectories_that_break_their_rules_reach_verify_and_get_a_verdict_not_a_crash(tmp_path):
    """Readable but malformed trajectories (impossible ALFWorld steps, no room description, no
    WebShop pages, garbage actions): parse keeps them, verify gives each its verdict, no
    verify_error, counts reconcile at every stage, the good trajectories come out."""
    with SchemaStub() as stub:
        res = reliability_corrupt.matrix(str(tmp_path), stub.base_url, reliability_corrupt.VERIFY_KINDS,
                                         log=lambda s: None)
    assert {r.kind: (r.rc, r.good_out, r.reconciled, r.outcome, r.note) for r in res} == {
        "verify_impossible_alfworld": (0, 4, True, "ok", ""), "verify_alfworld_without_room": (0, 4, True, "ok", ""),
        "verify_webshop_without_pages": (0, 4, True, "ok", ""), "verify_garbage_actions": (0, 4, True, "ok", "")}


def test_suite_has_at_least_25_corrupt_kinds():
    assert len(KINDS) >= 25 and len(KINDS) == len(reliability_corrupt.KINDS)


@pytest.mark.parametrize("echo", ["answer", "error"])
def test_api_key_echoed_by_the_endpoint_is_nowhere_in_the_run(tmp_path, echo):
    res = reliability_secrets.secret_case(str(tmp_path), echo, stages="parse,remove_loops,verify,split,memory")
    assert res.rc == 0 and res.key_sent
    assert res.calls >= 17 + (17 if echo == "error" else 0)  # every request failed once in "error"
    assert res.quarantined >= 1  # cut answers ("answer") or the request that always failed ("error"), raw kept
    assert res.files >= 10 and res.hits == {}


def test_scan_finds_a_planted_key_and_a_cut_prefix(tmp_path):
    (tmp_path / "a.txt").write_text(f"token {FAKE_KEY[:18]} cut")
    n, hits = reliability_secrets.scan(str(tmp_path), {"log": f"Bearer {FAKE_KEY}"})
    assert n == 1 and hits == {"first 16 in a.txt": 1, "whole key in log": 1, "first 16 in log": 1,
                               "last 16 in log": 1}


def test_run_ids_that_escape_are_refused_without_traceback(tmp_path):
    config = os.path.join(str(tmp_path), "c.yaml")
    from bench.reliability_common import write_config
    write_config(config, "http://127.0.0.1:9/v1")
    attempts = {label: (args, expect)
                for label, args, expect in reliability_secrets.escape_attempts(str(tmp_path), config)}
    chosen = ["run id ../escape (no --input)", "run id of 300 characters", "run id absolute /tmp/escape"]
    from bench.reliability_common import run_cli
    for label in chosen:
        res = run_cli(attempts[label][0], timeout_s=60)
        out = res.stdout + res.stderr
        assert res.returncode == 2 and "Traceback" not in out, out
        assert "--run-id" in reliability_secrets.first_message(out)
    assert not (tmp_path / "escape").exists() and not (tmp_path / "root" / "escape").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(KINDS))
def test_every_corrupt_kind_exits_0_reconciles_and_loses_nothing(tmp_path, name):
    [res] = reliability_corrupt.matrix(str(tmp_path), "http://127.0.0.1:9/v1", [KINDS[name]], log=lambda s: None)
    assert (res.rc, res.reconciled) == (0, True)
    assert res.outcome in ("ok", "NOTE"), res.note


def sample_run(root: str) -> str:
    """parse + remove_loops of data/samples into run ``r1`` under ``root``, with an empty skill bank
    as its skills artifact (what skill evolution reads); returns the run id."""
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.config import PipelineConfig
    from pipeline.core.records import SKILL_SCHEMA
    from pipeline.engine.runner import run_stage
    from pipeline.stage.stage import StageContext
    from tests.helpers.llm_stage_data import write_upstream
    from tests.helpers.paths import REPO
    store = ArtifactStore(root, "r1")
    ctx = StageContext(store, PipelineConfig(), input_path=os.path.join(REPO, "data", "samples"))
    for stage in ("parse", "remove_loops"):
        run_stage(stage, ctx, log=lambda s: None)
    write_upstream(store, "skills", [], SKILL_SCHEMA)
    return "r1"


def test_skill_evolution_through_the_fault_proxy_loses_no_request(tmp_path):
    """Skill evolution (sft.rl.evolution.evolve) on the samples' failures through the fault proxy
    at 60 % (truncated answers, garbage, HTTP 500): every request is answered or quarantined with
    its raw answer, and the proxy saw exactly the client's calls."""
    from bench.reliability import FaultProxy
    from bench.reliability_evolution import evolution_storm
    from pipeline.core.config import LLMConfig
    run_id = sample_run(str(tmp_path))
    with SchemaStub() as stub, FaultProxy(stub.base_url, 0.6, 0, {}, kinds=("truncated", "garbage", "http_500")) as p:
        cfg = LLMConfig(model="stub-model", structured_output="json_schema", max_retries=2, max_repairs=1,
                        timeout_s=10.0)
        evo = evolution_storm(str(tmp_path), run_id, cfg, p.base_url)
        log = dict(p.log)
    assert evo["requests"] >= 6 and evo["rows_lost"] == 0 and evo["raw_missing"] == 0
    assert evo["requests"] == evo["answered"] + sum(evo["quarantined"].values())
    assert evo["quarantined"] and set(evo["quarantined"]) <= {"length", "not_json", "http_error"}
    assert sum(log.values()) == evo["calls"] and log.get("none", 0) < evo["calls"]
    # a truncated answer is not retried: each one is a quarantine row (reason length, the cut text kept)
    assert evo["quarantined"].get("length", 0) == log.get("truncated", 0) > 0
    assert log.get("garbage", 0) > 0 and evo["repairs"] > 0


@pytest.mark.slow
def test_fault_storm_on_the_samples_loses_nothing_and_reconciles(tmp_path):
    """The storm of bench/reliability.py (stages up to distill, then skill evolution) on
    data/samples at 30 % and 60 % of calls faulted, against the schema stub."""
    from bench import reliability
    from tests.helpers.paths import REPO
    with SchemaStub() as stub:
        memo: dict = {}
        rows = [reliability.storm(str(tmp_path), stub.base_url, rate, 0, memo, os.path.join(REPO, "data", "samples"),
                                  "stub-model") for rate in (0.3, 0.6)]
    for r in rows:
        assert (r["failed"], r["rows_lost"], r["reconciled"]) == ([], 0, True), r
        assert r["evolution"]["requests"] > 0 and r["evolution"]["raw_missing"] == 0
        assert sum(r["faults"].values()) > 0


def test_save_keeps_hand_written_blocks_under_their_section(tmp_path):
    """``--save`` regenerates the tables but keeps text between the keep markers: a note under a
    generated section stays under it, and a section the suite does not produce (1c) stays whole."""
    import argparse

    from bench import reliability
    doc = tmp_path / "reliability.md"
    doc.write_text("# old\n\n## 1. kill\n\nold table\n\n<!-- keep -->\nnote on 1\n<!-- /keep -->\n\n"
                   "## 1c. worker kill\n\n<!-- keep -->\nmeasured by the dist test\n<!-- /keep -->\n\n"
                   "## 2. corrupt\n\nold table 2, not kept\n", encoding="utf-8")
    reliability.save(str(doc), [("1. kill", "new table\n", "ok 1"), ("2. corrupt", "new table 2\n", "ok 2")],
                     argparse.Namespace(upstream="stub"), 1.0)
    text = doc.read_text(encoding="utf-8")
    body = text[text.index("## 1. kill"):text.index("## How to read")]
    assert body == ("## 1. kill\n\nnew table\n\n**ok 1**\n\n<!-- keep -->\nnote on 1\n<!-- /keep -->\n\n"
                    "## 1c. worker kill\n\n<!-- keep -->\nmeasured by the dist test\n<!-- /keep -->\n\n"
                    "## 2. corrupt\n\nnew table 2\n\n**ok 2**\n\n")

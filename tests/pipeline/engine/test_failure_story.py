"""Every reader of a manifest tells the same story about failed LLM requests: the run log, the
``skillpipe run`` summary and the report's Attention box all say the sentence derived once from
what the manifest records (pipeline.core.manifest.failure_sentence).

Runs distill through ``runner.run_stage`` on the scripted stub (bench/chat_stub.py): one
trajectory, one request, an answer that is not JSON (the client's repair is not JSON either).
"""
from __future__ import annotations

import pytest

from bench.chat_stub import ChatStub
from pipeline.cli import print_summary
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.manifest import failure_sentence, request_failures
from pipeline.core.records import MEMORY_SCHEMA, SKILL_SCHEMA
from pipeline.engine.runner import run_stage
from pipeline.report import render
from tests.helpers.llm_faults import stage_ctx, stub_llm_config
from tests.helpers.llm_stage_data import heat_mug, write_trajectories, write_upstream

RETRYABLE = "incomplete: 1 LLM request(s) failed (not_json 1); a plain rerun retries them"
FINAL = "complete: 1 failed LLM answer(s) are final (not_json 1); a rerun does not ask again"


def _failed_distill(root: str, retry_failed: bool) -> tuple:
    store = ArtifactStore(root, "r1")
    write_trajectories(store, [heat_mug("traj-A")])
    write_upstream(store, "memory", [], MEMORY_SCHEMA)
    write_upstream(store, "skills", [], SKILL_SCHEMA)
    log: list[str] = []
    with ChatStub([{"content": "no"}, {"content": "still no"}]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub, retry_failed=retry_failed))
        res = run_stage("distill", stage_ctx(store, cfg), model_id="stub-model", log=log.append)
    return res, log


@pytest.mark.parametrize("retry_failed,sentence,retried", [(True, RETRYABLE, 1), (False, FINAL, 0)],
                         ids=["retryable", "final"])
def test_log_summary_and_report_say_what_the_manifest_records(tmp_path, capsys, retry_failed, sentence, retried):
    res, log = _failed_distill(str(tmp_path), retry_failed)
    f = request_failures(res.manifest)
    assert (f.total, f.retried, f.final) == (1, retried, 1 - retried)
    assert ("fingerprint_complete" in res.manifest) == bool(retried)  # what makes the next run retry
    assert failure_sentence(res.manifest) == sentence
    assert f"[distill] {sentence} (each one's raw output is quarantined)" in log
    print_summary([res], 0.1)
    out = capsys.readouterr().out
    assert f"stage distill {sentence}" in out, out
    assert ("incomplete (see below)" in out) == bool(retried)
    facts = render.gather(str(tmp_path), "r1")
    assert f"stage distill {sentence}" in render.problems(facts)


def test_no_failed_request_no_sentence():
    assert failure_sentence({"failed_requests": {"total": 0, "by_reason": {}, "final": 0}}) == ""
    assert failure_sentence({}) == ""
    both = {"failed_requests": {"total": 3, "by_reason": {"timeout": 1, "length": 2}, "final": 2},
            "fingerprint_complete": "fp"}
    assert failure_sentence(both) == ("incomplete: 1 LLM request(s) failed (length 2, timeout 1); a plain rerun "
                                      "retries them; 2 failed answer(s) are final")

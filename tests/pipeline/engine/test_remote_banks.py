"""The skill bank history of a run on object storage: the runner registers the skills stage's
bank after the commit, in the bucket (not in the worker's mirror), so ``skillpipe bank list`` and
``skillpipe report`` on the ``s3://`` root find it; a rerun adds no version; a stage that fails
its count check registers nothing."""
from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from pipeline.bank.store import BankStore
from pipeline.cli import app
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.records import MEMORY_SCHEMA
from pipeline.engine.remote import mirror_dir, open_root
from pipeline.engine.runner import CountMismatch, run_pipeline
from pipeline.stages.skills import SkillsStage
from bench.chat_stub import ChatStub
from tests.helpers.llm_faults import stub_llm_config
from tests.helpers.llm_stage_data import write_upstream
from tests.helpers.skills_data import MEMORIES, write_dedupe

SKILL = {"title": "Search Then Act", "principle": "Find the object first.", "when_to_apply": "Object unseen."}
ANSWERS = [{"content": json.dumps({"skills": [SKILL]})},                                # general
           {"content": json.dumps({"skills": [dict(SKILL, title="Cool In Fridge")]})},  # task_specific cool
           {"content": json.dumps({"skills": [dict(SKILL, title="Heat In Microwave")]})},
           {"content": json.dumps({"mistakes": [{"description": "Wrong appliance", "why_it_happens": "Verb misread",
                                                 "how_to_avoid": "Reread the goal"}]})}]

# fixtures s3 and env: tests/pipeline/engine/conftest.py


def write_skills_upstream(store: ArtifactStore) -> None:
    """verify, split (four train instances) and memory (``MEMORIES``) of ``store``'s run."""
    write_dedupe(store, {m["trajectory_id"]: f"kitchen-{i}" for i, m in enumerate(MEMORIES, 1)})
    write_upstream(store, "memory", MEMORIES, MEMORY_SCHEMA)


def commit_skills_upstream(root: str, run_id: str) -> None:
    """The upstream of skills committed to the object-storage ``root``."""
    with open_root(root, run_id) as (local, hooks):
        for stage in ("verify", "split", "memory"):
            hooks.before(stage)
        write_skills_upstream(ArtifactStore(local, run_id))
        for stage in ("verify", "split", "memory"):
            hooks.after(stage)


def run_skills(root: str, stub: ChatStub):
    cfg = PipelineConfig(llm=stub_llm_config(stub))
    cfg.export.val_fraction = 0.0
    return run_pipeline(root, "r1", "", cfg, stages=["skills"], log=lambda _m: None)[0]


def cli(*args: str):
    res = CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})
    return res.exit_code, res.output


def test_s3_run_registers_its_bank_in_the_bucket_for_bank_list_and_report(env, tmp_path, monkeypatch):
    root = env.uri("banks")
    commit_skills_upstream(root, "r1")
    with ChatStub(ANSWERS) as stub:
        res = run_skills(root, stub)
    version = res.manifest["counters"]["bank_version"]
    assert res.rows == 4 and res.manifest["counters"]["bank_parent"] is None
    fs = env.fs()
    assert fs.cat_file(f"{env.bucket}/banks/banks/HEAD").decode() == version + "\n"
    assert fs.exists(f"{env.bucket}/banks/banks/{version}/bank.json")
    assert not os.path.exists(os.path.join(mirror_dir(root), "banks"))  # never in the worker's mirror
    code, out = cli("bank", "list", "--root", root)
    assert code == 0, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"* {version}  parent=-  ")
    assert lines[0].endswith("r1/skills  general=1 task_specific=2 mistake=1")
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker2"))  # another machine reruns: skipped
    with ChatStub([]) as stub:
        again = run_skills(root, stub)
    assert again.skipped and not stub.requests
    assert [e["event"] for e in BankStore(root).history()] == ["create"]  # no new version, no new event
    out_html = str(tmp_path / "report.html")
    code, out = cli("report", "r1", "--root", root, "--out", out_html)
    assert code == 0, out
    assert out.strip().splitlines()[-1] == out_html
    with open(out_html, encoding="utf-8") as f:
        html = f.read()
    assert version in html and f"no bank store under" not in html


def test_a_killed_registration_is_made_good_by_a_plain_rerun(tmp_path, monkeypatch):
    """The artifact was committed but the process died before the bank was registered: the next
    run reuses the artifact and registers the missing version (once)."""
    store = ArtifactStore(str(tmp_path), "r1")
    write_skills_upstream(store)

    def killed(self, ctx, art, reused):
        raise KeyboardInterrupt
    with ChatStub(ANSWERS) as stub:
        monkeypatch.setattr(SkillsStage, "after_commit", killed)
        with pytest.raises(KeyboardInterrupt):
            run_skills(str(tmp_path), stub)
        assert store.load("skills") is not None and BankStore(str(tmp_path)).versions() == []
        monkeypatch.undo()
        again = run_skills(str(tmp_path), stub)
        assert again.skipped and len(stub.requests) == 4
    banks = BankStore(str(tmp_path))
    assert banks.versions() == [again.manifest["counters"]["bank_version"]] == [banks.head()]
    run_skills(str(tmp_path), stub)
    assert len(banks.history()) == 1


def test_a_stage_that_fails_its_count_check_registers_no_bank(tmp_path, monkeypatch):
    store = ArtifactStore(str(tmp_path), "r1")
    write_skills_upstream(store)
    collect = SkillsStage.collect

    def one_memory_lost(self, run):
        out = collect(self, run)
        out.units_in += 1  # a unit in that is neither out nor quarantined
        return out
    monkeypatch.setattr(SkillsStage, "collect", one_memory_lost)
    with ChatStub(ANSWERS) as stub:
        with pytest.raises(CountMismatch, match=r"units in 5 != out 4 \+ quarantined 0"):
            run_skills(str(tmp_path), stub)
    assert store.load("skills") is None
    assert BankStore(str(tmp_path)).versions() == [] and not os.path.exists(tmp_path / "banks")


def test_a_second_writer_of_the_bucket_history_waits_for_the_first(env, monkeypatch):
    """Object storage has no append: history.jsonl is rewritten whole under the lease on
    banks/_lock.json, so a writer that cannot get it gives up after its deadline, naming it,
    and writes nothing."""
    from pipeline.bank import rows as skillbank
    from pipeline.core.lease import Lease
    from pipeline.core.waits import WaitTimeout
    root = env.uri("locked")
    rows = [skillbank.make_row("general", "", {"title": "Look first", "principle": "look before you act",
                                               "when_to_apply": "always"}, ["mem-1"], ["traj-1"], env="alfworld")]
    monkeypatch.setenv("SKILLPIPE_BANK_LOCK_S", "1")
    held = Lease(env.fs(), f"{env.bucket}/locked/banks/_lock.json").acquire()
    try:
        with pytest.raises(WaitTimeout, match=rf"the writer of {root}/banks \(pid {os.getpid()}\) did not finish "
                                              r"within 1 s: lease .* is held by"):
            BankStore(root).register(rows, run_id="r1", stage="skills")
    finally:
        held.release()
    assert BankStore(root).versions() == []
    first = BankStore(root).register(rows, run_id="r1", stage="skills")
    assert BankStore(root).versions() == [first.version] and BankStore(root).head() == first.version

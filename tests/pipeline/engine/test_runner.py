"""Runner mechanics: fingerprint skip, count invariant, streaming stages, config in fingerprints."""
import json
import os

import pyarrow as pa
import pytest

from pipeline.engine import runner
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.core.freshness import check_fresh
from pipeline.core.records import QuarantineRow
from pipeline.engine.runner import CountMismatch, run_stage
from pipeline.stage.stage import Stage, StageContext, StageOutput
from pipeline.stages import STAGES, get_stage
from tests.helpers.paths import REPO

SCHEMA = pa.schema([("id", pa.string())])
INPUTS = [{"uri": "a.txt", "sha256": "x"}]  # stands for upstream facts: no upstream artifact needed


class FakeStage(Stage):
    """A stage named like a real one (its config section exists) that returns a canned output."""
    name = "remove_loops"
    schema = SCHEMA
    config_sections = ("remove_loops",)

    def __init__(self, calls, make_output):
        self.calls, self.make_output = calls, make_output

    def input_facts(self, ctx):
        return INPUTS

    def run(self, ctx):
        self.calls.append(1)
        return self.make_output()


def fake_stage(calls, make_output):
    return FakeStage(calls, make_output)


@pytest.fixture
def ctx(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.txt").write_text("hello")
    return StageContext(ArtifactStore(str(tmp_path), "r"), PipelineConfig(), input_path=str(data))


def use(monkeypatch, stage):
    monkeypatch.setattr(runner, "get_stage", lambda name: stage)


def test_unchanged_stage_is_skipped_and_config_change_reruns(ctx, monkeypatch):
    calls = []
    use(monkeypatch, fake_stage(calls, lambda: StageOutput(rows=[{"id": "a"}, {"id": "b"}], quarantine=[], rows_in=2)))
    first = run_stage("remove_loops", ctx, log=lambda m: None)
    second = run_stage("remove_loops", ctx, log=lambda m: None)
    assert (first.skipped, second.skipped, len(calls)) == (False, True, 1)
    assert second.fingerprint == first.fingerprint and second.rows == 2
    ctx.config.remove_loops.min_actions = 2
    third = run_stage("remove_loops", ctx, log=lambda m: None)
    assert not third.skipped and third.fingerprint != first.fingerprint and len(calls) == 2


def test_llm_transport_settings_do_not_change_the_fingerprint(ctx, monkeypatch):
    stage = fake_stage([], lambda: StageOutput(rows=[], quarantine=[], rows_in=0))
    stage.uses_llm = True
    use(monkeypatch, stage)
    fp1, _ = runner.fingerprint(ctx, "remove_loops")
    ctx.config.llm.concurrency, ctx.config.llm.base_url = 16, "http://elsewhere/v1"
    assert runner.fingerprint(ctx, "remove_loops")[0] == fp1
    ctx.config.llm.temperature = 0.7
    assert runner.fingerprint(ctx, "remove_loops")[0] != fp1


def test_count_mismatch_raises_and_writes_nothing(ctx, monkeypatch):
    use(monkeypatch, fake_stage([], lambda: StageOutput(rows=[{"id": "a"}], quarantine=[], rows_in=2)))
    with pytest.raises(CountMismatch, match=r"units in 2 != out 1 \+ quarantined 0"):
        run_stage("remove_loops", ctx, log=lambda m: None)
    assert ctx.store.load("remove_loops") is None


def test_quarantine_rows_say_what_they_count_and_units_come_first(ctx, monkeypatch):
    """Rows that are no units (a demotion, a failed request) go to the same quarantine, after the
    units, and are counted by kind beside them: the folder reconciles with the manifest."""
    q = [QuarantineRow("remove_loops", "not_admissible", item_id="a", kind="demotion"),
         QuarantineRow("remove_loops", "too_short", item_id="b"),
         QuarantineRow("remove_loops", "not_json", item_id="b#1", kind="request")]
    use(monkeypatch, fake_stage([], lambda: StageOutput(rows=[{"id": "a"}], quarantine=q, rows_in=2)))
    res = run_stage("remove_loops", ctx, log=lambda m: None)
    rows = ctx.store.require("remove_loops").read_rows(quarantine=True)
    assert [(r["item_id"], r["kind"]) for r in rows] == [("b", "unit"), ("a", "demotion"), ("b#1", "request")]
    c = res.manifest["counts"]
    assert (c["quarantined"], c["quarantine_reasons"], c["quarantine_kinds"]) == (
        1, {"too_short": 1}, {"demotion": 1, "request": 1, "unit": 1})


def test_streaming_stage_counts_and_reasons(ctx, monkeypatch):
    def make():
        out = StageOutput(rows=[], quarantine=[], rows_in=0)

        def gen():
            for i in range(3):
                out.rows_in += 2
                yield [{"id": f"k{i}"}], [QuarantineRow("remove_loops", "too_short" if i else "empty", item_id=f"q{i}")]
        out.stream = gen()
        return out
    use(monkeypatch, fake_stage([], make))
    res = run_stage("remove_loops", ctx, log=lambda m: None)
    c = res.manifest["counts"]
    assert (c["in"], c["out"], c["quarantined"]) == (6, 3, 3)
    assert c["quarantine_reasons"] == {"empty": 1, "too_short": 2}
    assert [r["id"] for r in ctx.store.load("remove_loops").read_rows()] == ["k0", "k1", "k2"]


def test_unknown_stage_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown stage 'distil'"):
        get_stage("distil")
    with pytest.raises(ValueError, match="unknown stage 'distil'"):
        runner.run_pipeline("/nonexistent", "r", "", PipelineConfig(), stages=["distil"])


def test_every_registered_stage_is_a_stage_object_named_like_its_module():
    for name in STAGES:
        stage = get_stage(name)
        assert isinstance(stage, Stage) and stage.name == name
        assert all(s in STAGES[:STAGES.index(name)] for s in stage.inputs)  # upstreams run first
    assert get_stage("dedupe").name == "remove_loops"  # old names still accepted


def test_a_stage_that_reports_its_input_facts_is_not_hashed_twice(ctx, monkeypatch):
    """A stage that runs anyway (no artifact yet, or forced) is fingerprinted after it ran, from
    the input facts it reported; the skip check of the next run computes the same facts."""
    asked = []

    class Reporting(FakeStage):
        def input_facts(self, ctx):
            asked.append(1)
            return INPUTS

        def facts_after_run(self, ctx, out):
            return out.counters["read"]

    def make():
        return StageOutput(rows=[{"id": "a"}], quarantine=[], rows_in=1, counters={"read": INPUTS})
    use(monkeypatch, Reporting([], make))
    first = run_stage("remove_loops", ctx, log=lambda m: None)
    assert asked == [] and first.manifest["inputs"] == INPUTS
    again = run_stage("remove_loops", ctx, log=lambda m: None)
    assert asked == [1] and again.skipped and again.fingerprint == first.fingerprint
    run_stage("remove_loops", ctx, force=True, log=lambda m: None)
    assert asked == [1]


def test_safe_run_id_maps_airflow_ids():
    assert runner.safe_run_id("manual__2026-11-30T10:00:00+00:00") == "manual__2026-11-30T10-00-00-00-00"


def test_later_stage_refuses_a_stale_upstream(tmp_path):
    """parse rerun on a new input while dedupe was not: memory must not mix the two inputs."""
    from pipeline.core.artifacts import ArtifactError
    from pipeline.engine.runner import run_pipeline
    import shutil, os
    root = REPO
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(os.path.join(root, "data", "samples", "react-webshop"), a)
    shutil.copytree(os.path.join(root, "data", "samples", "reflexion-fewshot-failures"), b)
    quiet = dict(log=lambda m: None)
    run_pipeline(str(tmp_path), "r", str(a), PipelineConfig(), stages=["parse", "remove_loops", "verify"], **quiet)
    run_pipeline(str(tmp_path), "r", str(b), PipelineConfig(), stages=["parse"], **quiet)
    with pytest.raises(ArtifactError, match=r"stage 'remove_loops' of run r is stale: it was built from 'parse' .* "
                                            r"--stages remove_loops,verify,split,memory,skills,distill,build_pairs,usefulness,export"):
        run_pipeline(str(tmp_path), "r", "", PipelineConfig(), stages=["memory"], **quiet)
    # rerunning from dedupe on brings it back in line
    run_pipeline(str(tmp_path), "r", str(b), PipelineConfig(), stages=["remove_loops"], **quiet)
    check_fresh(ArtifactStore(str(tmp_path), "r"), "remove_loops")


def test_a_stage_fingerprints_only_the_config_sections_it_declares(ctx):
    """A config change reruns only the stages that read it (README: "that stage and everything
    downstream"; downstream stages see it through their input fingerprints, stubbed here)."""
    names = STAGES
    fps = lambda: {n: runner.fingerprint(ctx, n, inputs=INPUTS)[0] for n in names}  # noqa: E731
    first = fps()
    ctx.config.build_pairs.max_tokens = 1234
    before = fps()
    assert [n for n in names if before[n] != first[n]] == ["build_pairs"]
    ctx.config.export.val_fraction = 0.3  # the split artifact; skills sees it through its input
    after = fps()
    assert [n for n in names if before[n] != after[n]] == ["split", "export"]
    ctx.config.prompt.history_length = 5  # read when rendering prompts: distill, build_pairs, and the
    # scorer's prompts of the usefulness gate (skills' held-out steps, usefulness' thinks)
    again = fps()
    assert [n for n in names if again[n] != after[n]] == ["skills", "distill", "build_pairs", "usefulness"]
    ctx.config.llm.temperature = 0.3  # LLM stages only
    last = fps()
    assert [n for n in names if last[n] != again[n]] == ["memory", "skills", "distill"]


@pytest.mark.parametrize("name", STAGES)
def test_stage_reads_only_declared_config_sections(name):
    """Guard for the rule above: a stage that reads a section it does not declare would be
    skipped with a stale artifact after that section changes."""
    import dataclasses
    import importlib
    import inspect
    import re
    stage = get_stage(name)
    sections = {f.name for f in dataclasses.fields(PipelineConfig)}
    src = inspect.getsource(importlib.import_module(f"pipeline.stages.{name}"))
    used = {m for m in re.findall(r"(?:ctx\.config|\bcfg)\.(\w+)", src) if m in sections}
    allowed = set(stage.config_sections) | ({"llm"} if stage.uses_llm else set())
    assert used and used <= allowed, (name, used - allowed)
    # `cfg = ctx.config` (or `run.ctx.config`) is a local alias whose sections the regex above sees
    bare = re.sub(r"\bcfg = (?:\w+\.)*ctx\.config\n", "", src)
    assert not re.search(r"ctx\.config\b(?!\.)", bare), "whole config passed on"


def test_moved_run_folder_and_other_root_rerun_nothing(tmp_path):
    """Fingerprints once held the absolute paths of upstream artifacts, so a run
    folder moved (or read through another --root) reran every stage. Real parse + dedupe."""
    import os
    import shutil
    from pipeline.engine.runner import run_pipeline
    repo = REPO
    a = tmp_path / "a"
    shutil.copytree(os.path.join(repo, "data", "samples", "react-webshop"), a / "input")
    quiet = dict(log=lambda m: None)
    first = run_pipeline(str(a), "r", str(a / "input"), PipelineConfig(), stages=["parse", "remove_loops"], **quiet)
    assert [r.skipped for r in first] == [False, False] and first[1].rows > 0
    shutil.copytree(a, tmp_path / "b")
    shutil.rmtree(a)  # moved, not copied: nothing of the old location is left to match
    b = tmp_path / "b"
    again = run_pipeline(str(b), "r", str(b / "input"), PipelineConfig(), stages=["parse", "remove_loops"], **quiet)
    assert [r.skipped for r in again] == [True, True]
    assert [r.fingerprint for r in again] == [r.fingerprint for r in first]
    check_fresh(ArtifactStore(str(b), "r"), "remove_loops")
    dedupe = ArtifactStore(str(b), "r").require("remove_loops").manifest
    assert str(a) not in json.dumps(dedupe["inputs"]) and dedupe["inputs"][0]["stage"] == "parse"


def test_the_contract_example_in_stage_py_runs_as_written(tmp_path, monkeypatch):
    """The example stage of pipeline/stage/stage.py's docstring, executed as written but with a cut
    at 8 steps (so the contract a newcomer reads cannot rot): on the shipped sample it keeps the
    short trajectories and quarantines the rest, and the runner reconciles and writes it like any
    stage."""
    import re
    import shutil
    import pipeline.stage.stage as stage_mod
    from pipeline.core.records import TRAJECTORY_SCHEMA
    code = re.search(r"Subclass :class:`Stage`::\n\n(.*?)\n\nput it in", stage_mod.__doc__, re.S).group(1)
    code = code.replace("> 50", "> 8")  # the sample's episodes are short: make both branches happen
    namespace = {"Stage": Stage, "StageContext": StageContext, "StageOutput": StageOutput,
                 "reject": stage_mod.reject, "TRAJECTORY_SCHEMA": TRAJECTORY_SCHEMA}
    exec(compile("\n".join(line[4:] for line in code.splitlines()), "stage.py docstring", "exec"), namespace)
    shorten = namespace["STAGE"]
    inp = tmp_path / "in"
    shutil.copytree(os.path.join(REPO, "data", "samples", "skillrl-rollouts"), inp / "skillrl-rollouts")
    ctx = StageContext(ArtifactStore(str(tmp_path / "root"), "r"), PipelineConfig(), input_path=str(inp))
    for name in ("parse", "remove_loops"):
        run_stage(name, ctx, log=lambda m: None)
    upstream = ctx.upstream("remove_loops").read_rows()
    monkeypatch.setattr(runner, "get_stage", lambda name: shorten if name == "shorten" else get_stage(name))
    res = run_stage("shorten", ctx, log=lambda m: None)
    long = sum(len(t["steps"]) > 8 for t in upstream)
    assert 0 < long < len(upstream)
    assert res.manifest["counts"]["in"] == len(upstream)
    assert res.manifest["counts"]["quarantine_reasons"] == {"too_long": long}
    assert (res.rows, res.manifest["counts"]["quarantined"]) == (len(upstream) - long, long)
    assert res.uri.endswith("/shorten") and run_stage("shorten", ctx, log=lambda m: None).skipped


def test_a_stage_version_bump_reruns_it_and_everything_downstream_only(tmp_path, monkeypatch):
    """A stage's ``version`` is in its own fingerprint and in every downstream stage's: bumping
    remove_loops reruns remove_loops and verify (whose input rows are byte-identical), not parse."""
    import os
    import shutil
    from pipeline.engine.runner import run_pipeline, stage_versions
    from pipeline.stages import get_stage
    shutil.copytree(os.path.join(REPO, "data", "samples", "react-webshop"), tmp_path / "input")
    stages = ["parse", "remove_loops", "verify"]

    def run():
        return run_pipeline(str(tmp_path), "r", str(tmp_path / "input"), PipelineConfig(), stages=stages,
                            log=lambda m: None)
    first = run()
    assert [r.skipped for r in first] == [False, False, False] and [r.skipped for r in run()] == [True] * 3
    assert stage_versions("verify") == {"parse": "1", "remove_loops": "1", "verify": "1"}
    monkeypatch.setattr(type(get_stage("remove_loops")), "version", "2")
    bumped = run()
    assert [r.skipped for r in bumped] == [True, False, False]
    assert bumped[0].fingerprint == first[0].fingerprint
    assert bumped[2].fingerprint != first[2].fingerprint
    assert ArtifactStore(str(tmp_path), "r").require("verify").manifest["stage_versions"] == \
        {"parse": "1", "remove_loops": "2", "verify": "1"}

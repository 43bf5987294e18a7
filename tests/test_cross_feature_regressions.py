"""Regressions across features, as a new user meets them: action-only distill
(``distill.reasoning: none``), content rules on recorded thoughts, object-storage errors in
inspect and report, benchmark output and the reliability report's saved sections."""
from __future__ import annotations

import os

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import ConfigError, from_dict
from pipeline.core.records import MEMORY_SCHEMA, SKILL_SCHEMA
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext
from tests.helpers.llm_stage_data import cool_apple, write_trajectories, write_upstream


def test_reasoning_none_needs_empty_think_flag():
    """reasoning none with the default empty_think quarantine exported 0 pairs with exit 0
    (25 of 25 candidate pairs of the react-alfworld sample quarantined as empty_think)."""
    with pytest.raises(ConfigError) as e:
        from_dict({"distill": {"reasoning": "none"}})
    assert str(e.value) == ("build_pairs.empty_think: must be flag with distill.reasoning: none (every think is "
                            "empty; quarantine drops every pair and the export has none)")
    cfg = from_dict({"distill": {"reasoning": "none"}, "build_pairs": {"empty_think": "flag"}})
    assert (cfg.distill.reasoning, cfg.build_pairs.empty_think) == ("none", "flag")


def test_reasoning_none_counts_no_recorded_thought(tmp_path):
    """The empty thinks of reasoning none were counted as recorded thoughts used (70 of the 70
    thinks of data/samples); the source's real thoughts are not used either."""
    store = ArtifactStore(str(tmp_path), "r")
    traj = cool_apple("success", "traj-A")
    thoughts = ["The apple is probably on the countertop, so I check there first.",
                "I found the apple 1 here and need to carry it to the fridge.",
                "To cool the apple I should go where the fridge is.",
                "Now I can chill the apple using the fridge.",
                "The cold apple belongs on the countertop, so I head back.",
                "Placing the apple down finishes the task."]
    for s, thought in zip(traj.steps[1:], thoughts):
        s.thought = thought
    write_trajectories(store, [traj])
    write_upstream(store, "memory", [], MEMORY_SCHEMA)
    write_upstream(store, "skills", [], SKILL_SCHEMA)
    # no synthetic done turn: the default run below then needs no LLM either
    cfg = from_dict({"distill": {"reasoning": "none", "synthetic_done": False}, "build_pairs": {"empty_think": "flag"}})

    def no_llm():
        raise AssertionError("reasoning none must not start the LLM")
    res = run_stage("distill", StageContext(store, cfg, llm_factory=no_llm), log=lambda s: None)
    [row] = store.require("distill").read_rows()
    n = len(traj.steps) - 1
    assert [t["think"] for t in row["thinks"]] == [""] * n and row["model"] == "none"
    c = res.manifest["counters"]
    assert (c["calls"], c["thinks"], c["recorded_thoughts"]) == (0, n, 0)
    # the same trajectory under the default (prefer recorded thoughts, no LLM needed): all recorded
    default = from_dict({"distill": {"synthetic_done": False}, "quality": {"off_topic_threshold": -1}})  # no MiniLM
    res = run_stage("distill", StageContext(store, default, llm_factory=no_llm), log=lambda s: None, force=True)
    assert res.manifest["counters"]["recorded_thoughts"] == n


def test_react_thoughts_quoting_the_task_are_not_reused():
    """FireAct HotpotQA thoughts name the question's entities twice ("... where Malcolm Smith was
    named Most Valuable Player." then "Malcolm Smith was named Most Valuable Player in Super Bowl
    XLVIII."): 3 of the 4 successes were quarantined whole as reused_think. A run made only of
    the task's words and stop words is no reuse; boilerplate outside the task still is."""
    from pipeline.formats.discover import read_file
    from pipeline.quality import text
    from tests.helpers.paths import FIXTURES
    trajs = list(read_file(os.path.join(FIXTURES, "formats", "real", "fireact_hotpotqa_head.jsonl")))
    thoughts = [(t, [(k, s.thought) for k, s in enumerate(t.steps[1:]) if s.thought]) for t in trajs]
    assert [len(th) for _, th in thoughts] == [2, 2, 2, 2]
    assert [len(text.reused(th)) for _, th in thoughts] == [0, 1, 1, 1]  # without the task
    assert [text.reused(th, t.task) for t, th in thoughts] == [[], [], [], []]
    env = "The environment is TextWorld Express, a text game where the agent explores rooms"
    got = text.reused([(0, f"1. {env}."), (1, f"2. {env} and I take the coin")], "take the coin in the kitchen")
    assert [v.detail for v in got] == [
        "the think for step 1 repeats the think for step 0; explain each step on its own"]


def test_inspect_and_report_name_a_missing_bucket(tmp_path, monkeypatch):
    """skillpipe run named a missing bucket; inspect said 'no complete artifact at ...' and report
    printed s3fs's bare 'The specified bucket does not exist'. Both now say which bucket, where,
    and what to do, exit 1 (moto's S3 server on loopback)."""
    from typer.testing import CliRunner
    from pipeline.cli import app
    from bench.s3_server import S3Server
    with S3Server() as s3:
        for k, v in s3.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "cache"))
        tail = (f"bucket 'nosuch' does not exist at {s3.endpoint_url}; create it (`aws s3 mb s3://nosuch`), "
                "or fix the URI or the endpoint")
        for args, uri in [(["inspect", "s3://nosuch/p/runs/x/parse"], "s3://nosuch/p/runs/x/parse"),
                          (["inspect", "s3://nosuch/p/runs/x", "--lineage", "pair-1"], "s3://nosuch/p/runs/x"),
                          (["inspect", "s3://nosuch/p/runs/x/export", "--html", str(tmp_path / "a.html")],
                           "s3://nosuch/p/runs/x/export")]:
            res = CliRunner().invoke(app, args)
            assert (res.exit_code, " ".join(res.output.split())) == (1, f"error: {uri}: {tail}")
        res = CliRunner().invoke(app, ["report", "x", "--root", "s3://nosuch/p"])
        assert res.exit_code == 1
        assert " ".join(res.output.split()) == f"error: --root s3://nosuch/p: {tail.replace('the URI', '--root')}"


def test_parse_dedupe_ours_line_shows_the_kept_rows_and_sampled_memory(tmp_path):
    """In paired mode the 'ours run' line dropped what the child printed besides the timings: the
    sampled tree RSS/PSS its docstring promises and the kept count the reference line has (on a
    50-env tree: reference 114, ours 162 of 200)."""
    import importlib.util
    import subprocess
    import sys
    from tests.helpers.paths import REPO
    spec = importlib.util.spec_from_file_location("parse_dedupe", os.path.join(REPO, "bench", "parse_dedupe.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    subprocess.run([sys.executable, bench.TOOL, str(tmp_path / "tree"), "--envs", "5", "--seed", "1"], check=True)
    got = bench.run_ours(str(tmp_path / "tree"))
    assert sorted(got) == ["cpu_s", "kept_trajectories", "peak_rss_mb", "process_wall_s", "sampled_tree_peak_pss_mb",
                           "sampled_tree_peak_rss_mb", "wall_s"]
    assert got["kept_trajectories"] == 16 and got["sampled_tree_peak_pss_mb"] > 0  # 16 of 20 files selected


def test_reliability_save_of_some_sections_keeps_the_others(tmp_path):
    """``--sections secrets --save docs/reliability.md`` dropped every section it did not run (on
    the real file: sections 1, 2 and 4 and 1b's table; 1b kept only its note about that table)."""
    import argparse

    from bench import reliability
    doc = tmp_path / "reliability.md"
    doc.write_text("# old\n\n## 1. kill\n\nold table 1\n\n**ok 1**\n\n<!-- keep -->\nnote on 1\n<!-- /keep -->\n\n"
                   "## 3. secrets\n\nold table 3\n\n## How to read the tables\n\nfooter\n", encoding="utf-8")
    reliability.save(str(doc), [("3. secrets", "new table 3\n", "ok 3")], argparse.Namespace(upstream="stub"), 1.0)
    text = doc.read_text(encoding="utf-8")
    assert "Kept as the previous file had them (not run by this command): 1. kill.\n\n## 1. kill" in text
    assert text[text.index("## 1. kill"):text.index("## How to read")] == (
        "## 1. kill\n\nold table 1\n\n**ok 1**\n\n<!-- keep -->\nnote on 1\n<!-- /keep -->\n\n"
        "## 3. secrets\n\nnew table 3\n\n**ok 3**\n\n")
    assert text.count("## How to read the tables") == 1


def test_reliability_save_keeps_hand_written_blocks_of_the_header_and_the_footer(tmp_path):
    """A keep block above the first section (below the generated header) or in the footer was
    dropped by the next save: only blocks inside a section were kept."""
    import argparse

    from bench import reliability
    doc = tmp_path / "reliability.md"
    doc.write_text("# old header\n\n<!-- keep -->\nheader note\n<!-- /keep -->\n\n## 3. secrets\n\nold table 3\n\n"
                   f"{reliability.FOOTER}\n<!-- keep -->\nfooter note\n<!-- /keep -->\n", encoding="utf-8")
    for _ in range(2):  # saving twice changes nothing more: the blocks are neither lost nor doubled
        reliability.save(str(doc), [("3. secrets", "new table 3\n", "ok 3")], argparse.Namespace(upstream="stub"), 1.0)
        text = doc.read_text(encoding="utf-8")
        assert text.count("header note") == 1 and text.count("footer note") == 1
        assert text.index("# Reliability suite") < text.index("header note") < text.index("## 3. secrets")
        assert text.endswith(reliability.FOOTER + "\n<!-- keep -->\nfooter note\n<!-- /keep -->\n\n")
        assert "old header" not in text and "new table 3" in text

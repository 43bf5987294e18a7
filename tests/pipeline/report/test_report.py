"""`skillpipe report` and `skillpipe inspect --html`.

The run under test is built by ``tests/helpers/report_run.py`` (schema-correct artifacts, two bank
versions, one quarantined unreadable file, one failed LLM call, SFT and GRPO logs). The browser
tests open the report in headless Debian Chromium from a file:// URL (no network: every image
is a data URI) and read the DOM after the page's load handler ran.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.report import bankinfo, runinfo, training
from pipeline.report.render import SECTIONS
from tests.helpers.report_run import RUN_ID, build_run
from tests.helpers.paths import REPO

ARTIFACTS = os.path.join(REPO, ".pytest_artifacts")  # gitignored; CI keeps the screenshots
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-extensions", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]


def _chromium() -> str:
    exe = shutil.which("chromium")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs it: apt-get install chromium)")
        pytest.skip("chromium not installed (apt-get install chromium)")
    return exe


def _browser(url: str, *args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        p = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
                           capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """``(root, report path, DOM after load, screenshot path)`` of the test run's report, made by the CLI."""
    root = str(tmp_path_factory.mktemp("report"))
    build_run(root)
    out = os.path.join(root, "out", "report.html")
    res = CliRunner().invoke(app, ["report", RUN_ID, "--root", root, "--out", out])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip().splitlines()[-1] == out
    url = "file://" + out
    dom = _browser(url, "--dump-dom")
    shot = os.path.join(root, "report.png")
    _browser(url, f"--screenshot={shot}", "--window-size=1280,4200")
    os.makedirs(ARTIFACTS, exist_ok=True)
    shutil.copy(shot, os.path.join(ARTIFACTS, "report_screenshot.png"))
    return root, out, dom, shot


def test_report_opens_in_chromium_with_every_section_and_image(rendered):
    root, out, dom, shot = rendered
    assert 'data-loaded="1"' in dom  # the inline script ran
    load_ms = int(re.search(r'data-load-ms="(\d+)"', dom).group(1))
    print(f"report load time in headless Chromium: {load_ms} ms")
    assert load_ms < 5000  # ~100-300 ms measured; generous for a loaded 2-core CI machine
    for sid, title in SECTIONS:
        assert re.search(rf'<h2 id="{sid}">{re.escape(title)}</h2>', dom), sid
    imgs = re.findall(r"<img [^>]*>", dom)
    pngs = sorted(os.listdir(os.path.join(root, "out", "report_png")))
    assert pngs == ["bank.png", "eval.png", "funnel.png", "grpo.png", "llm.png", "reasons.png", "sft_loss.png",
                    "usage.png", "verify.png"]
    assert "1 successes demoted to failures" in dom and "skillrl_admissible.not_admissible" in dom
    assert len(imgs) == len(pngs)
    for tag in imgs:
        assert 'src="data:image/png;base64,' in tag  # inlined: nothing is fetched
        w = int(re.search(r'data-natural-width="(\d+)"', tag).group(1))
        h = int(re.search(r'data-natural-height="(\d+)"', tag).group(1))
        assert w > 0 and h > 0, tag[:120]
    assert not re.search(r'(src|href)="https?://', dom)
    assert os.path.getsize(out) < 5_000_000
    assert os.path.getsize(shot) > 50_000  # a rendered page, not a blank one
    assert re.search(r"<td>skill_use.rate</td><td[^>]*>0.5000</td>", dom)  # data quality from the export manifest
    assert re.search(r"<td>sft_fit</td><td[^>]*>37.5 %</td><td[^>]*>13.7 % – 69.4 %</td>", dom)  # eval with interval
    # the lineage explorer rendered the first pair: its source file and line, steps and target
    view = dom[dom.index('id="pair-view"'):]
    assert "pair-cool-1-1" in view and "rollouts/env001/test1.txt line 1" in view
    assert "&gt; go to countertop 1" in view and "&lt;action&gt;go to countertop 1&lt;/action&gt;" in view


def test_report_shows_quarantine_failed_call_and_two_bank_versions(rendered):
    root, out, dom, _ = rendered
    text = re.sub(r"<[^>]+>", " ", dom)
    text = re.sub(r"\s+", " ", text)
    assert "2 rows quarantined across 2 stage(s)" in text
    assert "1 failed LLM call(s)" in text
    assert "stage memory incomplete: 1 LLM request(s) failed (http_error 1); a plain rerun retries them" in text
    assert "unreadable_file 1" in text and "http_error 1" in text
    assert "HTTP 503 after 3 retries" in dom  # a sample row of the failed call
    assert re.search(r'class="card bad"><b>1</b>failed calls', dom)
    from pipeline.bank.store import BankStore
    versions = BankStore(root).versions()
    assert len(versions) == 2
    assert "2 bank versions in this run's lineage" in text
    for v in versions:
        assert v in dom
    assert "+1 −0" in text  # the evolved bank's diff to its parent
    assert "Close the fridge after cooling" in dom


def test_report_sections_render_without_data(tmp_path):
    """A run with only a parse artifact (quarantine in the legacy ``quarantine/`` folder) still
    gets every section, each saying what is missing."""
    from pipeline.core.artifacts import ArtifactStore, quarantine_dir
    from pipeline.core.records import TRAJECTORY_SCHEMA, QuarantineRow, to_table
    store = ArtifactStore(str(tmp_path), "bare")
    art = store.write("parse", to_table([], TRAJECTORY_SCHEMA), [QuarantineRow("parse", "not_utf8", "bad byte")],
                      {"stage": "parse", "fingerprint": "x", "counts": {"in": 1, "out": 0, "quarantined": 1,
                                                                        "quarantine_reasons": {"not_utf8": 1}}})
    qdir = quarantine_dir(art.path)
    os.rename(qdir, os.path.join(art.path, "quarantine"))  # a run written before the rename
    res = CliRunner().invoke(app, ["report", "bare", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    html = open(os.path.join(store.run_dir, "report.html"), encoding="utf-8").read()
    for sid, _ in SECTIONS:
        assert f'<h2 id="{sid}">' in html
    for note in ("no stage of this run recorded LLM use", "this run has no skills (skill bank) artifact",
                 "this run has no export artifact", "no SFT fit for this run", "no GRPO log for this run",
                 "no eval results for this run", "no SFT pairs in this run"):
        assert note in html, note
    assert "bad byte" in html  # the legacy quarantine folder was read
    assert html.count("<img ") == 2  # funnel + reasons only


def test_report_missing_run_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(app, ["report", "nope", "--root", str(tmp_path)])
    assert res.exit_code == 1
    assert "no run 'nope'" in res.output


def test_skill_usage_counts_shown_and_used():
    skills = [{"skill_id": "a", "kind": "general", "title": "Open the fridge first", "principle": ""},
              {"skill_id": "b", "kind": "mistake", "description": "Never heat a cold apple"}]
    pairs = [{"skill_ids_used": ["a", "b"], "think": "I will open the fridge first, then look."},
             {"skill_ids_used": ["a"], "think": "Fridge open now."},
             {"skill_ids_used": [], "think": "never heat a cold apple"}]
    rows = {r["skill_id"]: r for r in bankinfo.skill_usage(skills, pairs)}
    assert (rows["a"]["shown"], rows["a"]["used"], rows["a"]["used_rate"]) == (2, 1, 0.5)
    assert (rows["b"]["shown"], rows["b"]["used"]) == (1, 0)  # its words appear only in a pair not shown it
    assert bankinfo.pairs_using_skills(skills, pairs) == (2, 1)


def test_llm_usage_cost_and_throughput():
    stages = [{"stage": "memory", "manifest": {"wall_s": 10.0, "llm": {"calls": 4, "cache_hits": 1,
                                                                       "prompt_tokens": 2_000_000,
                                                                       "completion_tokens": 500_000}}},
              {"stage": "parse", "manifest": {"wall_s": 1.0, "llm": {}}}]
    u = runinfo.llm_usage(stages, price_prompt=0.5, price_completion=2.0)
    assert [r["stage"] for r in u["rows"]] == ["memory"]
    assert u["rows"][0]["cost_usd"] == pytest.approx(2.0)  # 2M * 0.5 + 0.5M * 2.0, per 1M
    assert u["rows"][0]["tok_per_s"] == pytest.approx(250_000.0)
    assert u["total"]["calls"] == 4 and u["total"]["failures"] == 0


def test_grpo_steps_stats(tmp_path):
    build_run(str(tmp_path))
    g = training.grpo_steps(os.path.join(str(tmp_path), "runs", RUN_ID))
    assert [s["step"] for s in g["steps"]] == [1, 2]
    s1 = g["steps"][0]
    assert s1["reward_mean"] == pytest.approx(2.5) and s1["adv_min"] == -0.7 and s1["adv_max"] == 0.7
    assert s1["adv_std"] == pytest.approx(0.7 / 2 ** 0.5)
    assert [(n["step"], n["group_id"]) for n in g["no_signal"]] == [(1, "s1:b"), (2, "s2:a")]
    assert g["validations"][0]["evolved_to"] == "bank-evolved"


def test_quality_and_eval_are_read_when_present(tmp_path):
    q = training.quality_metrics({"counters": {"quality": {"skill_use_rate": 0.25, "think_words": {"mean": 12.0}}}})
    assert q["rows"] == [("skill_use_rate", 0.25), ("think_words.mean", 12.0)] and q["note"] == ""
    note = training.quality_metrics({"counters": {}})["note"]
    assert note.startswith("Not available: the export manifest records no data-quality metrics")
    os.makedirs(tmp_path / "eval_sft")
    game = {"episodes": 10, "success_rate": 0.3, "success_ci95": [0.1, 0.6]}
    (tmp_path / "eval_sft" / "summary.json").write_text(json.dumps(
        {"label": "sft_fit", "policy": "runs/x/sft_fit", "success_rate": 0.4, "success_ci95": [0.2, 0.6],
         "episodes": 20, "valid_action_rate": 0.9, "per_game": {"coin": dict(game, success_rate=0.5), "twc": game}}))
    (tmp_path / "eval_sft" / "_manifest.json").write_text('{"success_rate": 0.99}')  # summary.json wins
    rows = training.eval_results(str(tmp_path))["rows"]
    assert [(r["name"], r["success_rate"], r["low"], r["high"], r["episodes"]) for r in rows] == \
        [("sft_fit", 0.4, 0.2, 0.6, 20), ("sft_fit / coin", 0.5, 0.1, 0.6, 10), ("sft_fit / twc", 0.3, 0.1, 0.6, 10)]


def test_inspect_html_of_a_stage_and_its_quarantine(tmp_path):
    run_dir = build_run(str(tmp_path))
    out = str(tmp_path / "export.html")
    res = CliRunner().invoke(app, ["inspect", os.path.join(run_dir, "export"), "--html", out, "--rows", "2"])
    assert res.exit_code == 0, res.output
    html = open(out, encoding="utf-8").read()
    assert "<b>4</b>rows here" in html and "Sample rows (2 of 4)" in html
    assert "<code>skill_ids_used</code>" in html and "pair-cool-1-1" in html
    out_q = str(tmp_path / "memory_q.html")
    res = CliRunner().invoke(app, ["inspect", os.path.join(run_dir, "memory"), "--quarantine", "--html", out_q])
    assert res.exit_code == 0, res.output
    html = open(out_q, encoding="utf-8").read()
    assert "http_error" in html and "HTTP 503 after 3 retries" in html
    res = CliRunner().invoke(app, ["inspect", run_dir, "--html", out])
    assert res.exit_code == 1 and "skillpipe report" in res.output


def test_funnel_rows_per_stage_and_shard():
    stages = [{"stage": "memory", "manifest": {"wall_s": 2.0, "counts": {
        "in": 5, "units_in": 5, "out": 4, "units_out": 4, "quarantined": 1, "quarantine_reasons": {"schema_invalid": 1}},
        "shards": [{"shard": "00000", "counts": {"in": 3, "out": 3, "quarantined": 0}},
                   {"shard": "00001", "counts": {"in": 2, "out": 1, "quarantined": 1,
                                                 "quarantine_reasons": {"schema_invalid": 1}}}]}}]
    (row,) = runinfo.funnel(stages)
    assert (row["units_in"], row["out"], row["quarantined"], row["reasons"]) == (5, 4, 1, {"schema_invalid": 1})
    assert [(s["shard"], s["in"], s["out"], s["quarantined"]) for s in row["shards"]] == \
        [("00000", 3, 3, 0), ("00001", 2, 1, 1)]


def test_quarantine_samples_per_reason(tmp_path):
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.records import TRAJECTORY_SCHEMA, QuarantineRow, to_table
    q = [QuarantineRow("parse", "not_utf8" if i % 3 else "truncated_record", f"d{i}", raw="x" * 500) for i in range(10)]
    art = ArtifactStore(str(tmp_path), "r").write("parse", to_table([], TRAJECTORY_SCHEMA), q, {"stage": "parse"})
    got = runinfo.quarantine_samples(art.path, per_reason=2, max_chars=10)
    assert {r: [x["detail"] for x in rows] for r, rows in got.items()} == \
        {"truncated_record": ["d0", "d3"], "not_utf8": ["d1", "d2"]}
    assert got["not_utf8"][0]["raw"] == "x" * 10 + "… (+490 chars)"


def test_report_stays_small_for_a_large_run(tmp_path):
    """1,000 pairs with 30,000-character prompts: the explorer keeps 200, each prompt cut to
    6,000 characters, so the page stays far under the 5 MB bound."""
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.records import SFT_PAIR_SCHEMA, to_table
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.report.render import build_report
    from tests.helpers.report_run import row
    pairs = [row(SFT_PAIR_SCHEMA, pair_id=f"pair-{i:04d}", trajectory_id=f"traj-{i}", instruction="p" * 30_000,
                 output="<think>t</think><action>look</action>", split="train") for i in range(1000)]
    ArtifactStore(str(tmp_path), "big").write("export", to_table(pairs, SFT_PAIR_SCHEMA), [], {"stage": "export"})
    res = build_report(str(tmp_path), "big")
    html = open(res["path"], encoding="utf-8").read()
    assert res["bytes"] < 2_000_000, res["bytes"]
    assert "(the first 200 pairs)" in html and "pair-0199" in html and "pair-0200" not in html


def test_verify_section_shows_counts_by_source_and_rule_and_its_chart(tmp_path):
    """Without a browser: the report of the test run has the verify chart and the counts by
    source and rule from verify's manifest; a run without verify says so."""
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.report.render import build_report
    root = str(tmp_path)
    build_run(root)
    res = build_report(root, RUN_ID)
    assert "verify.png" in [os.path.basename(p) for p in res["pngs"]]
    html = open(res["path"], encoding="utf-8").read()
    section = html.split('<h2 id="verify">Environment rules</h2>', 1)[1].split("</section>", 1)[0]
    assert "1 valid, 0 with refused steps cut (0 steps), 1 successes demoted to failures" in section
    assert "<td>alfworld/skillrl_txt</td>" in section and "<td>not_admissible 2</td>" in section
    assert "<td>skillrl_admissible.not_admissible</td>" in section
    store = ArtifactStore(root, RUN_ID)
    shutil.rmtree(store.stage_dir("verify"))
    html = open(build_report(root, RUN_ID)["path"], encoding="utf-8").read()
    assert "Not available: this run has no verify manifest" in html


OUTCOME = {
    "date": "2026-12-03T10:00:00+00:00", "commit": "abc1234", "machine": "2 CPUs (test)", "game": "coin",
    "game_params": "numLocations=2", "budget": {"sft_steps": 40, "eval_episodes": 60, "llm_base_url": ""},
    "arms": [
        {"name": "base", "label": "base model", "run_id": "arms", "trained": False, "data": None,
         "eval": {"episodes": 60, "wins": 0, "success_rate": 0.0, "success_ci95": [0.0, 0.0602],
                  "valid_action_rate": 0.0, "format_error_rate": 1.0, "mean_steps": 4.0}},
        {"name": "thinks", "label": "distilled thinks, no skills", "run_id": "arms-noskills", "trained": True,
         "eval": None, "why": "no SFT pair", "data": {"pairs": 0, "quarantine_distill": 1.0}},
        {"name": "skills", "label": "distilled thinks + skill bank", "run_id": "arms", "trained": True,
         "eval": {"episodes": 60, "wins": 45, "success_rate": 0.75, "success_ci95": [0.6277, 0.8422],
                  "valid_action_rate": 0.98, "format_error_rate": 0.01, "mean_steps": 2.5},
         "data": {"pairs": 66, "skill_use": 0.25, "think_words": 12.5, "quarantine_distill": 0.1,
                  "quarantine_pairs": 0.0}}],
    "where_skills_used": {"steps": 150, "citing_steps": 30, "step_rate": 0.2, "episodes_citing": 20,
                          "success_citing": 0.9, "episodes_not_citing": 40, "success_not_citing": 0.675},
    "verdict": ["outcome: coin best arm skills 0.750 [0.6277, 0.8422]; its interval separates from base"]}


def test_outcome_arms_side_by_side_when_the_result_file_names_the_run(tmp_path):
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.records import TRAJECTORY_SCHEMA, to_table
    assert training.outcome_arms(str(tmp_path), "arms")["note"].startswith("no outcome experiment for this root")
    (tmp_path / "outcome.json").write_text("{not json")
    assert "unreadable" in training.outcome_arms(str(tmp_path), "arms")["note"]
    (tmp_path / "outcome.json").write_text(json.dumps(OUTCOME))
    assert training.outcome_arms(str(tmp_path), "other")["note"].endswith("is about other runs")
    o = training.outcome_arms(str(tmp_path), "arms-noskills")
    assert [(r["name"], r["this_run"], r["success_rate"], r["low"], r["high"]) for r in o["rows"]] == [
        ("base", False, 0.0, 0.0, 0.0602), ("thinks", True, None, None, None), ("skills", False, 0.75, 0.6277, 0.8422)]
    assert o["rows"][2]["skill_use"] == 0.25 and o["rows"][1]["why"] == "no SFT pair" and o["note"] == ""
    ArtifactStore(str(tmp_path), "arms").write("parse", to_table([], TRAJECTORY_SCHEMA), [],
                                               {"stage": "parse", "fingerprint": "x", "counts": {"in": 0, "out": 0}})
    out = str(tmp_path / "r.html")
    res = CliRunner().invoke(app, ["report", "arms", "--root", str(tmp_path), "--out", out])
    assert res.exit_code == 0, res.output
    html = open(out, encoding="utf-8").read()
    training_part = html[html.index('<h2 id="training">'):html.index('<h2 id="lineage">')]
    assert '<h3 id="outcome-arms">' in training_part and "commit <code>abc1234</code>" in training_part
    assert "45/60 = 75.0 %" in training_part and "62.8 % – 84.2 %" in training_part
    assert training_part.count('class="this-run"') == 2  # base and skills live in run "arms"
    assert 'colspan="2">no SFT pair<' in training_part and "30 of 150 steps (20.0 %)" in training_part
    assert "its interval separates from base" in training_part and "llm_base_url" not in training_part

"""bench/results.py: where result files go, what one holds, and the figures of a finished make run."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from bench import results
from pipeline.core.artifacts import ArtifactStore


def test_nothing_is_written_under_pytest_unless_asked(monkeypatch, tmp_path):
    monkeypatch.delenv(results.ENV_DIR, raising=False)
    assert os.environ.get("PYTEST_CURRENT_TEST")
    assert results.results_dir() is None
    assert results.write_result("soak", {"hangs": 0}) is None
    assert results.results_dir(str(tmp_path)) == str(tmp_path)


@pytest.mark.parametrize("value,expected", [("off", None), ("", None), ("/some/folder", "/some/folder")])
def test_the_environment_variable_decides(monkeypatch, value, expected):
    monkeypatch.setenv(results.ENV_DIR, value)
    assert results.results_dir() == expected


def test_a_result_file_names_its_date_commit_machine_and_figures(tmp_path):
    path = results.write_result("soak", {"hangs": 0, "p50_s": 2.86}, {"runs": 100}, command="bench/soak.py --runs 100",
                                notes=["calm host"], out_dir=str(tmp_path))
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    assert os.path.basename(path) == results.file_name(doc) and path.endswith("-soak.json")
    assert doc["name"] == "soak" and doc["figures"] == {"hangs": 0, "p50_s": 2.86} and doc["budget"] == {"runs": 100}
    assert doc["command"] == "bench/soak.py --runs 100" and doc["notes"] == ["calm host"]
    assert doc["date"].endswith("+00:00") and set(doc["machine"]) == {"cpu", "cores", "ram_gb", "load_avg_1m"}
    assert doc["machine"]["cores"] >= 1
    (loaded,) = results.load_results(str(tmp_path))
    assert loaded["file"] == os.path.basename(path) and results.latest([loaded], "soak") == loaded


def test_file_name_of_a_day_alone():
    assert results.file_name({"name": "make_run", "date": "2026-12-06"}) == "2026-12-06-000000-make_run.json"
    assert results.file_name({"name": "soak", "date": "2026-12-06T21:25:04+00:00"}) == "2026-12-06-212504-soak.json"


def test_results_sort_by_when_they_were_recorded(tmp_path):
    for name, doc in (("b.json", {"name": "make_run", "date": "2026-12-06", "recorded": "2026-12-06T17:21"}),
                      ("a.json", {"name": "make_run", "date": "2026-12-06", "recorded": "2026-12-06T06:02"}),
                      ("c.txt", {})):
        (tmp_path / name).write_text(json.dumps(doc))
    assert [d["file"] for d in results.load_results(str(tmp_path))] == ["a.json", "b.json"]
    assert results.latest(results.load_results(str(tmp_path)), "make_run")["file"] == "b.json"


def _stage(store: ArtifactStore, stage: str, units: tuple[int, int], wall: float, llm: dict | None = None,
           reasons: dict | None = None, counters: dict | None = None, table: pa.Table | None = None) -> None:
    manifest = {"stage": stage, "counts": {"in": units[0], "units_in": units[0], "units_out": units[1], "out": units[1],
                                           "quarantined": units[0] - units[1], "quarantine_reasons": reasons or {}},
                "counters": counters or {}, "wall_s": wall, "llm": llm or {}}
    store.write(stage, table if table is not None else pa.table({"x": list(range(units[1]))}), [], manifest)


def test_make_run_figures_from_the_manifests(tmp_path):
    store = ArtifactStore(str(tmp_path), "sample")
    _stage(store, "parse", (19, 19), 1.2)
    _stage(store, "verify", (19, 19), 0.8, counters={"demoted": 2})
    _stage(store, "memory", (19, 17), 280.4, {"calls": 20, "prompt_tokens": 1000, "cached_prompt_tokens": 400,
                                               "completion_tokens": 300})
    _stage(store, "skills", (17, 15), 135.0, {"calls": 6, "prompt_tokens": 500, "completion_tokens": 200})
    _stage(store, "distill", (19, 7), 119.2, {"calls": 20, "prompt_tokens": 700, "completion_tokens": 100},
           reasons={"not_success": 11, "reused_think": 1},
           table=pa.table({"model": ["source", "qwen", "qwen", "source", "qwen", "source", "qwen"]}))
    _stage(store, "export", (40, 35), 0.5)
    figures = results.make_run_figures(str(tmp_path), "sample")
    assert figures == {"data_stages_s": 537, "stage_s": {"memory": 280, "skills": 135, "distill": 119},
                       "llm_calls": 46, "tokens": 2800, "prompt_tokens": 2200, "cached_prompt_tokens": 400,
                       "completion_tokens": 600, "trajectories": 19, "verify_demoted": 2, "memory_kept": 17,
                       "memory_in": 19, "bank_items": 15, "distill_kept": 7, "distill_successes": 8,
                       "distill_model_written": 4, "pairs": 35}


def test_make_run_figures_without_a_run_says_what_to_do(tmp_path):
    with pytest.raises(SystemExit, match="run `make run`"):
        results.make_run_figures(str(tmp_path), "sample")

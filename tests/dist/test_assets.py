"""Data-aware scheduling (dags/skillpipe_assets.py): the DAG files parse the way the
dag-processor parses them, the dispatcher is scheduled on the traces asset, the register task
emits it, and asset events map to skillpipe runs (one per batch, run id from the batch name)."""
from __future__ import annotations

import importlib.util
import os

import pytest

from tests.helpers.paths import REPO

DAGS = os.path.join(REPO, "dags")


@pytest.fixture(scope="module")
def bag():
    from airflow.dag_processing.dagbag import DagBag
    return DagBag(DAGS)


@pytest.fixture(scope="module")
def assets():
    spec = importlib.util.spec_from_file_location("skillpipe_assets_under_test",
                                                  os.path.join(DAGS, "skillpipe_assets.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dag_files_parse_and_dispatcher_is_scheduled_on_the_traces_asset(bag, assets):
    assert bag.import_errors == {}
    assert {"skillpipe", "skillpipe_register_batch", "skillpipe_on_traces"} <= set(bag.dags)
    on_traces = bag.dags["skillpipe_on_traces"]
    assert type(on_traces.timetable).__name__ == "AssetTriggeredTimetable"
    assert [a.uri for a in on_traces.timetable.asset_condition.objects] == ["skillpipe://traces/drop"]
    assert [a.uri for a in bag.dags["skillpipe_register_batch"].get_task("register").outlets] == \
        ["skillpipe://traces/drop"]
    trigger = on_traces.get_task("run_skillpipe")
    assert trigger.partial_kwargs["trigger_dag_id"] == "skillpipe" and trigger.partial_kwargs["reset_dag_run"]
    # everything an event passes on is a param of the skillpipe DAG (shards once it has one)
    params = set(bag.dags["skillpipe"].params)
    assert set(assets.PASSED_ON) - {"shards"} <= params and {"input_path", "run_id"} <= params


def test_batch_runs_one_run_per_batch_last_event_wins(assets):
    runs = assets.batch_runs([
        {"batch_uri": "s3://lake/traces/2026-12-01/", "root": "s3://lake/skillpipe"},
        {"batch_uri": "s3://lake/traces/batch-0002", "shards": 4, "ignored": "x"},
        {"batch_uri": "s3://lake/traces/2026-12-01", "root": "s3://lake/other"},
    ])
    assert runs == [
        {"trigger_run_id": "batch-0002",
         "conf": {"input_path": "s3://lake/traces/batch-0002", "run_id": "batch-0002", "shards": 4}},
        {"trigger_run_id": "batch-2026-12-01",
         "conf": {"input_path": "s3://lake/traces/2026-12-01", "run_id": "batch-2026-12-01",
                  "root": "s3://lake/other"}},
    ]


def test_batch_run_ids_are_safe_and_events_without_a_batch_are_refused(assets):
    assert assets.batch_run_id("file:///x/y/traces week 3.jsonl") == "batch-traces-week-3.jsonl"
    assert assets.batch_run_id("s3://b/p/" + "a" * 300).startswith("batch-aaa")
    assert len(assets.batch_run_id("s3://b/p/" + "a" * 300)) == 200
    with pytest.raises(ValueError, match="no folder or file name"):
        assets.batch_run_id("s3://")
    with pytest.raises(ValueError, match="without batch_uri"):
        assets.batch_runs([{"root": "s3://lake"}])

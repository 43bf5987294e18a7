"""
### skillpipe: data-aware scheduling

The input drop is the Airflow Asset `skillpipe://traces/drop` (name `skillpipe_traces`). An event
on it says "a new trace batch is complete"; its `extra` names the batch:
`{"batch_uri": "s3://bucket/traces/2026-12-01"}` (any fsspec URI or a local path), and may carry
`root`, `config`, `llm_base_url`, `llm_model`, `env`, `shards`, `train` for the run.

* `skillpipe_register_batch` (manual, param `batch_uri`): checks that the batch exists and emits
  the event. A writer outside Airflow can emit it instead through the REST API
  (`POST /api/v2/assets/events` with the asset id and the same `extra`).
* `skillpipe_on_traces` (scheduled on the asset): one `skillpipe` DAG run per batch in the events
  that triggered it, with run id = artifact run id = `batch-<batch folder name>`. A batch
  registered again reruns that same run (cleared, not duplicated); its stages skip when
  their inputs are unchanged.

Backfill of an earlier batch: register it again, or trigger `skillpipe` with its run id.
"""
from __future__ import annotations

import os
import re

import pendulum
from airflow.sdk import Asset, Param, dag, task

TRACES = Asset(uri="skillpipe://traces/drop", name="skillpipe_traces", group="skillpipe")
#: keys of an event's ``extra`` passed on to the skillpipe run's conf unchanged
PASSED_ON = ("root", "config", "llm_base_url", "llm_model", "env", "shards", "train")


def batch_run_id(batch_uri: str) -> str:
    """The run id of the batch at ``batch_uri``: ``batch-<last path component>``, characters
    outside ``[A-Za-z0-9._-]`` replaced by ``-``, at most 200 characters (Airflow run ids and
    artifact folders both accept it). Raises ``ValueError`` for a URI with no name."""
    path = batch_uri.split("://", 1)[-1].rstrip("/")
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", os.path.basename(path)).strip("-.")
    if not name:
        raise ValueError(f"batch URI {batch_uri!r} has no folder or file name to name the run after")
    return (name if name.startswith("batch-") else f"batch-{name}")[:200]


def batch_runs(extras: list[dict]) -> list[dict]:
    """One ``{"trigger_run_id", "conf"}`` per batch named in the asset events' ``extras`` (in
    order; a batch named twice keeps its last event), ready for ``TriggerDagRunOperator``.
    ``conf`` holds ``input_path`` (the batch URI), ``run_id`` and the :data:`PASSED_ON` keys the
    event carries. Raises ``ValueError`` for an event without ``batch_uri``."""
    runs: dict[str, dict] = {}
    for extra in extras:
        uri = (extra or {}).get("batch_uri")
        if not uri:
            raise ValueError(f"asset event without batch_uri in its extra: {extra!r}")
        run_id = batch_run_id(uri)
        conf = {"input_path": uri, "run_id": run_id, **{k: extra[k] for k in PASSED_ON if k in extra}}
        runs.pop(run_id, None)
        runs[run_id] = {"trigger_run_id": run_id, "conf": conf}
    return list(runs.values())


@dag(dag_id="skillpipe_register_batch", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     catchup=False, tags=["skillpipe"], doc_md=__doc__,
     params={"batch_uri": Param(type="string", minLength=1, description="the new trace batch (file/folder URI)"),
             **{k: Param("", type="string", description=f"passed on to the skillpipe run's {k} (empty: default)")
                for k in ("root", "config", "llm_base_url", "llm_model")},
             "shards": Param(0, type="integer", minimum=0, description="passed on (0: from the input size)"),
             "train": Param(True, type="boolean", description="passed on (False: the run stops after export)")})
def skillpipe_register_batch():
    """Manual DAG: one task, ``register``, checks that param ``batch_uri`` exists (else
    ``FileNotFoundError``) and emits a :data:`TRACES` event whose ``extra`` is ``batch_uri`` plus
    the non-empty :data:`PASSED_ON` params; its XCom is ``{batch_uri, run_id}``."""
    @task(outlets=[TRACES])
    def register(params=None) -> dict:
        """Check that the batch exists, then emit the asset event naming it."""
        import fsspec
        from airflow.sdk import get_current_context
        uri = params["batch_uri"]
        fs, path = fsspec.core.url_to_fs(uri)
        if not fs.exists(path):
            raise FileNotFoundError(f"trace batch {uri} does not exist: nothing registered")
        extra = {"batch_uri": uri, **{k: params[k] for k in PASSED_ON if params.get(k) not in (None, "")}}
        get_current_context()["outlet_events"][TRACES].extra = extra
        return {"batch_uri": uri, "run_id": batch_run_id(uri)}

    register()


@dag(dag_id="skillpipe_on_traces", schedule=[TRACES], start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     catchup=False, tags=["skillpipe"], doc_md=__doc__)
def skillpipe_on_traces():
    """Scheduled on :data:`TRACES`: triggers one ``skillpipe`` DAG run per batch in the triggering
    events (:func:`batch_runs`), run id ``batch-<name>``, clearing an earlier run of that id."""
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

    @task
    def batches(triggering_asset_events=None) -> list[dict]:
        """The batches named by the events that triggered this run (see ``batch_runs``)."""
        events = [e for evs in triggering_asset_events.values() for e in evs]
        return batch_runs([dict(e.extra or {}) for e in events])

    TriggerDagRunOperator.partial(task_id="run_skillpipe", trigger_dag_id="skillpipe",
                                  reset_dag_run=True).expand_kwargs(batches())


skillpipe_register_batch()
skillpipe_on_traces()

"""Stage ``split``: the train/val assignment of every environment instance, as its own artifact.

Reads the ``env_instance`` and ``outcome`` columns of ``verify`` (not the steps) and writes
one row per instance (:data:`~pipeline.core.records.SPLIT_SCHEMA`): its split, the rule that put
it there and the ``export.val_fraction`` / ``export.seed`` of the draw. The rule is in
:mod:`pipeline.core.split`; ``skills`` (which keeps val instances' memories out of the bank) and
``export`` (which splits the pairs) both read this artifact, so they cannot disagree. Units are
instances; nothing is quarantined.
"""
from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq

from pipeline.core.artifacts import StageArtifact, parquet_parts
from pipeline.core.records import SPLIT_SCHEMA
from pipeline.core.split import split_rows
from pipeline.stage.stage import Stage, StageContext, StageOutput


def instance_outcomes(trajectories: StageArtifact) -> tuple[list[str], set[str], int]:
    """``(env_instance of every trajectory, instances with a successful one, trajectories)``
    of a trajectory artifact; only two columns are read."""
    instances: list[str] = []
    succeeded: set[str] = set()
    for path in parquet_parts(trajectories.path):
        t = pq.read_table(path, columns=["env_instance", "outcome"])
        for inst, outcome in zip(t.column("env_instance").to_pylist(), t.column("outcome").to_pylist()):
            instances.append(inst)
            if outcome == "success":
                succeeded.add(inst)
    return instances, succeeded, len(instances)


class Split(Stage):
    """Assign every environment instance of the run to train or val (module docstring)."""
    name = "split"
    inputs = ("verify",)
    schema = SPLIT_SCHEMA
    config_sections = ("export",)

    def run(self, ctx: StageContext) -> StageOutput:
        """One row per instance; counts: in = trajectories read, units = instances."""
        ecfg = ctx.config.export
        instances, succeeded, n_trajectories = instance_outcomes(ctx.upstream("verify"))
        rows = split_rows(instances, succeeded, ecfg.val_fraction, ecfg.seed)
        sides = Counter(r["split"] for r in rows)
        return StageOutput(rows=rows, quarantine=[], rows_in=n_trajectories, units_in=len(rows),
                           counters={"train": sides["train"], "val": sides["val"],
                                     "drawn": sum(r["rule"] == "hash" for r in rows)})


STAGE = Split()

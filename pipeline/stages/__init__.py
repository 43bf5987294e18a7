"""The data stages, in run order: one module each, named after the stage, whose ``STAGE`` is a
:class:`pipeline.stage.stage.Stage` (the contract is documented there).

``STAGES`` is the one list of stage names, declared with the run layout
(:data:`pipeline.core.layout.STAGES`: each names a folder of a run) and read from here by the
runner, the CLI and the Airflow DAG. Three stages were renamed to say what they do (old name ->
new); the CLI and config files accept the old names for one release.
"""
from __future__ import annotations

from pipeline.core.layout import STAGES
RENAMED_STAGES = {"dedupe": "remove_loops", "aggregate": "skills", "validate": "build_pairs"}


def canonical_stage(name: str) -> str:
    """``name`` under its current stage name (old names map to new ones; anything else is
    returned unchanged for the caller to reject)."""
    return RENAMED_STAGES.get(name, name)


def get_stage(name: str):
    """The :class:`~pipeline.stage.stage.Stage` registered as ``name`` (old names accepted): the
    ``STAGE`` of module ``pipeline.stages.<name>``. Raises ``ValueError`` for an unknown name."""
    import importlib
    name = canonical_stage(name)
    if name not in STAGES:
        raise ValueError(f"unknown stage {name!r}; stages: {', '.join(STAGES)}")
    return importlib.import_module(f"pipeline.stages.{name}").STAGE

"""The data stages, in run order: one module each, named after the stage, whose ``STAGE`` is a
:class:`pipeline.core.stage.Stage` (the contract is documented there).

``STAGES`` is the one list of stage names; the runner, the CLI and the Airflow DAG all read it.
Three stages were renamed to say what they do (old name -> new); the CLI and config files
accept the old names for one release.
"""
from __future__ import annotations

STAGES = ("parse", "remove_loops", "split", "memory", "skills", "distill", "build_pairs", "export")
RENAMED_STAGES = {"dedupe": "remove_loops", "aggregate": "skills", "validate": "build_pairs"}


def canonical_stage(name: str) -> str:
    """``name`` under its current stage name (old names map to new ones; anything else is
    returned unchanged for the caller to reject)."""
    return RENAMED_STAGES.get(name, name)


def get_stage(name: str):
    """The stage object registered as ``name`` (old names accepted).

    Transition: a stage module that defines ``STAGE`` (a :class:`pipeline.core.stage.Stage`)
    is used as is; an older module (``NAME``/``INPUTS``/``run(ctx)`` constants) is wrapped by
    :class:`_ModuleStage`. Raises ``ValueError`` for an unknown name."""
    import importlib
    name = canonical_stage(name)
    if name not in STAGES:
        raise ValueError(f"unknown stage {name!r}; stages: {', '.join(STAGES)}")
    mod = importlib.import_module(f"pipeline.stages.{name}")
    return getattr(mod, "STAGE", None) or _ModuleStage(mod)


class _ModuleStage:
    """Adapter: an old-style stage module seen through the :class:`~pipeline.core.stage.Stage` API."""

    def __init__(self, mod):
        self.module = mod
        self.name, self.inputs, self.schema = mod.NAME, tuple(mod.INPUTS), mod.SCHEMA
        self.uses_llm = mod.USES_LLM
        self.config_sections = getattr(mod, "CONFIG", None)
        self.split_files = getattr(mod, "SPLIT_FILES", None)

    def prompt_files(self, ctx):
        return self.module.prompt_files(ctx) if hasattr(self.module, "prompt_files") else []

    def input_facts(self, ctx):
        return [{"stage": s, "content_sha256": ctx.upstream(s).content_sha256} for s in self.inputs]

    def run(self, ctx):
        return self.module.run(ctx)

"""The step contract: the work after the data stages (``sft_fit``, ``grpo``, ``eval_*``, ``rollout``).

A step's output is a folder (a model checkpoint, an evaluation's episodes) rather than the rows
of a stage, and it may keep its own resume state, but it is declared and run the way a stage is.
Subclass :class:`TrainingStep`::

    class Fit(TrainingStep):
        name = "sft_fit"                      # folder: runs/<run_id>/sft_fit/
        inputs = ("export",)                  # upstream artifacts (fingerprinted by content)
        config_section = "sft"                # the run config section it reads
        not_fingerprinted = ("output_dir",)   # config fields that name places, not results
        manifest_name = SFT_MANIFEST          # the file that marks it complete
        version = "1"                         # bump when the meaning of the output changes

        def run(self, store, cfg):
            m = train(store.require("export").path, self.output_dir(store), cfg)
            return StepOutput(m, counts(m["pairs"], m["pairs"]), files=["model.safetensors"])

:func:`pipeline.engine.steps.run_step` does the rest, the same way for every step: **freshness** (every upstream
artifact was built from the current version of its own upstreams, else ``ArtifactError``),
**fingerprint** (:func:`pipeline.core.manifest.step_fingerprint`: upstream content hashes, the
step's other input facts, the config without the places, the step version and the package
version), **reuse** (a manifest that recorded the same fingerprint: skipped), **run** (the step
returns what it produced, a :class:`StepOutput`, and writes no manifest), **record** (the one
recorder, :func:`pipeline.core.recorder.record`, writes the manifest once, with the fingerprint,
the counts and a content hash: its presence with a fingerprint is the "complete" mark; a step
whose output is an artifact, eval and rollout, is written with it through the
:class:`~pipeline.core.artifacts.ArtifactStore`), :meth:`TrainingStep.after_record` (what lives
outside the step folder, idempotent), and the small reference a DAG task returns
(:func:`pipeline.core.manifest.xcom`).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, ClassVar

import pyarrow as pa

from pipeline.core.artifacts import ArtifactStore


@dataclasses.dataclass
class StepOutput:
    """What a step produced, handed to the step runner, which records it once.

    Attributes:
        manifest: what the step reports (JSON-ready): its manifest without the fingerprint, counts
            and what the recorder adds.
        counts: the counts of its data (:func:`pipeline.core.recorder.counts`: pairs trained on,
            episodes played).
        files: a step that writes its own folder (``sft_fit``, ``grpo``): the files of that folder,
            relative to it, whose content the manifest hashes.
        rows: a step whose output is an artifact (``eval_*``, ``rollout``): its rows, written with
            ``extra_files`` and the manifest in one atomic write of the artifact store.
    """
    manifest: dict[str, Any]
    counts: dict[str, Any]
    files: list[str] = dataclasses.field(default_factory=list)
    rows: pa.Table | None = None
    extra_files: dict[str, bytes | str] = dataclasses.field(default_factory=dict)


class TrainingStep:
    """Base class of the steps after the data stages: declare the attributes, implement :meth:`run`.

    Attributes:
        name: the step's folder under ``runs/<run_id>/`` (and its DAG task's name).
        inputs: upstream artifacts it needs; each is freshness-checked and fingerprinted by content.
        optional_inputs: upstream artifacts fingerprinted (and checked) only when the run has them.
        config_section: the run config section it reads (``sft``, ``grpo``, ``eval``; '' = none).
        not_fingerprinted: config fields left out of the fingerprint (places, resume switches,
            speed-only settings): changing them reruns nothing.
        manifest_name: the file in the step folder whose presence, with a fingerprint, marks
            the step complete.
        version: the step's code version, bumped by its author when the meaning of the output
            changes; part of the fingerprint with the package version.
    """
    name: ClassVar[str] = ""
    inputs: ClassVar[tuple[str, ...]] = ()
    optional_inputs: ClassVar[tuple[str, ...]] = ()
    config_section: ClassVar[str] = ""
    not_fingerprinted: ClassVar[tuple[str, ...]] = ()
    manifest_name: ClassVar[str] = ""
    version: ClassVar[str] = "1"

    def output_dir(self, store: ArtifactStore) -> str:
        """The step folder of run ``store``: ``runs/<run_id>/<name>/``."""
        return os.path.join(store.run_dir, self.name)

    def configure(self, store: ArtifactStore, cfg: Any) -> Any:
        """``cfg`` pointed at run ``store`` (its paths, the run's own prompt section...). Default: as given."""
        return cfg

    def input_facts(self, store: ArtifactStore, cfg: Any) -> list[dict[str, Any]]:
        """Fingerprint facts of what the step reads besides its upstream artifacts (a checkpoint's
        weights, a base model), as JSON-ready dicts. Default: none."""
        return []

    def config_facts(self, cfg: Any) -> dict[str, Any]:
        """The fingerprinted part of ``cfg`` (a dataclass): every field but :attr:`not_fingerprinted`."""
        return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in self.not_fingerprinted}

    def still_valid(self, store: ArtifactStore, cfg: Any, prev: dict[str, Any]) -> bool:
        """Whether a manifest of the same fingerprint may be reused (e.g. its output outside the
        step folder is still there). Default: yes."""
        return True

    def run(self, store: ArtifactStore, cfg: Any) -> StepOutput:
        """Do the work into :meth:`output_dir`; return what it produced. Must not write
        :attr:`manifest_name` (nor an artifact of its own): the step runner records it once."""
        raise NotImplementedError

    def rows(self, manifest: dict[str, Any]) -> int:
        """How many data rows the output stands for (the XCom ``rows``: pairs trained on,
        episodes played)."""
        return 0

    def after_record(self, root: str, store: ArtifactStore, cfg: Any, manifest: dict[str, Any],
                     reused: bool) -> None:
        """Write what outlives the step folder (a registry under ``root``, the root the run was
        given). Called after the record and also when an unchanged step is reused, so it must be
        idempotent. Default: nothing."""

    def describe(self, manifest: dict[str, Any]) -> list[str]:
        """Log lines of a finished run of the step. Default: none."""
        return []

    def __repr__(self) -> str:
        return f"<step {self.name}>"

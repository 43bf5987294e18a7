"""The ``grpo`` step of a pipeline run: online GRPO from the run's SFT checkpoint and skill bank.

Shared by the Airflow task ``grpo``, ``skillpipe rl grpo --run-id`` and ``make run``. Output goes to
``<root>/runs/<run_id>/grpo/``. A step of :mod:`pipeline.stage.step`: skipped when nothing
changed (the export's content, which holds the bank; the SFT step's fingerprint, result and
weights; the ``grpo:`` settings; the step and package versions).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.layout import CHECKPOINT_MANIFEST, GRPO_MANIFEST, GRPO_STEP, SFT_STEP
from pipeline.core import recorder
from pipeline.core.recorder import counts
from pipeline.engine.steps import run_step
from pipeline.stage.step import StepOutput, TrainingStep

from sft import manifest as sft_manifest
from sft.rl.config import GRPOConfig, run_prompt_config, smoke

STEP = GRPO_STEP
MANIFEST_NAME = GRPO_MANIFEST


def _bank_env(bank_path: str) -> str:
    with open(bank_path, encoding="utf-8") as f:
        return (json.load(f).get("metadata") or {}).get("env", "")


class GRPOStep(TrainingStep):
    """Online GRPO: skill-conditioned rollouts from the SFT checkpoint, the bank evolving on failures."""
    name = GRPO_STEP
    inputs = ("export",)
    config_section = "grpo"
    # places and how to resume; the SFT checkpoint and the bank are input facts instead of paths
    not_fingerprinted = ("output_dir", "model", "model_cache_dir", "skill_bank", "resume")
    manifest_name = GRPO_MANIFEST

    def configure(self, store: ArtifactStore, cfg: GRPOConfig | None) -> GRPOConfig:
        """``cfg`` (default :func:`sft.rl.config.smoke`) pointed at run ``store``: its SFT checkpoint
        as the starting policy, its exported bank, the step folder as output and the run's own
        prompt section (the SFT pairs were rendered with it, so RL prompts match them byte for
        byte). Raises ``ArtifactError`` without an export or build_pairs artifact."""
        bank = os.path.join(store.require("export").path, "skill_bank.json")
        return dataclasses.replace(cfg or smoke(), output_dir=self.output_dir(store),
                                   model=os.path.join(store.run_dir, SFT_STEP), skill_bank=bank,
                                   skill_bank_env=_bank_env(bank), prompt=run_prompt_config(store))

    def input_facts(self, store: ArtifactStore, cfg: GRPOConfig) -> list[dict[str, Any]]:
        """The SFT step it starts from: its fingerprint and result. Raises ``FileNotFoundError``
        without an SFT checkpoint."""
        sft = sft_manifest.read_manifest(cfg.model)
        if sft is None:
            raise FileNotFoundError(f"no SFT checkpoint in {cfg.model}: run `skillpipe sft fit --run-id "
                                    f"{store.run_id}` first")
        return [{"stage": SFT_STEP, **{k: sft.get(k) for k in ("fingerprint", "global_step", "final_loss")}}]

    def run(self, store: ArtifactStore, cfg: GRPOConfig) -> StepOutput:
        """Train (:func:`sft.rl.grpo.train`); returns its summary with ``train_episodes``
        (:func:`grpo_output`)."""
        from sft.rl.grpo import train
        return grpo_output(cfg.output_dir, train(cfg))

    def rows(self, manifest: dict[str, Any]) -> int:
        """Training episodes played."""
        return manifest.get("train_episodes", 0)

    def after_record(self, root: str, store: ArtifactStore, cfg: GRPOConfig, manifest: dict[str, Any],
                     reused: bool) -> None:
        """Register the start and the evolved bank in the registry of ``root`` (idempotent)."""
        register_banks(root, store.run_id, cfg, manifest)

    def describe(self, manifest: dict[str, Any]) -> list[str]:
        """One line per logged GRPO step and validation (:func:`step_log_lines`)."""
        return step_log_lines(manifest["log"])


GRPO = GRPOStep()


def grpo_for_run(root: str, run_id: str, cfg: GRPOConfig | None = None, force: bool = False,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run GRPO on run ``run_id`` unless its fingerprint is unchanged: :func:`pipeline.engine.steps.run_step`
    of :data:`GRPO`. Returns the GRPO manifest plus ``skipped`` and the XCom fields ``uri`` (the
    output folder), ``rows`` (training episodes played) and ``fingerprint``. Raises
    ``ArtifactError`` without an export or build_pairs artifact and ``FileNotFoundError`` without
    an SFT checkpoint (run ``skillpipe sft fit`` first)."""
    return run_step(GRPO, root, run_id, cfg, force=force, log=log)


def grpo_output(output_dir: str, summary: dict[str, Any]) -> StepOutput:
    """What a GRPO run into ``output_dir`` produced (:func:`sft.rl.grpo.train`'s ``summary``): the
    summary with ``train_episodes``, those episodes as its counts, and as its content the log and
    the final checkpoint's ``checkpoint.json`` (which holds the policy's content hashes)."""
    m = dict(summary, train_episodes=train_episodes(summary["log"]))
    files = [summary["log"]] + ([os.path.join(summary["checkpoint"], CHECKPOINT_MANIFEST)]
                                if summary.get("checkpoint") else [])
    inside = [os.path.relpath(f, output_dir) for f in files if os.path.isfile(f)]
    return StepOutput(m, counts(m["train_episodes"], m["train_episodes"], where=STEP),
                      files=[f for f in inside if not f.startswith(os.pardir)])


def record_standalone(output_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Record a GRPO run outside a pipeline run (``skillpipe rl grpo --output-dir``) in
    ``output_dir``: :func:`grpo_output` written by :func:`pipeline.core.recorder.record`, without a
    fingerprint (nothing reuses it). Returns the manifest."""
    out = grpo_output(output_dir, summary)
    return recorder.record(output_dir, {**out.manifest, "counts": out.counts}, out.files, name=MANIFEST_NAME)


def train_episodes(log_path: str) -> int:
    """Training episodes logged in ``grpo_log.jsonl`` (every group's rewards, all steps)."""
    with open(log_path, encoding="utf-8") as f:
        entries = [json.loads(raw) for raw in f if raw.strip()]
    return sum(len(g.get("rewards", [])) for e in entries if e.get("kind") == "train" for g in e.get("groups", []))


def register_banks(root: str, run_id: str, cfg: GRPOConfig, summary: dict[str, Any]) -> None:
    """Record the bank GRPO started from, and the evolved one it ended with, as versions of
    ``<root>/banks`` (``skillpipe bank list``), parent links following the lineage."""
    from pipeline.bank.store import BankStore

    from pipeline.bank.evolving import SkillBank
    store = BankStore(root)
    start = SkillBank.load(cfg.skill_bank, cfg.env, cfg.skill_bank_env)
    imported = next((h for h in start.history if h.get("event") == "import"), {})
    parent = imported.get("run_bank_version") or None
    if parent and not store.has(parent):
        parent = None
    store.register(start.rows, run_id=run_id, stage="grpo_start", parent=parent)
    if summary.get("bank_file") and summary["bank_version"] != start.version:
        final = SkillBank.load(summary["bank_file"], cfg.env)
        store.register(final.rows, run_id=run_id, stage=STEP, parent=start.version)


def step_log_lines(path: str) -> list[str]:
    """One readable line per logged GRPO step / validation: per-group rewards and advantages, KL."""
    lines = []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            e = json.loads(raw)
            if e.get("kind") == "train":
                groups = "; ".join(f"{g.get('group_id', '?')}: rewards {[round(r, 3) for r in g.get('rewards', [])]} adv "
                                   f"{[round(a, 3) for a in g.get('advantages', [])]}"
                                   + (" (no signal)" if g.get("no_signal") else "") for g in e.get("groups", []))
                lines.append(f"step {e['step']}: loss {e.get('loss', float('nan')):.4f} kl {e.get('kl', float('nan')):.5f} "
                             f"bank {e.get('bank_version')} | {groups}")
            elif e.get("kind") == "validation":
                evo = e.get("evolution") or {}
                errors = [c.get("error") for c in evo.get("calls", []) if not c.get("ok")]
                lines.append(f"validation at step {e['step']}: success {e.get('success_rate')}; low categories "
                             f"{evo.get('low_categories', [])}, {len(evo.get('added', []))} skills added"
                             + (f", updater errors {errors}" if errors else "")
                             + f"; bank {evo.get('parent_version', e.get('bank_version'))} -> {evo.get('version', '')}")
    return lines

"""The ``grpo`` step of a pipeline run: online GRPO from the run's SFT checkpoint and skill bank.

Shared by the Airflow task ``grpo``, ``skillpipe rl grpo --run-id`` and ``make run``. Output goes to
``<root>/runs/<run_id>/grpo/``. Skipped, like a data stage, when its fingerprint
(:mod:`pipeline.core.manifest`: the export's content, which holds the bank, the SFT step's
fingerprint and result, the config, the code version) is the one recorded in
``grpo_manifest.json``.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

from pipeline.core import manifest as step_manifest
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.layout import GRPO_MANIFEST, GRPO_STEP, SFT_STEP

from sft import manifest as sft_manifest
from sft.rl.config import GRPOConfig, run_prompt_config, smoke, to_dict

STEP = GRPO_STEP
MANIFEST_NAME = GRPO_MANIFEST
#: Fields that name places or how to resume, not what is trained: outside the fingerprint (the
#: SFT checkpoint and the bank are covered by the input facts instead of their paths).
NOT_FINGERPRINTED = ("output_dir", "model", "model_cache_dir", "skill_bank", "resume")


def _bank_env(bank_path: str) -> str:
    with open(bank_path, encoding="utf-8") as f:
        return (json.load(f).get("metadata") or {}).get("env", "")


def run_config(store: ArtifactStore, cfg: GRPOConfig | None = None) -> GRPOConfig:
    """``cfg`` (default :func:`sft.rl.config.smoke`) pointed at run ``store``: its SFT checkpoint
    as the starting policy, its exported bank, ``runs/<run_id>/grpo`` as output and the run's
    own prompt section (the SFT pairs were rendered with it, so RL prompts match them byte for
    byte). Raises ``ArtifactError`` without an export or build_pairs artifact."""
    bank = os.path.join(store.require("export").path, "skill_bank.json")
    return dataclasses.replace(cfg or smoke(), output_dir=os.path.join(store.run_dir, STEP),
                               model=os.path.join(store.run_dir, SFT_STEP), skill_bank=bank,
                               skill_bank_env=_bank_env(bank), prompt=run_prompt_config(store))


def fingerprint(store: ArtifactStore, cfg: GRPOConfig, sft: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(fingerprint, facts)`` of the step: the export's content, the SFT step (``sft``: its
    manifest) and ``cfg`` without paths. Raises ``ArtifactError`` for a missing or stale export."""
    inputs = step_manifest.upstream_facts(store, ["export"])
    inputs.append({"stage": SFT_STEP, **{k: sft.get(k) for k in ("fingerprint", "global_step", "final_loss")}})
    config = {k: v for k, v in to_dict(cfg).items() if k not in NOT_FINGERPRINTED}
    return step_manifest.step_fingerprint(STEP, inputs, config)


def grpo_for_run(root: str, run_id: str, cfg: GRPOConfig | None = None, force: bool = False,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run GRPO on run ``run_id`` (:func:`run_config`) unless its fingerprint is unchanged.

    Returns the GRPO manifest plus ``skipped`` and the XCom fields ``uri`` (the output folder),
    ``rows`` (training episodes played) and ``fingerprint``. Raises ``ArtifactError`` without an
    export or build_pairs artifact and ``FileNotFoundError`` without an SFT checkpoint (run
    ``skillpipe sft fit`` first).
    """
    from sft.rl.grpo import train

    store = ArtifactStore(root, run_id)
    cfg = run_config(store, cfg)
    sft = sft_manifest.read_manifest(cfg.model)
    if sft is None:
        raise FileNotFoundError(f"no SFT checkpoint in {cfg.model}: run `skillpipe sft fit --run-id {run_id}` first")
    fp, facts = fingerprint(store, cfg, sft)
    path = os.path.join(cfg.output_dir, MANIFEST_NAME)
    prev = None if force else step_manifest.reusable(path, fp)
    if prev is not None:
        log(f"[{STEP}] unchanged (fingerprint {fp[:12]}, bank {prev['bank_version']}): skipped")
        return _result(prev, cfg.output_dir, skipped=True)
    m = train(cfg)
    register_banks(root, run_id, cfg, m)
    m = step_manifest.record(path, dict(m, train_episodes=train_episodes(m["log"])), fp, facts)
    for line in step_log_lines(m["log"]):
        log(f"[{STEP}] {line}")
    return _result(m, cfg.output_dir, skipped=False)


def _result(m: dict[str, Any], out: str, skipped: bool) -> dict[str, Any]:
    return {**m, **step_manifest.xcom(out, m.get("train_episodes", 0), m["fingerprint"]), "skipped": skipped}


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

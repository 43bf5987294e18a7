"""The ``grpo`` step of a pipeline run: online GRPO from the run's SFT checkpoint and skill bank.

Shared by the Airflow task ``grpo``, ``skillpipe rl grpo --run-id`` and ``make run``. Output goes to
``<root>/runs/<run_id>/grpo/``. Skipped when the SFT checkpoint, the bank and the config are
unchanged since the last complete run (``grpo_inputs.json`` next to ``grpo_manifest.json``).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.fsutil import sha256_file
from pipeline.core.lineage import content_hash

from sft import manifest as sft_manifest
from sft.rl.config import GRPOConfig, run_prompt_config, smoke, to_dict

STEP = "grpo"
INPUTS_FILE = "grpo_inputs.json"


def _bank_env(bank_path: str) -> str:
    with open(bank_path, encoding="utf-8") as f:
        return (json.load(f).get("metadata") or {}).get("env", "")


def grpo_for_run(root: str, run_id: str, cfg: GRPOConfig | None = None, force: bool = False,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run GRPO starting from ``runs/<run_id>/sft_fit`` with ``export/skill_bank.json``.

    ``cfg`` defaults to the small CPU budget (:func:`sft.rl.config.smoke`); its ``prompt`` is
    replaced by the run's (:func:`sft.rl.config.run_prompt_config`). Returns the GRPO
    manifest plus ``skipped`` and ``uri``. Raises ``ArtifactError`` without an export artifact and
    ``FileNotFoundError`` without an SFT checkpoint (run ``skillpipe sft fit`` first).
    """
    from sft.rl.grpo import train

    store = ArtifactStore(root, run_id)
    export = store.require("export")
    sft_dir = os.path.join(store.run_dir, "sft_fit")
    sft = sft_manifest.read_manifest(sft_dir)
    if sft is None:
        raise FileNotFoundError(f"no SFT checkpoint in {sft_dir}: run `skillpipe sft fit --run-id {run_id}` first")
    bank = os.path.join(export.path, "skill_bank.json")
    out = os.path.join(store.run_dir, STEP)
    # the run's own prompt section: the SFT pairs were rendered with it, so RL prompts match them byte for byte
    cfg = dataclasses.replace(cfg or smoke(), output_dir=out, model=sft_dir, skill_bank=bank,
                              skill_bank_env=_bank_env(bank), prompt=run_prompt_config(store))
    inputs = {"sft": {k: sft.get(k) for k in ("global_step", "final_loss", "export")},
              "bank_sha256": sha256_file(bank), "config": to_dict(cfg)}
    key = content_hash(inputs, n=32)
    inputs_path, manifest_path = os.path.join(out, INPUTS_FILE), os.path.join(out, "grpo_manifest.json")
    if not force and os.path.exists(inputs_path) and os.path.exists(manifest_path):
        with open(inputs_path, encoding="utf-8") as f:
            same = json.load(f).get("key") == key
        if same:
            with open(manifest_path, encoding="utf-8") as f:
                m = json.load(f)
            log(f"[{STEP}] unchanged (SFT step {sft['global_step']}, bank {m['bank_version']}): skipped")
            return dict(m, skipped=True, uri=out)
    m = train(cfg)
    register_banks(root, run_id, cfg, m)
    with open(inputs_path, "w", encoding="utf-8") as f:
        json.dump({"key": key, **inputs}, f, indent=2, default=str)
    for line in step_log_lines(m["log"]):
        log(f"[{STEP}] {line}")
    return dict(m, skipped=False, uri=out)


def register_banks(root: str, run_id: str, cfg: GRPOConfig, summary: dict[str, Any]) -> None:
    """Record the bank GRPO started from, and the evolved one it ended with, as versions of
    ``<root>/banks`` (``skillpipe bank list``), parent links following the lineage."""
    from pipeline.bank.store import BankStore

    from sft.rl.evolution import SkillBank
    store = BankStore(root)
    start = SkillBank.load(cfg.skill_bank, cfg.env, cfg.skill_bank_env)
    imported = next((h for h in start.history if h.get("event") == "import"), {})
    parent = imported.get("run_bank_version") or None
    if parent and not store.has(parent):
        parent = None
    store.register(start.rows, run_id=run_id, stage="grpo_start", parent=parent)
    if summary.get("bank_file") and summary["bank_version"] != start.version:
        final = SkillBank.load(summary["bank_file"], cfg.env)
        store.register(final.rows, run_id=run_id, stage="grpo", parent=start.version)


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

"""Train an action-only SFT scorer for the usefulness score (one of the scorers it is validated with).

    .venv/bin/python bench/usefulness_scorer.py --runs ROOT/runs/eto ROOT/runs/webshop ROOT/runs/tw \
        --out runs/usefulness-scorer --steps 250

The student's base model (SmolLM2-135M-Instruct) gets a LoRA adapter trained with the project's
SFT fit (TRL ``SFTTrainer``) on the expert actions of verified successful trajectories, with an
empty think and the scorer's own prompt form (the step prompt without a skills block): the
"action-only SFT checkpoint" that the usefulness score's scorer may be. Use trajectories that are
in neither the labelled set nor the held-out probe set, or the validation measures memory. The
adapter folder works as ``usefulness.scorer`` (:class:`pipeline.usefulness.scorer.ActionScorer`
merges it into the base model on load).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def action_pairs(runs: list[str]) -> list[dict]:
    """SFT pair rows (``records.SFT_PAIR_SCHEMA``) of every expert step of the runs' verified
    successes: the scorer's prompt and ``<think></think>`` + the action; all in split ``train``."""
    import pyarrow.parquet as pq
    from pipeline.core import lineage
    from pipeline.core.config_base import PromptConfig
    from pipeline.core.records import Trajectory
    from pipeline.prompts import render_step_messages, render_target
    pcfg = dataclasses.replace(PromptConfig(), skills=False)
    rows = []
    for run in runs:
        for r in pq.read_table(os.path.join(run, "verify")).to_pylist():
            t = Trajectory.from_row(r)
            if not t.success:
                continue
            for k in range(1, len(t.steps)):
                action = t.steps[k].action or ""
                if not action or action.lower().startswith("think"):
                    continue
                msgs = render_step_messages(t, k, "", pcfg)
                target = render_target("", action, t.env)
                instruction = msgs[0]["content"] + "\n\n" + msgs[1]["content"]
                rows.append({"pair_id": lineage.pair_id(t.trajectory_id, k, instruction, target),
                             "trajectory_id": t.trajectory_id, "step_id": lineage.step_id(t.trajectory_id, k),
                             "step_index": k, "env": t.env, "env_instance": t.env_instance, "category": t.category,
                             "messages": msgs + [{"role": "assistant", "content": target}], "instruction": instruction,
                             "output": target, "action": action, "think": "", "synthetic": False, "memory_ids": [],
                             "skill_ids_used": [], "bank_version": "", "source_uri": t.source_uri,
                             "source_line": t.steps[k].line, "model": "none", "prompt_sha": "", "flags": [],
                             "split": "train"})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", required=True, help="run folders with a verify artifact")
    p.add_argument("--out", required=True, help="output folder (the adapter ends up there)")
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--lr", type=float, default=5e-4)
    a = p.parse_args(argv)
    import pyarrow.parquet as pq
    from pipeline.core.records import SFT_PAIR_SCHEMA, to_table
    from pipeline.core.train_config import SFTFitConfig
    from sft.train import fit
    rows = action_pairs(a.runs)
    os.makedirs(a.out, exist_ok=True)
    pairs = os.path.join(a.out, "pairs.parquet")
    pq.write_table(to_table(rows, SFT_PAIR_SCHEMA), pairs)
    print(f"{len(rows)} action-only pairs", flush=True)
    cfg = SFTFitConfig(max_steps=a.steps, per_device_train_batch_size=a.batch, learning_rate=a.lr,
                       lr_scheduler_type="cosine", warmup_steps=10, max_length=2048, lora_r=8, lora_alpha=16,
                       logging_steps=10)
    result = fit(pairs, os.path.join(a.out, "sft"), cfg)
    print({k: result[k] for k in ("global_step", "final_loss") if k in result})
    return 0


if __name__ == "__main__":
    sys.exit(main())

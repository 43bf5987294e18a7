"""SFT fit: TRL ``SFTTrainer`` on the exported SFT pairs, under Accelerate / DeepSpeed.

Rows are prompt-completion: prompt = the pair's ``messages`` without the last assistant turn,
completion = that turn. TRL renders both with the tokenizer's chat template and supervises only
the completion and its end-of-turn token (``completion_only_loss``); the pre-flight invariants
(:mod:`sft.invariants`) verify exactly that on the collated batches before step 1.

Copy-paste::

    python -m sft.train --pairs runs/sample/export --output_dir runs/sample/sft --max_steps 4
    python -m sft.train --config my_run.yaml --lora_r 16          # YAML, command line wins
    accelerate launch --config_file sft/configs/zero2.yaml -m sft.train --pairs ... --lora False

From Python (the DAG task ``sft_fit`` and ``make run``): ``fit(pairs_path, output_dir, cfg)``.
Measured here (2 CPU cores shared with other jobs, SmolLM2-135M fp32, LoRA r=8): batch 2 of
~155-token rows 14-24 s/step; the default budget (3 steps, batch 1, ~1000-token rows) 41.5 s of
training, 50 s for the whole ``fit`` with the converted model cached (+~20 s to convert it once).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from collections import Counter
from typing import Any, Sequence

from pipeline.core import recorder
from pipeline.core.artifacts import MANIFEST, read_parquet_dir
from pipeline.core.fsutil import sha256_file
from pipeline.core.layout import SFT_STEP
from pipeline.core.records import QUARANTINE_SCHEMA, QuarantineRow, to_table

from sft import invariants, manifest as mf
from sft.base_model import content_hashes, ensure_base_model
from sft.config import SFTFitConfig, to_dict

log = logging.getLogger("skillpipe.sft")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


# ------------------------------------------------------------------------------------ data

def load_pairs(path: str, split: str = "train", max_rows: int = 0) -> tuple[list[dict], dict, list[QuarantineRow]]:
    """Prompt-completion rows of one split of an export artifact.

    Args:
        path: export stage folder (Parquet parts + ``_manifest.json``, whose ``fingerprint`` is
            used) or one Parquet file (fingerprint = ``sha256:<file hash>`` unless a
            ``_manifest.json`` lies next to it).
        split: keep rows whose ``split`` equals this; ``max_rows``: cap (0 = none).

    Returns ``(rows, export_info, quarantine)``: rows are ``{"pair_id", "prompt", "completion"}``
    with message lists; export_info is ``{"uri", "fingerprint", "bank_versions", "rows"}``; a row
    whose messages do not end in a non-empty assistant turn is quarantined (reason
    ``no_assistant_turn``), never silently dropped. Raises ``FileNotFoundError`` for a missing
    path and ``ValueError`` when no usable row of ``split`` remains.
    """
    import pyarrow.parquet as pq

    if not os.path.exists(path):
        raise FileNotFoundError(f"SFT pairs not found: {path} (run the export stage first)")
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    table = read_parquet_dir(path) if os.path.isdir(path) else pq.read_table(path)
    man_path = os.path.join(folder, MANIFEST)
    if os.path.isfile(man_path):
        with open(man_path, encoding="utf-8") as f:
            fingerprint = json.load(f)["fingerprint"]
    else:
        fingerprint = "sha256:" + sha256_file(path)
    rows, quarantine, banks, counts = [], [], set(), {"total": table.num_rows, "other_split": 0}
    for r in table.to_pylist():
        if r.get("split", "train") != split:
            counts["other_split"] += 1
            continue
        msgs = [{"role": m["role"], "content": m["content"]} for m in r["messages"] or []]
        if len(msgs) < 2 or msgs[-1]["role"] != "assistant" or not msgs[-1]["content"]:
            quarantine.append(QuarantineRow(SFT_STEP, "no_assistant_turn", "messages must end with a "
                                            "non-empty assistant turn after a prompt", r.get("pair_id", ""),
                                            r.get("source_uri") or "", r.get("source_line"), json.dumps(msgs)))
            continue
        if r.get("bank_version"):  # a pair made with an empty bank names none: not listed as ""
            banks.add(r["bank_version"])
        rows.append({"pair_id": r["pair_id"], "prompt": msgs[:-1], "completion": msgs[-1:]})
    rows = rows[:max_rows] if max_rows > 0 else rows
    if not rows:
        raise ValueError(f"no usable SFT pairs with split={split!r} in {path} ({len(quarantine)} quarantined)")
    counts.update(used=len(rows), quarantined=len(quarantine))
    info = {"uri": os.path.abspath(path), "fingerprint": fingerprint, "bank_versions": sorted(banks),
            "rows": counts}
    return rows, info, quarantine


def drop_too_long(rows: list[dict], tokenizer: Any, max_length: int) -> tuple[list[dict], list[QuarantineRow]]:
    """Split ``rows`` into those whose whole chat fits ``max_length`` tokens and a quarantine row
    (reason ``too_long``, the token count in the detail, the messages as raw) for each that does
    not: TRL would cut such a row, losing its end-of-turn token, and the
    pre-flight would then abort the whole fit for one row. The length is what TRL's
    prompt-completion tokenization gives: ``apply_chat_template(prompt + completion)``."""
    kept, quarantine = [], []
    for r in rows:
        msgs = r["prompt"] + r["completion"]
        n = len(tokenizer.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"])
        if n <= max_length:
            kept.append(r)
        else:
            quarantine.append(QuarantineRow(SFT_STEP, "too_long", f"{n} tokens > max_length={max_length}",
                                            r["pair_id"], raw=json.dumps(msgs, ensure_ascii=False)))
    return kept, quarantine


# --------------------------------------------------------------------------------- trainer

def _sft_args(cfg: SFTFitConfig):
    import torch
    from trl import SFTConfig

    bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and torch.cuda.is_available()
                                       and torch.cuda.is_bf16_supported())
    return SFTConfig(
        output_dir=cfg.output_dir, max_steps=cfg.max_steps, seed=cfg.seed,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate, lr_scheduler_type=cfg.lr_scheduler_type,
        warmup_steps=cfg.warmup_steps, weight_decay=cfg.weight_decay,
        max_length=cfg.max_length, completion_only_loss=True, packing=False,
        bf16=bf16, gradient_checkpointing=cfg.gradient_checkpointing,  # TRL field (default True)
        # bf16 without a GPU is CPU autocast, which transformers only allows when told it is on CPU
        use_cpu=bf16 and not torch.cuda.is_available(),
        logging_steps=cfg.logging_steps, save_strategy="steps", save_steps=cfg.save_steps or cfg.max_steps,
        save_total_limit=cfg.save_total_limit or None, report_to="none", dataloader_num_workers=0,
        disable_tqdm=True)


def make_trainer(cfg: SFTFitConfig, rows: list[dict], model_dir: str, weights_from: str | None = None,
                 callbacks: Sequence[Any] = ()):
    """An ``SFTTrainer`` on ``rows`` (prompt/completion message lists) from the model at
    ``model_dir``; ``weights_from`` = a checkpoint whose weights (LoRA adapter or full model) are
    loaded with a fresh optimizer (``resume_mode=weights_only``)."""
    from datasets import Dataset
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(weights_from if weights_from and not cfg.lora else model_dir)
    peft_config = None
    if cfg.lora and weights_from:
        model = PeftModel.from_pretrained(model, weights_from, is_trainable=True)
    elif cfg.lora:
        targets = cfg.lora_target_modules
        peft_config = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                 task_type="CAUSAL_LM", target_modules=targets if targets == "all-linear"
                                 else [t.strip() for t in targets.split(",")])
    dataset = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])
    return SFTTrainer(model=model, args=_sft_args(cfg), train_dataset=dataset, processing_class=tokenizer,
                      peft_config=peft_config, callbacks=list(callbacks))


def preflight(trainer, rows: list[dict], batch_size: int) -> dict[str, int]:
    """Run :mod:`sft.invariants` on the batches the trainer's own collator builds from its own
    tokenized dataset, and on the chat template of every row. Raises ``PreflightError``."""
    tok = trainer.processing_class
    ds = trainer.train_dataset
    max_len = trainer.args.max_length or 10**9
    # TRL drops rows left without supervised tokens by truncation; name them before it matters
    failures = [(r["pair_id"], invariants.has_supervised([]) + f" after truncation to {max_len} tokens")
                for r in rows if invariants.prompt_length(tok, r["prompt"]) >= max_len]
    if failures or len(ds) != len(rows):
        raise invariants.PreflightError(failures or [("*", f"tokenized dataset has {len(ds)} rows, expected {len(rows)}")])
    supervised = 0
    for start in range(0, len(rows), batch_size):
        chunk = range(start, min(start + batch_size, len(rows)))
        batch = trainer.data_collator([ds[i] for i in chunk])
        lens = [invariants.prompt_length(tok, rows[i]["prompt"]) for i in chunk]
        failures += invariants.check_batch(batch, lens, tok.eos_token_id, [rows[i]["pair_id"] for i in chunk])
        supervised += int((batch["labels"] != invariants.IGNORE).sum())
    for r in rows:
        failures += [(r["pair_id"], why) for why in invariants.check_template(tok, r["prompt"] + r["completion"])]
    if failures:
        raise invariants.PreflightError(failures)
    return {"rows_checked": len(rows), "supervised_tokens": supervised}


# ------------------------------------------------------------------------------------- run

def _last(history: list[dict], key: str):
    return next((h[key] for h in reversed(history) if key in h), None)


def _resume(cfg: SFTFitConfig, export_fingerprint: str, world: int, zero: int) -> tuple[str | None, str | None]:
    """``(checkpoint to resume or None, mode)`` (:func:`sft.manifest.check_resume`); warns when
    only the weights can be reused. Raises ``ResumeError``."""
    ckpt = mf.find_checkpoint(cfg.output_dir, cfg.resume)
    mode = mf.check_resume(mf.read_manifest(ckpt), world_size=world, zero_stage=zero,
                           export_fingerprint=export_fingerprint, mode=cfg.resume_mode) if ckpt else None
    if mode == "weights_only":
        log.warning("world size/ZeRO stage changed: restarting from the weights of %s with a FRESH "
                    "optimizer and schedule (resume_mode=weights_only)", ckpt)
    return ckpt, mode


def _write_quarantine(output_dir: str, quarantine: list[QuarantineRow]) -> None:
    """The refused rows as ``output_dir/quarantine.parquet`` (``records.QUARANTINE_SCHEMA``)."""
    import pyarrow.parquet as pq
    os.makedirs(output_dir, exist_ok=True)
    pq.write_table(to_table([q.__dict__ for q in quarantine], QUARANTINE_SCHEMA),
                   os.path.join(output_dir, mf.QUARANTINE_FILE))


def run(cfg: SFTFitConfig) -> dict[str, Any]:
    """Load pairs, check resume compatibility, build the trainer, pre-flight, train, save.

    Returns the final manifest, for the caller to record (:func:`main`, or the ``sft_fit`` step:
    :func:`pipeline.core.recorder.record`); a callback writes each ``checkpoint-<step>/``'s own.
    Rows longer than ``max_length`` tokens are quarantined
    (:func:`drop_too_long`) with the rows :func:`load_pairs` refused, in
    ``output_dir/quarantine.parquet``. Raises ``ResumeError`` before loading the model when the checkpoint
    does not fit the launch topology, ``PreflightError`` before step 1 when a label invariant fails,
    ``ValueError`` when no row is left.
    """
    import torch
    from transformers import TrainerCallback

    cfg.validate()
    rows, export, quarantine = load_pairs(cfg.pairs, cfg.split, cfg.max_rows)
    world, zero = mf.runtime_topology()
    ckpt, mode = _resume(cfg, export["fingerprint"], world, zero)
    model_dir = str(ensure_base_model(cfg.base_model, cfg.model_cache_dir))
    base = {"path": model_dir, **content_hashes(model_dir)}
    if cfg.max_length:
        from transformers import AutoTokenizer
        rows, too_long = drop_too_long(rows, AutoTokenizer.from_pretrained(model_dir), cfg.max_length)
        if not rows:
            raise ValueError(f"no SFT pair of {cfg.pairs} fits max_length={cfg.max_length} tokens "
                             f"({len(too_long)} too long)")
        quarantine += too_long
        export["rows"].update(used=len(rows), quarantined=len(quarantine))
    extra: dict[str, Any] = {"resumed": {"from": ckpt, "mode": mode}, "quarantined_rows": len(quarantine),
                             "quarantine_reasons": dict(sorted(Counter(q.reason for q in quarantine).items()))}

    def manifest_at(state) -> dict[str, Any]:
        hist = state.log_history
        return mf.build_manifest(export=export, base_model=base, config=to_dict(cfg), world_size=world,
                                 zero_stage=zero, global_step=state.global_step,
                                 final_loss=_last(hist, "loss") or _last(hist, "train_loss"), extra=extra)

    class ManifestCallback(TrainerCallback):
        def on_save(self, args, state, control, **kw):  # after the checkpoint folder is complete
            if state.is_world_process_zero:
                mf.write_checkpoint_manifest(os.path.join(args.output_dir, f"checkpoint-{state.global_step}"),
                                             manifest_at(state))

    trainer = make_trainer(cfg, rows, model_dir, ckpt if mode == "weights_only" else None, [ManifestCallback()])
    if cfg.preflight:
        extra["preflight"] = preflight(trainer, rows, cfg.per_device_train_batch_size)
    if quarantine and trainer.is_world_process_zero():
        _write_quarantine(cfg.output_dir, quarantine)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    result = trainer.train(resume_from_checkpoint=ckpt if mode == "continue" else None)
    trainer.save_model(cfg.output_dir)
    extra["throughput"] = {"train_runtime_s": result.metrics.get("train_runtime"),
                           "num_tokens": _last(trainer.state.log_history, "num_tokens"),
                           "peak_gpu_mem_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None}
    extra["losses"] = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return manifest_at(trainer.state)


def fit(pairs_path: str, output_dir: str, cfg: SFTFitConfig | None = None) -> dict[str, Any]:
    """Entry point of the DAG task ``sft_fit`` and ``make run``: train on ``pairs_path`` (export
    folder or Parquet) into ``output_dir`` with ``cfg`` (default: the small LoRA CPU budget)."""
    cfg = dataclasses.replace(cfg or SFTFitConfig(), pairs=pairs_path, output_dir=output_dir)
    return run(cfg)


def parse_args(argv: Sequence[str] | None = None) -> SFTFitConfig:
    """``SFTFitConfig`` from ``--config file.yaml`` and ``--<field> value`` flags (TRL's parser)."""
    from trl import TrlParser
    (cfg,) = TrlParser((SFTFitConfig,)).parse_args_and_config(list(argv) if argv is not None else None)
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sft.train [flags]``: run and print a one-line JSON summary; returns 0."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_args(argv)
    try:
        cfg.validate()
    except ValueError as e:  # a bad flag or YAML value: one line, like argparse's own errors
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = run(cfg)
    if int(os.environ.get("RANK", "0")) == 0:  # a fit outside a run: no fingerprint, nothing reuses it
        recorder.record(cfg.output_dir, {**out, "counts": mf.fit_counts(out)}, mf.model_files(cfg.output_dir),
                        name=mf.MANIFEST_NAME)
        print(json.dumps({"output_dir": out["config"]["output_dir"], "global_step": out["global_step"],
                          "final_loss": out["final_loss"], "losses": out["losses"],
                          "export_fingerprint": out["export"]["fingerprint"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

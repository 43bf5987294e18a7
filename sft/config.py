"""Configuration of the SFT fit job: one dataclass, every field with a default and help text.

Follows TRL's config style (``trl/trainer/sft_config.py``): the same dataclass drives the
command line of ``python -m sft.train`` (``--lora_r 16``), YAML files (``--config run.yaml``,
parsed by ``trl.TrlParser``; the command line wins over YAML), the DAG task ``sft_fit`` and the
checkpoint manifest, where it is stored in full.

The defaults are the *small* budget used by ``make run``: a few LoRA steps of the embedded
SmolLM2-135M-Instruct on CPU (~2 s per LoRA step on these machines).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.config import ConfigError, build_flat, check_fields, config_field

import yaml


_f = config_field


@dataclass
class SFTFitConfig:
    """Everything that decides what the SFT job trains and how (see module docstring)."""

    # --- data and output
    pairs: str = _f("", "export artifact folder (with _manifest.json) or a Parquet file of SFT pairs")
    output_dir: str = _f("runs/sft", "folder for checkpoints (checkpoint-<step>/) and the final model")
    split: str = _f("train", "rows of this `split` value are trained on")
    max_rows: int = _f(0, "use only the first N training rows (0 = all); for smoke runs", min=0)
    # --- model
    base_model: str = _f("", "local Hugging Face model folder; '' = embedded SmolLM2-135M-Instruct")
    model_cache_dir: str = _f("", "cache folder of the converted embedded model ('' = ~/.cache/skillpipe)")
    # --- schedule
    max_steps: int = _f(3, "optimizer steps to run (> 0); the small default is the `make run` budget",
                         min=1)
    per_device_train_batch_size: int = _f(1, "rows per device per micro-batch", min=1)
    gradient_accumulation_steps: int = _f(1, "micro-batches per optimizer step", min=1)
    learning_rate: float = _f(2e-4, "peak learning rate (AdamW)", min=0)
    lr_scheduler_type: str = _f("constant", "transformers scheduler name (constant, linear, cosine, ...)")
    warmup_steps: int = _f(0, "linear warm-up steps", min=0)
    weight_decay: float = _f(0.0, "AdamW weight decay", min=0)
    max_length: int = _f(4096, "max tokens of prompt+completion (= build_pairs.max_tokens, so rows validate "
                                "kept are never cut); a longer row is quarantined (too_long, in "
                                "output_dir/quarantine.parquet), never cut", min=1)
    seed: int = _f(0, "seed for data order, LoRA init and dropout")
    # --- LoRA (PEFT)
    lora: bool = _f(True, "train a LoRA adapter instead of all weights")
    lora_r: int = _f(8, "LoRA rank (>= 1 with lora)", min=0)
    lora_alpha: int = _f(16, "LoRA scaling alpha", min=0)
    lora_dropout: float = _f(0.0, "LoRA dropout", min=0, max=1)
    lora_target_modules: str = _f("all-linear", "comma-separated module names, or 'all-linear'")
    # --- precision and memory
    precision: str = _f("auto", "auto (bf16 on a bf16-capable GPU, else fp32) | bf16 | fp32",
                        choices=("auto", "bf16", "fp32"))
    gradient_checkpointing: bool = _f(False, "recompute activations in the backward pass (less memory)")
    # --- logging and checkpoints
    logging_steps: int = _f(1, "log the training loss every N steps", min=1)
    save_steps: int = _f(0, "save a checkpoint every N steps (0 = only at the end)", min=0)
    save_total_limit: int = _f(0, "keep at most N checkpoints (0 = keep all)", min=0)
    # --- resume
    resume: str = _f("", "'' = fresh run; 'auto' = latest checkpoint in output_dir; or a checkpoint path")
    resume_mode: str = _f("strict", "strict = fail if world size / ZeRO stage changed; weights_only = "
                                    "restart from the checkpoint's weights with a fresh optimizer",
                          choices=("strict", "weights_only"))
    # --- checks
    preflight: bool = _f(True, "run the label-mask and chat-template invariants before training")

    def validate(self) -> None:
        """Raise :class:`pipeline.core.config.ConfigError` (a ``ValueError``) ``"field: message"`` for a
        value out of its declared range/choices (field metadata), or ``lora`` with ``lora_r < 1``."""
        check_fields(self)
        if self.lora and self.lora_r < 1:
            raise ConfigError(f"lora_r: must be >= 1 when lora is on, got {self.lora_r}")


def to_dict(cfg: SFTFitConfig) -> dict[str, Any]:
    """``cfg`` as a JSON-ready dict of its fields."""
    return dataclasses.asdict(cfg)


def from_dict(data: dict[str, Any], base: SFTFitConfig | None = None) -> SFTFitConfig:
    """``base`` (or the defaults) with the keys of ``data`` replaced, each coerced to its field's
    type (``pipeline.core.config.coerce``: ``"false"`` is False, ``1.7`` is no int) and range-checked.
    Raises :class:`pipeline.core.config.ConfigError` (a ``ValueError``) for a non-mapping, an unknown
    key, a wrong type or an out-of-range value."""
    cfg = build_flat(SFTFitConfig, data, base, what="SFT config")
    cfg.validate()
    return cfg


def load_yaml(path: str) -> SFTFitConfig:
    """Config from a YAML mapping of field names to values (missing fields keep their defaults).
    Raises ``OSError`` when the file cannot be read and :class:`ConfigError` for invalid YAML
    or content (see :func:`from_dict`)."""
    with open(path, encoding="utf-8") as f:
        try:
            data = yaml.safe_load(f) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of SFT config fields, got {type(data).__name__}")
    return from_dict(data)


def to_argv(cfg: SFTFitConfig) -> list[str]:
    """Command-line flags of ``python -m sft.train`` reproducing every non-default field of ``cfg``."""
    default = SFTFitConfig()
    argv: list[str] = []
    for f in dataclasses.fields(SFTFitConfig):
        value = getattr(cfg, f.name)
        if value != getattr(default, f.name):
            argv += [f"--{f.name}", str(value)]
    return argv

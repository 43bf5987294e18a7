"""Configuration of the SFT fit job: :class:`SFTFitConfig` (defined in
``pipeline.core.train_config``, the ``sft:`` section of the run config) and its loaders.

Follows TRL's config style (``trl/trainer/sft_config.py``): the same dataclass drives the
command line of ``python -m sft.train`` (``--lora_r 16``), YAML files (``--config run.yaml``,
parsed by ``trl.TrlParser``; the command line wins over YAML), the DAG task ``sft_fit`` and the
checkpoint manifest, where it is stored in full.

The defaults are the *small* budget used by ``make run``: a few LoRA steps of the embedded
SmolLM2-135M-Instruct on CPU (~2 s per LoRA step on these machines).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from pipeline.core.config import ConfigError, build_flat
from pipeline.core.train_config import SFTFitConfig

import yaml

__all__ = ["SFTFitConfig", "to_dict", "from_dict", "load_yaml", "read_yaml", "to_argv"]


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
    return from_dict(read_yaml(path))


def read_yaml(path: str) -> dict[str, Any]:
    """The mapping of SFT config fields in the YAML file ``path``, unchecked. Raises ``OSError``
    when the file cannot be read and :class:`ConfigError` for invalid YAML or a non-mapping."""
    with open(path, encoding="utf-8") as f:
        try:
            data = yaml.safe_load(f) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of SFT config fields, got {type(data).__name__}")
    return data


def to_argv(cfg: SFTFitConfig) -> list[str]:
    """Command-line flags of ``python -m sft.train`` reproducing every non-default field of ``cfg``."""
    default = SFTFitConfig()
    argv: list[str] = []
    for f in dataclasses.fields(SFTFitConfig):
        value = getattr(cfg, f.name)
        if value != getattr(default, f.name):
            argv += [f"--{f.name}", str(value)]
    return argv

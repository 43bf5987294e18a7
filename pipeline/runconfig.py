"""The run config as the entry points read it: the file, checked against the registries above
the ground floor, and the options of ``skillpipe run`` over it.

:mod:`pipeline.core.config` checks each value on its own (type, range, choices, per-env caps).
What only the packages above it know is checked here: the rule names of the verify checkers
(:func:`check_verify_rules`, so a registered checker's rules count), and for ``skillpipe run``
the env (``--env``), the reader format (``--format``), the embedded model alias
(``--llm-model``) and the input (``--input``). The CLI, the stage tasks of the Airflow DAG
(:func:`pipeline.engine.runner.run_task`) and the training steps (:func:`training_config`) read
a config file through :func:`load_run_config`, so each refuses the same files.
"""
from __future__ import annotations

import os
from typing import Any

from pipeline.core.config import ConfigError, PipelineConfig, QualityConfig, VerifyConfig, load_config
from pipeline.core.train_config import with_overrides
from pipeline.envs import REGISTRY
from pipeline.formats.discover import READERS, list_input_files
from pipeline.llm.weights import MODELS
from pipeline.quality.catalog import names as quality_rule_names
from pipeline.verify import rule_names


def check_verify_rules(vcfg: VerifyConfig) -> None:
    """Raise :class:`ConfigError` for a name in ``verify.disabled_rules``/``flag_rules`` that no
    checker (:func:`pipeline.verify.rule_names`) has, as ``rule`` or ``checker.rule``."""
    known = rule_names()
    names = {r for rules in known.values() for r in rules} | {f"{c}.{r}" for c, rules in known.items() for r in rules}
    for key in ("disabled_rules", "flag_rules"):
        unknown = sorted(set(map(str, getattr(vcfg, key))) - names)
        if unknown:
            raise ConfigError(f"verify.{key}: unknown rules {unknown}; known: {', '.join(sorted(names))}")


def check_quality_rules(qcfg: QualityConfig) -> None:
    """Raise :class:`ConfigError` for a name in ``quality.flag_rules`` that is no content rule
    (:func:`pipeline.quality.catalog.names`)."""
    known = quality_rule_names()
    unknown = sorted(set(map(str, qcfg.flag_rules)) - set(known))
    if unknown:
        raise ConfigError(f"quality.flag_rules: unknown rules {unknown}; known: {', '.join(known)}")


def load_run_config(path: str | None) -> PipelineConfig:
    """The run config file at ``path`` (``None`` = the defaults):
    :func:`pipeline.core.config.load_config`, then :func:`check_verify_rules` and
    :func:`check_quality_rules`. Raises ``OSError``/``yaml.YAMLError`` for an unreadable file and
    :class:`ConfigError` for a bad value."""
    cfg = load_config(path)
    check_verify_rules(cfg.verify)
    check_quality_rules(cfg.quality)
    return cfg


def training_config(path: str | None, section: str, overrides: dict[str, Any] | None = None) -> Any:
    """Training section ``section`` (``sft``, ``grpo`` or ``eval``) of the run config file at
    ``path`` (``None`` = the defaults, :func:`~pipeline.core.train_config.run_defaults`) with
    ``overrides`` applied (:func:`~pipeline.core.train_config.with_overrides`). What ``skillpipe
    sft fit --config``, ``skillpipe rl grpo --config``, ``skillpipe eval --config`` and the DAG
    tasks ``sft_fit``, ``grpo``, ``eval_*`` train and evaluate with. Raises
    ``OSError``/``yaml.YAMLError`` for an unreadable file and :class:`ConfigError` for a bad value
    anywhere in it (:func:`load_run_config`)."""
    return with_overrides(section, getattr(load_run_config(path), section), overrides or {})


class OptionError(ValueError):
    """A ``skillpipe run`` option that cannot be used; ``option`` is its command-line name
    (e.g. ``--input``), for the usage error."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


def run_config(path: str | None, env: str = "auto", fmt: str | None = None, llm_base_url: str | None = None,
               llm_model: str | None = None, llm_api_key_env: str | None = None,
               llm_mode: str | None = None) -> PipelineConfig:
    """The effective config of a run: the YAML file at ``path`` (defaults when ``None``) with the
    command-line overrides applied (``fmt`` -> ``parse.format``, the ``llm_*`` values -> ``llm``,
    ``llm_mode`` -> ``llm.mode``;
    ``None`` keeps the file's value). ``env`` (``auto`` or a registered env) is only checked.

    Raises :class:`OptionError` naming the option: an unreadable or invalid file (``--config``),
    an unknown env (``--env``) or format (``--format``), a model that is no embedded model's
    alias when no endpoint is given (``--llm-model``)."""
    import yaml
    try:
        cfg = load_run_config(path)
    except (ValueError, TypeError, OSError, yaml.YAMLError) as e:
        raise OptionError("--config", f"config {path}: {e}".replace("\n", " ")) from e
    if env != "auto" and env not in REGISTRY:
        raise OptionError("--env", f"unknown env {env!r}; choose from auto, {', '.join(sorted(REGISTRY))}")
    if fmt is not None:
        if fmt != "auto" and fmt not in READERS:
            raise OptionError("--format", f"unknown format {fmt!r}; choose from auto, {', '.join(READERS)}")
        cfg.parse.format = fmt
    for key, value in (("base_url", llm_base_url), ("model", llm_model), ("api_key_env", llm_api_key_env)):
        if value is not None:
            setattr(cfg.llm, key, value)
    if not cfg.llm.base_url and cfg.llm.model:
        if cfg.llm.model not in MODELS:
            raise OptionError("--llm-model", f"{cfg.llm.model!r} is not an embedded model ({', '.join(MODELS)}); "
                                             "to use another model give its endpoint with --llm-base-url")
    if llm_mode is not None:
        if llm_mode not in ("online", "batch"):
            raise OptionError("--llm-mode", f"unknown LLM mode {llm_mode!r}; choose from online, batch")
        cfg.llm.mode = llm_mode
    if cfg.llm.mode == "batch" and not cfg.llm.base_url:
        raise OptionError("--llm-mode", "batch mode needs an endpoint with the Batch API (--llm-base-url or "
                                        "llm.base_url); the embedded server answers online only")
    return cfg


def check_run_input(input_path: str, reads_input: bool) -> None:
    """Check a run's input path (``""`` = none); ``reads_input``: the parse stage runs.

    Raises :class:`OptionError` (``--input``) when parse runs without an input, when the path
    does not exist, or when parse would find no input file under it."""
    if reads_input and not input_path:
        raise OptionError("--input", "required for a new run (no previous parse artifact)")
    if input_path and not os.path.exists(input_path):
        raise OptionError("--input", f"input path does not exist: {input_path}")
    if input_path and reads_input:
        if not list_input_files(input_path):
            raise OptionError("--input", f"no input files under {input_path} (README*/SOURCE* files and hidden "
                                         "files are skipped)")

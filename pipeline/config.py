"""Typed configuration of the pipeline: one dataclass per stage plus the LLM endpoint.

Every field has a default and a help text (``field(metadata={"help": ...})``), in the manner of
TRL's config dataclasses, so ``skillpipe run --help`` and the manifest document themselves. A
stage's config is part of its fingerprint: changing a value reruns that stage and everything
downstream. Load overrides from YAML with :func:`load_config`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def config_field(default: Any, help: str):
    """A dataclass field with a default and a ``help`` text (lists/dicts get a fresh copy each)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


_f = config_field


@dataclass
class LLMConfig:
    base_url: str = _f("", "OpenAI-compatible endpoint; empty = start the embedded llama.cpp server")
    model: str = _f("", "model name sent to the endpoint; empty = the embedded SmolLM2-135M-Instruct")
    api_key_env: str = _f("", "name of the environment variable holding the API key ('' = no key)")
    structured_output: str = _f("auto", "auto | json_schema (OpenAI, vLLM) | json_object (llama.cpp) | none")
    temperature: float = _f(0.0, "sampling temperature (0 = greedy, reproducible)")
    max_tokens: int = _f(768, "max completion tokens per call; a 'length' finish is a failure")
    timeout_s: float = _f(120.0, "per-request timeout in seconds")
    max_retries: int = _f(4, "transport retries (429/5xx/timeout/connection) with exponential backoff")
    max_repairs: int = _f(1, "extra calls that feed a schema-validation error back to the model")
    concurrency: int = _f(2, "max concurrent requests")
    seed: int = _f(0, "sampling seed sent to the endpoint")
    max_endpoint_failure_rate: float = _f(0.1, "a stage fails (nothing written, rerun retries) when more than "
                                               "this fraction of its items got no answer from the endpoint")
    ctx_size: int = _f(8192, "embedded server only: context window in tokens")


@dataclass
class ParseConfig:
    format: str = _f("auto", "reader to use; 'auto' detects each file's format")
    max_per_instance: int = _f(3, "max trajectories kept per environment instance and outcome (spec §3.2)")
    max_success_instances: int = _f(0, "cap on environment instances with a success (0 = no cap)")
    max_failure_instances: int = _f(0, "cap on environment instances with only failures (0 = no cap)")
    max_trajectories: int = _f(0, "global cap on kept trajectories, in deterministic order (0 = no cap)")
    success_threshold: float = _f(1.0, "graded rewards (WebShop score, QA) >= this count as success")
    per_env: dict = _f({}, "per-env overrides of the caps above, e.g. {webshop: {max_per_instance: 1}}")


@dataclass
class DedupeConfig:
    min_actions: int = _f(1, "trajectories with fewer recorded actions after loop removal are quarantined")


@dataclass
class MemoryConfig:
    max_trajectory_chars: int = _f(6000, "rendered trajectory budget per memory prompt (older steps elided)")


@dataclass
class AggregateConfig:
    n_general: int = _f(6, "general skills requested from the LLM")
    n_task_specific: int = _f(4, "task-specific skills requested per category")
    n_mistakes: int = _f(5, "common mistakes requested")
    max_patterns: int = _f(24, "max distinct planning patterns per call (deterministic sample)")
    merge_threshold: float = _f(0.9, "cosine similarity above which two skills are merged")


@dataclass
class DistillConfig:
    max_steps_per_call: int = _f(8, "long trajectories are split into chunks of this many actions")
    max_think_chars: int = _f(200, "max characters of one reasoning")
    synthetic_done: bool = _f(True, "append the ALFWorld synthetic `done` turn (spec §6.1)")
    seed: int = _f(0, "seed for the synthetic-done admissible sample (per trajectory: hash(seed, id))")


@dataclass
class PromptConfig:
    history_length: int = _f(2, "observation/action pairs shown in the prompt (RL default, spec §12.1)")
    top_k_general: int = _f(6, "general skills shown (spec §12.1 top_k)")
    max_mistakes: int = _f(5, "common mistakes shown")
    skills: bool = _f(True, "include the retrieved skills block at every step")


@dataclass
class ValidateConfig:
    max_tokens: int = _f(4096, "max prompt+target length in tokens (approx: chars/4) for SFT")
    not_admissible: str = _f("quarantine", "policy for a target action not in the admissible list: quarantine | flag")
    empty_think: str = _f("quarantine", "policy for an empty reasoning: quarantine | flag")
    leakage: str = _f("quarantine", "policy for a prompt that contains the target answer: quarantine | flag")
    webshop_reject: str = _f("drop_whole", "WebShop trajectory with an inadmissible click: drop_whole | truncate "
                                           "(keep the pairs before it; spec TV11)")


@dataclass
class ExportConfig:
    val_fraction: float = _f(0.1, "fraction of environment instances held out for validation")
    seed: int = _f(0, "seed of the instance-level split")


@dataclass
class PipelineConfig:
    llm: LLMConfig = field(default_factory=LLMConfig)
    parse: ParseConfig = field(default_factory=ParseConfig)
    dedupe: DedupeConfig = field(default_factory=DedupeConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    aggregate: AggregateConfig = field(default_factory=AggregateConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    validate: ValidateConfig = field(default_factory=ValidateConfig)
    export: ExportConfig = field(default_factory=ExportConfig)


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def from_dict(data: dict[str, Any]) -> PipelineConfig:
    """Build a config from a (partial) nested dict; unknown keys raise ``ValueError``."""
    cfg = PipelineConfig()
    for section, values in (data or {}).items():
        if not hasattr(cfg, section):
            raise ValueError(f"unknown config section {section!r}")
        sub = getattr(cfg, section)
        names = {f.name for f in dataclasses.fields(sub)}
        for k, v in (values or {}).items():
            if k not in names:
                raise ValueError(f"unknown config key {section}.{k}; known: {sorted(names)}")
            setattr(sub, k, type(getattr(sub, k))(v))
    return cfg


def load_config(path: str | None) -> PipelineConfig:
    """Read a YAML config file (sections as in :class:`PipelineConfig`); ``None`` = defaults."""
    if not path:
        return PipelineConfig()
    import yaml
    with open(path, encoding="utf-8") as f:
        return from_dict(yaml.safe_load(f) or {})

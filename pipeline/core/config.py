"""Typed configuration of the pipeline: one dataclass per stage plus the LLM endpoint.

Every field has a default and a help text (``field(metadata={"help": ...})``), in the manner of
TRL's config dataclasses; ``skillpipe config --show`` prints them beside the effective values. A
stage's config is part of its fingerprint: changing a value reruns that stage and everything
downstream. Load overrides from YAML with :func:`load_config`. The sections ``sft``, ``grpo`` and
``eval`` hold the training steps after export (:mod:`pipeline.core.train_config`); no stage
fingerprint covers them, the training steps fingerprint their own config.

Loading is strict: every value is checked against the type of its default (:func:`coerce`: no
silent ``bool("false") == True`` or ``int(1.7) == 1``) and against the range or choices declared
on its field (:func:`check_fields`); every problem raises :class:`ConfigError` as
``section.key: message``. The field machinery and the shared ``prompt:`` section live in
:mod:`pipeline.core.config_base` and are importable from here. What only the registries above
the ground floor know (the verify checkers' rule names, the content rules' names, the readers,
the embedded models) is checked where a run reads its config: :mod:`pipeline.runconfig`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.config_base import (ConfigError, PromptConfig, build_flat, check_fields,  # noqa: F401
                                       coerce, config_field)
from pipeline.core.usefulness_config import UsefulnessConfig
from pipeline.core.train_config import RUN_SET, SECTION_CLASSES, check_section, run_defaults, section_keys

_f = config_field


@dataclass
class LLMConfig:
    """YAML section ``llm:``: the OpenAI-compatible endpoint and how it is called (field help:
    ``skillpipe config --show``). An LLM stage's fingerprint covers only ``model``,
    ``temperature``, ``max_tokens`` and ``seed``."""
    base_url: str = _f("", "OpenAI-compatible endpoint; empty = start the embedded llama.cpp server")
    model: str = _f("", "model name sent to the endpoint; without base_url an embedded model's alias: "
                        "qwen2.5-coder-1.5b-instruct (the default teacher; empty = it, or $SKILLPIPE_LLM_MODEL) "
                        "or smollm2-135m-instruct (fast, weak: for tests and plumbing)")
    api_key_env: str = _f("", "name of the environment variable holding the API key ('' = no key)")
    structured_output: str = _f("auto", "auto | json_schema (OpenAI, vLLM) | json_object (llama.cpp) | none",
                                 choices=("auto", "json_schema", "json_object", "none"))
    temperature: float = _f(0.0, "sampling temperature (0 = greedy, reproducible)", min=0)
    max_tokens: int = _f(1536, "max completion tokens per call; a 'length' finish is a failure (the schemas bound "
                                "every answer below it)", min=1)
    timeout_s: float = _f(600.0, "per-request timeout in seconds (a 1.5B model on 2 CPU cores can take minutes "
                                 "for one long answer; the openai client's own default is 600)", min=0)
    max_retries: int = _f(4, "transport retries (429/5xx/timeout/connection) with exponential backoff",
                          min=0)
    max_repairs: int = _f(-1, "extra calls that feed a schema or content-rule error back to the model; -1 = auto: "
                              "0 for the embedded model at temperature 0 (on the sample a repair round there "
                              "rarely turned a rejected answer into a kept one and cost 76 s of 869; distill's "
                              "one-step calls do the recovering), else 1", min=-1)
    concurrency: int = _f(2, "max concurrent requests (the embedded server gets at most its slots: 1)", min=1)
    seed: int = _f(0, "sampling seed sent to the endpoint")
    stable_schema: bool = _f(False, "json_schema endpoints get one stage-wide schema per stage variant instead of "
                             "each call's tight one (step numbers, item counts), so every request of a stage "
                             "starts with the same text and a hosted prompt cache bills it as cached (OpenAI "
                             "reads the schema as the start of the prompt); answers are still checked against "
                             "the tight schema, and one outside it costs a repair call")
    max_endpoint_failure_rate: float = _f(0.1, "a stage fails (nothing written, rerun retries) when more than "
                                               "this fraction of its items got no answer from the endpoint",
                                               min=0, max=1)
    ctx_size: int = _f(8192, "embedded server only: context window in tokens", min=1)
    threads: int = _f(0, "embedded server only: generation threads (0 = the program's default: all cores for "
                         "llama-server, half for llama-cpp-python). On a machine busy with other work set 1: "
                         "threads that outnumber the free cores wait on each other (here, 2 threads with another "
                         "model server busy generated 0.3 tokens/s instead of ~15)", min=0)
    retry_failed: bool = _f(True, "a stage whose LLM requests failed (raw output quarantined) is recorded as "
                                  "incomplete, so a plain rerun resends exactly those requests; false records it "
                                  "complete (the failures stay quarantined; --force still retries them). With the "
                                  "embedded server at temperature 0 only transport failures are retried: a failed "
                                  "answer would repeat")
    # ---- cost and throughput (docs/llm_endpoints.md): none of these changes an answer ----
    mode: str = _f("online", "online = one chat call per request (concurrent); batch = each stage sends its uncached "
                             "requests as one JSONL job through the endpoint's Files + Batches API (half price at "
                             "OpenAI, answers within 24 h); a killed run resumes polling the same job",
                   choices=("online", "batch"))
    rpm: int = _f(0, "requests per minute the endpoint allows this run (0 = learn it from the x-ratelimit-limit-"
                     "requests header, else no limit); the client keeps a request bucket below it", min=0)
    tpm: int = _f(0, "tokens per minute the endpoint allows this run (0 = learn it from x-ratelimit-limit-tokens, "
                     "else no limit); each call takes its prompt estimate + max_tokens from a token bucket", min=0)
    batch_poll_s: float = _f(30.0, "batch mode: seconds between two status checks of a submitted job", min=0)
    batch_max_requests: int = _f(50000, "batch mode: most requests in one job (OpenAI's limit: 50,000 and 200 MB); "
                                        "more are split over several jobs", min=1)
    price_prompt: float = _f(0.15, "USD per 1M uncached prompt tokens, for the cost figures of manifests "
                                   "(default: gpt-4o-mini's list price)", min=0)
    price_cached: float = _f(0.075, "USD per 1M cached prompt tokens (prompt_tokens_details.cached_tokens)", min=0)
    price_completion: float = _f(0.60, "USD per 1M completion tokens", min=0)
    batch_price_factor: float = _f(0.5, "batch mode: the share of the online price a batch call costs", min=0, max=1)


@dataclass
class ParseConfig:
    """YAML section ``parse:``: the reader and the trajectory caps of the parse stage (field help:
    ``skillpipe config --show``); ``per_env`` is checked by :func:`check_per_env`."""
    format: str = _f("auto", "reader to use; 'auto' detects each file's format")
    max_per_instance: int = _f(3, "max trajectories kept per environment instance and outcome "
                                       "(0 = no cap)", min=0)
    max_success_instances: int = _f(0, "cap on environment instances with a success (0 = no cap)", min=0)
    max_failure_instances: int = _f(0, "cap on environment instances with only failures (0 = no cap)", min=0)
    max_trajectories: int = _f(0, "global cap on kept trajectories, in deterministic order (0 = no cap)",
                               min=0)
    success_threshold: float = _f(1.0, "graded rewards (WebShop score, QA) >= this count as success")
    per_env: dict = _f({}, "per-env overrides of the caps above, e.g. {webshop: {max_per_instance: 1}}")


@dataclass
class RemoveLoopsConfig:
    """YAML section ``remove_loops:`` (field help: ``skillpipe config --show``)."""
    min_actions: int = _f(1, "trajectories with fewer recorded actions after loop removal are quarantined",
                        min=0)


@dataclass
class VerifyConfig:
    """YAML section ``verify:``: what the verify stage does with a trajectory that breaks its
    environment's rules (``pipeline.verify``; field help: ``skillpipe config --show``)."""
    on_flagged: str = _f("demote", "a success with an impossible step or an unreached goal: demote = it leaves the "
                                   "SFT path (outcome failure, outcome_source verified) and goes on to memory and "
                                   "skills as a failure, one row in verify/_quarantine saying why; quarantine = "
                                   "drop it (a quarantined unit); flag = only record the findings (it stays a "
                                   "success: trains on impossible actions)", choices=("demote", "quarantine", "flag"))
    rejected_steps: str = _f("cut", "steps the environment refused and the record shows refused ('Invalid action!', "
                                    "'Nothing happens.', an action outside the admissible list) in a success: cut = "
                                    "remove each with its observation (the state did not change), when the rest "
                                    "then checks clean; demote = treat like an impossible step (on_flagged). "
                                    "Why cut is the default: README, section Verify",
                             choices=("cut", "demote"))
    repair_names: bool = _f(False, "replace a receptacle name the game rejects by the one room name it matches "
                                   "without spaces ('dining table 1' -> 'diningtable 1'); each repair is recorded "
                                   "in metadata verify.repairs and counted")
    disabled_rules: list = _f([], "rules not checked, as 'rule' (every checker) or 'checker.rule', e.g. "
                                  "[alfworld.observation_contradicts]; names: README, section Verify")
    flag_rules: list = _f([], "rules recorded in metadata verify.flags but never acted on (same names as "
                              "disabled_rules)")
    qa_min_f1: float = _f(1.0, "Search/QA with a gold answer: an answer that is not an exact match counts as right "
                               "when its token F1 reaches this (1.0 = exact match only)", min=0, max=1)
    textworld_replay: bool = _f(True, "replay TextWorld trajectories in the TextWorld Express engine (needs Java); "
                                      "false = count them unchecked")


@dataclass
class MemoryConfig:
    """YAML section ``memory:``: the memory prompt's budget (field help: ``skillpipe config --show``)."""
    max_trajectory_chars: int = _f(6000, "rendered trajectory budget per memory prompt (older steps elided)",
                                  min=1)


@dataclass
class SkillsConfig:
    """YAML section ``skills:``: skills requested per kind, patterns per call, merging (field help:
    ``skillpipe config --show``)."""
    n_general: int = _f(6, "general skills requested from the LLM", min=0)
    n_task_specific: int = _f(4, "task-specific skills requested per category", min=0)
    n_mistakes: int = _f(5, "common mistakes requested", min=0)
    max_patterns: int = _f(24, "max distinct planning patterns per call (deterministic sample)", min=1)
    max_outlines: int = _f(8, "successful train trajectories shown per general or task-specific call as an outline "
                              "of their recorded actions (instance numbers dropped, repeats counted): the ground "
                              "truth beside the teacher's own planning patterns; 0 = none", min=0)
    merge_threshold: float = _f(0.9, "cosine similarity above which two skills are merged",
                                    min=-1, max=1)
    sampled_retries: int = _f(0, "a call whose every item a content rule rejects is asked again up to this many "
                                 "times with sampling (retry_temperature, seeds 1..N): rejection sampling, each "
                                 "answer judged item by item by the same rules; 0 = off, the default: with the "
                                 "embedded 1.5B teacher one round saved 4 of 7 rejected calls on the sample, but "
                                 "4 of its 10 new items were wrong in ways no rule catches (the microwave to cool, "
                                 "'wait 10-20 minutes'); for a stronger endpoint", min=0, max=8)
    retry_temperature: float = _f(0.7, "sampling temperature of those retries (greedy decoding repeats its answer)",
                                  min=0.0, max=2.0)


@dataclass
class DistillConfig:
    """YAML section ``distill:``: chunking, think length, the synthetic ``done`` turn and where
    each think comes from (field help: ``skillpipe config --show``)."""
    max_steps_per_call: int = _f(8, "long trajectories are split into chunks of this many actions",
                                 min=1)
    max_think_chars: int = _f(300, "max characters of one reasoning (a think that reaches it is quarantined as "
                                   "cut_off)", min=1)
    synthetic_done: bool = _f(True, "append the ALFWorld synthetic `done` turn")
    step_retry: bool = _f(True, "when a content rule still rejects a chunk's answer after its repairs, keep the "
                                "thinks of that answer that pass every rule on their own and ask again for "
                                "each rejected step in a call of its own (the trajectory is quarantined only "
                                "if a one-step call fails too); false = quarantine the trajectory at once")
    sampled_retries: int = _f(4, "a step whose one-step call a content rule still rejects is asked again up to "
                                 "this many times: first greedily without the worked examples, then with "
                                 "sampling (retry_temperature, seeds 2..N; the examples shown in even rounds): "
                                 "rejection sampling, every answer judged by the same rules; 0 = off", min=0, max=8)
    retry_temperature: float = _f(0.7, "sampling temperature of those retries (greedy decoding repeats its "
                                        "mistake)", min=0.0, max=2.0)
    best_of: int = _f(1, "best-of-n thinks: each answered call is asked n-1 more times, sampled at "
                         "retry_temperature, and each step keeps the candidate think that passes the content "
                         "rules with the highest usefulness gain (the usefulness.scorer); 1 = off", min=1, max=8)
    seed: int = _f(0, "seed for the synthetic-done admissible sample (per trajectory: hash(seed, id))")
    source_thoughts: str = _f("prefer", "a thought recorded by the source for a step (ReAct 'think:' lines, ETO "
                                        "thoughts): prefer = use it as that step's think when it passes the "
                                        "content rules, ask the LLM only for the other steps (pairs get flag "
                                        "recorded_thought); ignore = ask the LLM for every step (the thought is "
                                        "still shown as a hint). Default prefer: a real agent's reasoning at the "
                                        "time beats a paraphrase by the distill model",
                              choices=("prefer", "ignore"))
    reasoning: str = _f("llm", "llm = the LLM writes the think of each step (SkillRL's distillation); none = no "
                               "LLM call, every step gets an empty think: action-only SFT pairs, the "
                               "behaviour-cloning baseline to compare distilled data with (export them with "
                               "build_pairs.empty_think=flag; rows record model 'none')",
                        choices=("llm", "none"))


#: Policies of a build_pairs rule: quarantine the pair, or keep it and count the rule as a flag.
POLICIES = ("quarantine", "flag")
#: WebShop trajectory policy after an inadmissible click (``build_pairs.webshop_reject``).
WEBSHOP_REJECT_POLICIES = ("drop_whole", "truncate")


@dataclass
class BuildPairsConfig:
    """YAML section ``build_pairs:``: the token budget and the quarantine/flag policy of each pair
    rule (field help: ``skillpipe config --show``)."""
    max_tokens: int = _f(4096, "max prompt+target length in tokens for SFT (= sft max_length), counted with "
                               "the chat template and tokenizer named by build_pairs.tokenizer", min=1)
    tokenizer: str = _f("embedded", "tokenizer that counts max_tokens: embedded (the SmolLM2 base model's, from "
                                    "its GGUF) | a local Hugging Face tokenizer folder (the model you train) | "
                                    "approx (chars/4 x 1.3, no tokenizer; pipeline/tokens.py)")
    not_admissible: str = _f("quarantine", "policy for a target action not in the admissible list: quarantine | flag",
                             choices=POLICIES)
    empty_think: str = _f("quarantine", "policy for an empty reasoning: quarantine | flag", choices=POLICIES)
    short_think: str = _f("quarantine", "policy for a reasoning with fewer than min_think_words words, e.g. "
                                        "'1.5-2.3' (quarantine | flag; flag keeps the pair and counts it in the "
                                        "dataset card). Default quarantine: numbers are not reasoning "
                                        "and must not become SFT targets",
                          choices=POLICIES)
    min_think_words: int = _f(3, "words of >= 2 letters a non-blank reasoning needs (rule short_think; "
                                 "0 turns the rule off)", min=0)
    leakage: str = _f("quarantine", "policy for a prompt that contains the target answer: quarantine | flag",
                       choices=POLICIES)
    webshop_reject: str = _f("drop_whole", "WebShop trajectory with an inadmissible click: drop_whole | truncate "
                                           "(keep the pairs before it)",
                             choices=WEBSHOP_REJECT_POLICIES)


@dataclass
class QualityConfig:
    """Content rules of LLM output (``pipeline.quality``), run by memory, skills and distill
    inside the answer check (a violation gets the repair round, then quarantine), and the
    data-quality metrics of export."""
    flag_rules: list = _f([], "content rules that only count instead of quarantining (default none: every "
                              "rule quarantines); names: docs/content_rules.md")
    min_letter_share: float = _f(0.5, "rule no_words: share of a field's visible characters that must be "
                                      "letters. Rationale: English prose is ~95% letters, an ALFWorld/WebShop "
                                      "sentence with ids and prices > 70%; '**1**: 2 _Apply when: 3 },_' is 41%",
                                 min=0, max=1)
    max_title_words: int = _f(12, "rule not_a_phrase: max words of a skill title (the schema caps titles at "
                                  "60 characters, about 10 words)", min=1)
    loop_ngram: int = _f(3, "rule ngram_loop: n of the word n-grams counted", min=1)
    loop_min_repeats: int = _f(3, "rule ngram_loop: an n-gram this many times in one field is a loop (fields "
                                  "are <= 240 characters: one plan may say 'go to [location]' twice, not 3 "
                                  "times); < 2 turns the rule off", min=0)
    min_observation_overlap: float = _f(0.6, "rule ungrounded_observation: share of a critical observation's "
                                             "words that must occur, in order, in the observation before or "
                                             "after its step (1 = an exact quote; 0.6 lets a quote drop "
                                             "articles and numbers)", min=0, max=1)
    off_topic_threshold: float = _f(0.15, "rule off_topic for memories and thinks: min cosine similarity "
                                          "(MiniLM all-MiniLM-L6-v2) of an LLM text to its source (trajectory "
                                          "or step). Measured (tests/pipeline/quality/test_rules.py): a "
                                          "childhood-diet mistake or a football remark scores 0.02-0.05 against "
                                          "an ALFWorld episode, placeholders such as 'because of 0' 0.07-0.08; "
                                          "on-topic memories and thinks 0.27-0.74. Skills and mistakes use a "
                                          "margin against everyday subjects instead (pipeline.quality.topic."
                                          "DOMAIN_MARGIN). -1 turns the rule off everywhere", min=-1, max=1)
    skill_use_min_shared: int = _f(2, "metric skill_use_rate (export): content words of a skill in the think's "
                                      "prompt that the think must share, beyond those of the step's observation "
                                      "and action", min=1)


@dataclass
class ExportConfig:
    """YAML section ``export:``: the instance-level validation split, read by split and export
    (field help: ``skillpipe config --show``)."""
    val_fraction: float = _f(0.1, "fraction of environment instances held out for validation",
                             min=0, max=1)
    seed: int = _f(0, "seed of the instance-level split")


@dataclass
class PipelineConfig:
    """The whole pipeline config: one attribute per YAML section, named as the section. Build it
    with :func:`load_config` / :func:`from_dict` (checked) or ``PipelineConfig()`` (defaults)."""
    llm: LLMConfig = field(default_factory=LLMConfig)
    parse: ParseConfig = field(default_factory=ParseConfig)
    remove_loops: RemoveLoopsConfig = field(default_factory=RemoveLoopsConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    build_pairs: BuildPairsConfig = field(default_factory=BuildPairsConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    usefulness: UsefulnessConfig = field(default_factory=UsefulnessConfig)
    # training steps after export (pipeline.core.train_config; no stage fingerprint covers them)
    sft: Any = field(default_factory=lambda: run_defaults("sft"))
    grpo: Any = field(default_factory=lambda: run_defaults("grpo"))
    eval: Any = field(default_factory=lambda: run_defaults("eval"))


def to_dict(cfg: Any) -> dict[str, Any]:
    """Config dataclass ``cfg`` as nested plain dicts (``dataclasses.asdict``): JSON-ready, the
    form fingerprints and ``skillpipe config --show --json`` use. For a :class:`PipelineConfig`
    only the keys a config file may set (the training sections lose their run-set fields)."""
    out = dataclasses.asdict(cfg)
    if isinstance(cfg, PipelineConfig):
        for f in dataclasses.fields(cfg):
            keys = section_keys(f.name, getattr(cfg, f.name))
            out[f.name] = {k: v for k, v in out[f.name].items() if k in keys}
    return out


#: Caps of :class:`ParseConfig` that ``parse.per_env`` may override per env: the keys
#: ``pipeline.selection.caps`` reads (a test keeps them equal).
PER_ENV_CAPS = ("max_per_instance", "max_success_instances", "max_failure_instances")


def check_per_env(per_env: Any) -> dict[str, dict[str, int]]:
    """Normalised ``parse.per_env``: ``{env: {cap: int >= 0}}`` with env a key of
    ``pipeline.envs.REGISTRY`` and cap one of :data:`PER_ENV_CAPS` (``env: null`` = no override).
    Raises :class:`ConfigError` naming the env/cap so a typo cannot be silently ignored."""
    from pipeline.envs import REGISTRY
    if not isinstance(per_env, dict):
        raise ConfigError(f"parse.per_env: expected a mapping of env -> caps, got {per_env!r}")
    out: dict[str, dict[str, int]] = {}
    for env, caps in per_env.items():
        if env not in REGISTRY:
            raise ConfigError(f"parse.per_env: unknown env {env!r}; known: {', '.join(sorted(REGISTRY))}")
        if caps is None:
            caps = {}
        if not isinstance(caps, dict):
            raise ConfigError(f"parse.per_env.{env}: expected a mapping of caps ({', '.join(PER_ENV_CAPS)}), "
                              f"got {caps!r}")
        out[env] = {}
        for key, value in caps.items():
            where = f"parse.per_env.{env}.{key}"
            if key not in PER_ENV_CAPS:
                raise ConfigError(f"{where}: unknown cap; allowed: {', '.join(PER_ENV_CAPS)}")
            value = coerce(value, 0, where)
            if value < 0:
                raise ConfigError(f"{where}: must be >= 0, got {value!r}")
            out[env][key] = value
    return out


def check_config(cfg: PipelineConfig) -> PipelineConfig:
    """Range/choice checks of every section (field metadata), of ``parse.per_env`` and of
    ``distill.reasoning: none`` (needs ``build_pairs.empty_think: flag``); returns
    ``cfg`` (with ``per_env`` normalised) or raises :class:`ConfigError` ``section.key: message``.
    (A module function: ``build_pairs`` is a section name of :class:`PipelineConfig`.)"""
    for f in dataclasses.fields(cfg):
        check_fields(getattr(cfg, f.name), f.name)
    for section in SECTION_CLASSES:  # their own checks (games, lora_r), and the run's prompt section
        setattr(cfg, section, check_section(section, getattr(cfg, section), cfg.prompt))
    cfg.parse.per_env = check_per_env(cfg.parse.per_env)
    if cfg.distill.reasoning == "none" and cfg.build_pairs.empty_think != "flag":
        # every think is empty: the quarantine policy would export no pair at all, with exit 0
        raise ConfigError("build_pairs.empty_think: must be flag with distill.reasoning: none (every think is "
                          "empty; quarantine drops every pair and the export has none)")
    return cfg


#: Config sections renamed with their stages (old name -> new); old names are accepted for one
#: release with a warning on stderr.
RENAMED_SECTIONS = {"dedupe": "remove_loops", "aggregate": "skills", "validate": "build_pairs"}


def renamed_section(section: str) -> str:
    """``section`` under its current name; warns once on stderr for an old name."""
    new = RENAMED_SECTIONS.get(section)
    if new is None:
        return section
    import warnings
    warnings.warn(f"config section {section!r} is now {new!r}; the old name will stop working in the next release",
                  FutureWarning, stacklevel=3)
    return new


def from_dict(data: dict[str, Any]) -> PipelineConfig:
    """Build a config from a (partial) nested dict and check it (:func:`check_config`).

    Raises :class:`ConfigError` (a ``ValueError``) for a top level or section that is not a
    mapping, an unknown section or key, a value of the wrong type (rules of :func:`coerce`) or
    out of range, each as ``section.key: message``.
    """
    cfg = PipelineConfig()
    sections = [f.name for f in dataclasses.fields(cfg)]
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config: expected a mapping of sections ({', '.join(sections)}), "
                          f"got {type(data).__name__}")
    for section, values in data.items():
        section = renamed_section(section)
        if section not in sections:
            raise ConfigError(f"unknown config section {section!r}; known: {', '.join(sections)}")
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ConfigError(f"{section}: expected a mapping of keys to values, got {type(values).__name__} "
                              f"{values!r}")
        sub = getattr(cfg, section)
        names = set(section_keys(section, sub))
        for k, v in values.items():
            if k not in names:
                raise ConfigError(_unknown_key(section, k, names))
            setattr(sub, k, coerce(v, getattr(sub, k), f"{section}.{k}"))
    return check_config(cfg)


def _unknown_key(section: str, key: Any, names: set[str]) -> str:
    """The error of key ``key`` that section ``section`` does not have (``names``: those it has)."""
    if key in RUN_SET.get(section, ()):
        why = "the run's prompt: section" if key == "prompt" else "the run (runs/<run_id>/...)"
        return f"{section}.{key}: not a config key: set by {why}"
    return f"unknown config key {section}.{key}; known: {sorted(names)}"


def load_config(path: str | None) -> PipelineConfig:
    """Read a YAML config file (sections as in :class:`PipelineConfig`); ``None`` = defaults."""
    if not path:
        return PipelineConfig()
    import yaml
    with open(path, encoding="utf-8") as f:
        return from_dict(yaml.safe_load(f) or {})

"""The training sections of the run config: ``sft:``, ``grpo:`` and ``eval:``.

One dataclass per training step, every field with a default, a help text and its range, in the
manner of the data sections of :mod:`pipeline.core.config` (the same :func:`config_field`,
:func:`coerce` and :func:`check_fields`, from :mod:`pipeline.core.config_base`):
:class:`SFTFitConfig` (the ``sft_fit`` step, TRL ``SFTTrainer``), :class:`GRPOConfig` (the
``grpo`` step, online GRPO with skill-bank evolution) and :class:`EvalConfig` (the ``eval_sft`` /
``eval_grpo`` evaluations). They live in
``pipeline`` so that ``PipelineConfig`` (and ``skillpipe config --show``) can hold them while
``pipeline`` never imports ``sft``; ``sft.config``, ``sft.rl.config`` and ``sft.eval`` re-export
them with their loaders.

Defaults of the run config's sections (:func:`run_defaults`) are the CPU budgets of ``make run``
and the DAG: ``sft`` = :class:`SFTFitConfig` defaults (3 LoRA steps), ``grpo`` = :data:`GRPO_SMOKE`
(2 steps of 1 task x 2 episodes), ``eval`` = :data:`EVAL_SMOKE` (4 games of <= 5 actions). The
class defaults stay those of the standalone commands without a run config: SkillRL's GPU budget
for ``skillpipe rl grpo --config FLAT.yaml``, 8 games of <= 10 actions for ``skillpipe eval``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.usefulness_config import POLICY_ENV, USEFULNESS_POLICIES, default_policy
from pipeline.core.config_base import ConfigError, PromptConfig, build_flat, check_fields, config_field

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
    precision: str = _f("auto", "auto (bf16 on a bf16-capable GPU, else fp32) | bf16 (without a GPU: CPU "
                                "autocast, 20 % faster per step with AVX512-BF16) | fp32",
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
        """Raise :class:`pipeline.core.config_base.ConfigError` (a ``ValueError``) ``"field: message"`` for a
        value out of its declared range/choices (field metadata), or ``lora`` with ``lora_r < 1``."""
        check_fields(self)
        if self.lora and self.lora_r < 1:
            raise ConfigError(f"lora_r: must be >= 1 when lora is on, got {self.lora_r}")


@dataclass
class GRPOConfig:
    """Everything that decides an online GRPO run (see module docstring)."""

    # --- output, model, skills
    output_dir: str = _f("runs/grpo", "folder for grpo_log.jsonl, checkpoints/ and evolved banks")
    model: str = _f("", "policy: local HF folder (full model or LoRA adapter) or '' = embedded SmolLM2-135M-Instruct")
    model_cache_dir: str = _f("", "cache folder of the converted embedded model ('' = ~/.cache/skillpipe)")
    skill_bank: str = _f("", "SkillRL skill-bank JSON to start from ('' = no skills)")
    skill_bank_env: str = _f("", "env named in the bank's metadata when it is not `env` (e.g. an ALFWorld bank on "
                                 "TextWorld: general skills and mistakes apply, categories will not match); "
                                 "'' = must be `env`")
    resume: str = _f("", "'' = fresh run; 'auto' = latest checkpoint in output_dir; or a checkpoint folder")
    # --- environment
    env: str = _f("textworld", "textworld (TextWorld Express) | alfworld (needs the package and ALFWORLD_DATA)",
                  choices=("textworld", "alfworld"))
    games: list = _f(["twc"], "TextWorld Express games to train on (twc, cookingworld, ...)")
    game_params: str = _f("", "TextWorld Express gameParams ('' = small per-game defaults)")
    train_seeds: int = _f(64, "distinct training games (seeds 0..N-1 of the train fold)", min=1)
    val_tasks: int = _f(8, "validation games (dev fold, seeds 0..N-1; >= 1 when eval_steps > 0)", min=0)
    max_env_steps: int = _f(50, "actions per episode at most (SkillRL env.max_steps)", min=1)
    # --- GRPO
    max_steps: int = _f(150, "optimizer steps (each: rollouts of tasks_per_step x num_generations episodes)",
                         min=1)
    tasks_per_step: int = _f(16, "tasks (groups) per step (SkillRL train_data_size)", min=1)
    num_generations: int = _f(8, "episodes per task = group size G (SkillRL env.rollout.n); >= 2: the "
                                   "advantage is relative to the group, so a group of 1 has no signal", min=2)
    reward: str = _f("won", "episode reward: won (10 * won) | score (engine's normalised score, 0..1)",
                    choices=("won", "score"))
    invalid_action_penalty: float = _f(0.1, "subtracted from the episode reward per invalid step (SkillRL's coefficient)",
                                        min=0)
    scale_rewards: bool = _f(True, "divide advantages by the group std (SkillRL norm_adv_by_std_in_grpo)")
    adv_epsilon: float = _f(1e-6, "added to the group std before dividing", min=0)
    beta: float = _f(0.01, "KL coefficient to the reference policy (low_var_kl / k3 estimator)", min=0)
    epsilon: float = _f(0.2, "PPO clip range (low and high)", min=0)
    entropy_coeff: float = _f(0.001, "entropy bonus coefficient", min=0)
    learning_rate: float = _f(1e-6, "AdamW learning rate", min=0)
    weight_decay: float = _f(0.0, "AdamW weight decay", min=0)
    max_grad_norm: float = _f(1.0, "gradient clipping norm", min=0)
    micro_batch_size: int = _f(4, "step samples per forward/backward pass (gradients accumulate)", min=1)
    max_completion_length: int = _f(512, "new tokens per action (SkillRL max_response_length)", min=1)
    temperature: float = _f(1.0, "sampling temperature of training rollouts (> 0: it divides the logits)",
                           min=0)
    top_p: float = _f(1.0, "nucleus sampling of training rollouts (0 < top_p <= 1)", min=0, max=1)
    seed: int = _f(0, "seed of task order and sampling")
    lora_r: int = _f(0, "LoRA rank of the GRPO update: 0 = train all weights (as SkillRL); > 0 = train a new PEFT "
                        "adapter on the starting policy (a SmolLM2-135M checkpoint: ~30 MB instead of ~1.5 GB; the KL "
                        "reference is the same model with the adapter off, so no second copy is held)", min=0)
    lora_alpha: int = _f(16, "LoRA scaling alpha (with lora_r > 0)", min=0)
    lora_target_modules: str = _f("all-linear", "comma-separated module names, or 'all-linear' (with lora_r > 0)")
    torch_threads: int = _f(1, "CPU threads for torch (0 = torch default). 1 is fastest on shared cores: measured "
                               "32-token generation 4.3 s with 1 thread vs 94 s with 2 under load", min=0)
    # --- prompt: the run's own PromptConfig (sft.rl.step.run_prompt_config), never a copy of its fields
    prompt: PromptConfig = field(default_factory=PromptConfig, metadata={
        "help": "prompt rendering (history window, skills shown); a pipeline run's GRPO step uses the run's "
                "`prompt` section so SFT and RL prompts are byte-identical"})
    # --- validation and skill evolution
    eval_steps: int = _f(5, "validate (and maybe evolve the bank) every N steps; 0 = never (SkillRL test_freq)",
                         min=0)
    val_temperature: float = _f(0.4, "sampling temperature of validation rollouts (SkillRL's)", min=0)
    evolve_skills: bool = _f(True, "send failures of low-success categories to the LLM skill updater")
    update_threshold: float = _f(0.4, "a category below this validation success rate gets new skills",
                                    min=0, max=1)
    max_new_skills: int = _f(3, "skills the updater may add per category and update", min=0)
    skill_usefulness: str = field(default_factory=default_policy, metadata={
        "help": "the usefulness gate on skills the updater adds, as the skills stage gates the bank "
                "(usefulness.policy): quarantine | flag | off (default flag, or $" + POLICY_ENV + ")",
        "choices": USEFULNESS_POLICIES})
    max_dynamic_skills: int = _f(6, "cap on evolved skills per category (oldest dropped first, D-R2)", min=0)
    max_failures: int = _f(5, "failed episodes shown to the updater per category", min=0)
    failure_steps: int = _f(5, "last steps of each failed episode shown to the updater", min=0)
    failure_obs_chars: int = _f(200, "observation characters shown per failing step", min=0)
    updates_from_validation: bool = _f(False, "use validation failures in updates (False keeps val tasks out)")
    llm_base_url: str = _f("", "skill updater endpoint ('' = start the embedded llama.cpp server)")
    llm_model: str = _f("", "skill updater model name ('' = embedded)")
    llm_api_key_env: str = _f("", "env var holding the updater API key")
    # --- checkpoints
    save_steps: int = _f(10, "save a coupled checkpoint every N steps (and always at the end); 0 = end only",
                         min=0)

    def validate(self) -> "GRPOConfig":
        """Return ``self`` or raise :class:`pipeline.core.config_base.ConfigError` (a ``ValueError``)
        ``"field: message"``: declared ranges/choices, ``temperature`` and ``top_p`` > 0, a
        non-empty ``games`` list of known TextWorld Express games, ``val_tasks >= 1`` when
        validation runs (``eval_steps > 0``)."""
        check_fields(self)
        check_fields(self.prompt, "prompt")
        for name in ("temperature", "top_p"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}: must be > 0, got {getattr(self, name)!r}")
        if self.eval_steps > 0 and self.val_tasks < 1:
            raise ConfigError(f"val_tasks: must be >= 1 when eval_steps > 0 (validation runs), got {self.val_tasks}")
        if self.env == "textworld":
            from pipeline.envs.sim.textworld import GAME_CATEGORIES
            if not self.games:
                raise ConfigError("games: at least one TextWorld Express game; known: "
                                  f"{', '.join(sorted(GAME_CATEGORIES))}")
            bad = [g for g in self.games if g not in GAME_CATEGORIES]
            if bad:
                raise ConfigError(f"games: unknown TextWorld Express game(s) {', '.join(map(repr, bad))}; "
                                  f"known: {', '.join(sorted(GAME_CATEGORIES))}")
        return self


@dataclass
class EvalConfig:
    """What an evaluation plays (``sft.eval``). Defaults: a small CPU budget, those of ``skillpipe eval``."""
    env: str = _f("textworld", "textworld (TextWorld Express) | alfworld (needs ALFWORLD_DATA)",
                  choices=("textworld", "alfworld"))
    games: list = _f(["twc"], "TextWorld Express games (cycled over the episodes)")
    game_params: str = _f("", "TextWorld Express gameParams ('' = small per-game defaults)")
    fold: str = _f("test", "held-out fold: test | dev (TextWorld); ALFWorld uses valid_unseen / valid_seen",
                   choices=("test", "dev"))
    seed0: int = _f(0, "first seed; episode i plays seed seed0 + i // len(games)", min=0)
    episodes: int = _f(8, "episodes (distinct games) to play", min=1)
    max_steps: int = _f(10, "actions per episode at most", min=1)
    max_new_tokens: int = _f(96, "new tokens per action (think + action)", min=1)
    temperature: float = _f(0.0, "sampling temperature; 0 = greedy (repeatable)", min=0)
    batch_size: int = _f(8, "episodes played in lock-step (one batched generation per step)", min=1)
    prompt: PromptConfig = dataclasses.field(default_factory=PromptConfig, metadata={
        "help": "prompt rendering; a run's checkpoint is evaluated with the run's own `prompt` section"})
    torch_threads: int = _f(0, "CPU threads for torch (0 = torch default)", min=0)
    dtype: str = _f("float32", "weights' dtype while playing: float32 | bfloat16 (on a CPU with AVX512-BF16 "
                               "prefill ran 1.7x faster, but a merged LoRA update rounded to bf16 played "
                               "worse: 3 of 8 games won against 6)",
                    choices=("float32", "bfloat16"))

    def validate(self) -> "EvalConfig":
        """Return ``self`` or raise :class:`ConfigError` ``"field: message"``: declared
        ranges/choices (``prompt`` too) and, for TextWorld, a non-empty ``games`` list of known
        TextWorld Express games."""
        check_fields(self)
        check_fields(self.prompt, "prompt")
        if self.env == "textworld":
            from pipeline.envs.sim.textworld import GAME_CATEGORIES
            bad = [g for g in self.games if g not in GAME_CATEGORIES] or ([] if self.games else ["(none)"])
            if bad:
                raise ConfigError(f"games: unknown TextWorld Express game(s) {', '.join(map(str, bad))}; "
                                  f"known: {', '.join(sorted(GAME_CATEGORIES))}")
        return self


#: The CPU budget of ``make run``, the DAG and the tests for GRPO (``sft.rl.config.smoke``, the
#: default ``grpo:`` section): 2 steps of 1 task x 2 episodes x 3 actions, 32 new tokens, a rank-8
#: LoRA update at lr 1e-4, one validation/evolution at step 2 on 2 dev games. The other fields
#: keep :class:`GRPOConfig`'s (SkillRL's) defaults.
GRPO_SMOKE = dict(max_steps=2, tasks_per_step=1, num_generations=2, max_env_steps=3, max_completion_length=32,
                  learning_rate=1e-4, lora_r=8, train_seeds=4, val_tasks=2, eval_steps=2, save_steps=0,
                  micro_batch_size=2)

#: The CPU budget of the DAG's evaluations (``eval_sft``, ``eval_grpo``; the default ``eval:``
#: section): 4 held-out games of at most 5 actions of 48 new tokens, torch on one thread. The other
#: fields keep :class:`EvalConfig`'s defaults, those of ``skillpipe eval`` without ``--config``.
EVAL_SMOKE = dict(episodes=4, max_steps=5, max_new_tokens=48, torch_threads=1)

#: Training config classes by run config section.
SECTION_CLASSES = {"sft": SFTFitConfig, "grpo": GRPOConfig, "eval": EvalConfig}

#: Fields of a training section that a pipeline run sets itself, so they are no keys of the run
#: config: where the step reads and writes (``runs/<run_id>/...``), the policy and bank it starts
#: from, and the prompt (the run's ``prompt:`` section, so SFT, GRPO and eval render alike).
RUN_SET = {"sft": ("pairs", "output_dir"),
           "grpo": ("output_dir", "model", "skill_bank", "skill_bank_env", "prompt"),
           "eval": ("prompt",)}


def run_defaults(section: str) -> Any:
    """The default of run config section ``section`` (``sft``, ``grpo`` or ``eval``): the class
    defaults, with :data:`GRPO_SMOKE` for ``grpo`` and :data:`EVAL_SMOKE` for ``eval`` applied
    (module docstring)."""
    smoke = {"grpo": GRPO_SMOKE, "eval": EVAL_SMOKE}.get(section, {})
    return dataclasses.replace(SECTION_CLASSES[section](), **smoke)


def section_keys(section: str, cfg: Any) -> list[str]:
    """The keys of config section ``section`` with values ``cfg`` (a dataclass): its field names
    without those in :data:`RUN_SET`, in declaration order."""
    skip = RUN_SET.get(section, ())
    return [f.name for f in dataclasses.fields(cfg) if f.name not in skip]


def check_section(section: str, cfg: Any, prompt: PromptConfig) -> Any:
    """Training section ``cfg`` with the run's ``prompt`` section, validated; a problem raises
    :class:`ConfigError` ``"section.field: message"`` (the class checks name the field only)."""
    if hasattr(cfg, "prompt"):
        cfg = dataclasses.replace(cfg, prompt=dataclasses.replace(prompt))
    try:
        cfg.validate()
    except ConfigError as e:
        raise ConfigError(f"{section}.{e}") from None
    return cfg


def with_overrides(section: str, cfg: Any, overrides: dict[str, Any]) -> Any:
    """Training section ``cfg`` (of run config section ``section``) with ``overrides`` applied:
    ``None`` values are skipped (an option not given), ``games`` may be a comma-separated string,
    every value is coerced and checked like a config file's. Raises :class:`ConfigError`
    ``"section.field: message"`` for an unknown field, a wrong type or an out-of-range value.

    The one way the CLI options (``skillpipe sft fit --max-steps``) and the DAG params
    (``sft_max_steps``) change a section, so both train alike."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if isinstance(given.get("games"), str):
        given["games"] = [g.strip() for g in given["games"].split(",") if g.strip()]
    try:
        out = build_flat(type(cfg), given, cfg, what=f"{section} config")
        out.validate()
    except ConfigError as e:
        msg = str(e)
        raise ConfigError(msg if msg.startswith("unknown") else f"{section}.{msg}") from None
    return out

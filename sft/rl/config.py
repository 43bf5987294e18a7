"""Configuration of the online GRPO step: one dataclass, every field with a default and help.

Defaults follow SkillRL's official ALFWorld GRPO script where it defines them: group size 8,
16 tasks per step, 50 env steps, lr 1e-6, KL ``low_var_kl`` with coefficient 0.01, clip ratio
0.2, entropy 0.001, response length 512, temperature 1.0 (train) / 0.4 (validation),
invalid-action penalty 0.1, validation every 5 steps, update threshold 0.4, 3 new skills at
most. The prompt (history length 2, top-6 general skills) is the run's own ``PromptConfig``.
Those are GPU-cluster budgets; :func:`smoke` returns the small CPU budget used by ``make run``
and the tests. Names match TRL's ``GRPOConfig`` where the meaning is the same
(``num_generations``, ``beta``, ``epsilon``, ``learning_rate``, ``max_completion_length``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.config import ConfigError, PromptConfig, build_flat, check_fields, config_field


_f = config_field


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
        """Return ``self`` or raise :class:`pipeline.core.config.ConfigError` (a ``ValueError``)
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


def smoke(**overrides: Any) -> GRPOConfig:
    """The CPU budget of ``make run`` and the tests: 2 steps of 1 task x 2 episodes x 3 actions,
    32 new tokens, a rank-8 LoRA update at lr 1e-4, one validation/evolution at step 2 on 2 dev
    games."""
    base = dict(max_steps=2, tasks_per_step=1, num_generations=2, max_env_steps=3, max_completion_length=32,
                learning_rate=1e-4, lora_r=8, train_seeds=4, val_tasks=2, eval_steps=2, save_steps=0,
                micro_batch_size=2)
    base.update(overrides)
    return from_dict(base)


def to_dict(cfg: GRPOConfig) -> dict[str, Any]:
    """``cfg`` as a JSON-ready dict (``prompt`` nested as a dict of its fields)."""
    return dataclasses.asdict(cfg)


#: Flat keys of earlier releases that now live in ``prompt`` (accepted for one release, with a warning).
LEGACY_PROMPT_KEYS = ("history_length", "top_k_general", "max_mistakes")


def pop_prompt(data: dict[str, Any], what: str = "GRPO config") -> tuple[dict[str, Any], PromptConfig | None]:
    """``(data without prompt keys, PromptConfig or None when data names none)``: ``prompt`` may
    be a :class:`PromptConfig` or a mapping of its fields; the legacy flat keys
    (:data:`LEGACY_PROMPT_KEYS`) are moved into it with a ``FutureWarning``. Raises
    :class:`ConfigError` for a ``prompt`` of another type or an invalid prompt field."""
    data = dict(data)
    prompt = data.pop("prompt", None)
    legacy = {k: data.pop(k) for k in LEGACY_PROMPT_KEYS if k in data}
    if legacy:
        import warnings
        warnings.warn(f"{what} keys {sorted(legacy)} are now under `prompt:`; the flat form will stop "
                      "working in the next release", FutureWarning, stacklevel=3)
    if isinstance(prompt, PromptConfig):
        return data, dataclasses.replace(prompt, **legacy) if legacy else prompt
    if prompt is not None and not isinstance(prompt, dict):
        raise ConfigError(f"prompt: expected a mapping of prompt fields, got {type(prompt).__name__}")
    if prompt is None and not legacy:
        return data, None
    return data, build_flat(PromptConfig, {**(prompt or {}), **legacy}, what=f"{what} prompt")


def from_dict(data: dict[str, Any]) -> GRPOConfig:
    """Build a config from a dict of field values, each coerced to its field's type
    (``pipeline.core.config.coerce``) and checked (:meth:`GRPOConfig.validate`); raises
    :class:`pipeline.core.config.ConfigError` (a ``ValueError``) for a non-mapping, an unknown key,
    a wrong type or an out-of-range value. ``games`` may also be a comma-separated string;
    ``prompt`` a :class:`PromptConfig` or a mapping of its fields (the flat keys
    :data:`LEGACY_PROMPT_KEYS` still work, with a ``FutureWarning``)."""
    if isinstance(data, dict) and isinstance(data.get("games"), str):
        data = {**data, "games": [g.strip() for g in data["games"].split(",") if g.strip()]}
    prompt = None
    if isinstance(data, dict):
        data, prompt = pop_prompt(data)
    cfg = build_flat(GRPOConfig, data, what="GRPO config")
    return (dataclasses.replace(cfg, prompt=prompt) if prompt is not None else cfg).validate()


#: The stage whose manifest records the prompt config the SFT pairs were rendered with.
PROMPT_STAGE = "build_pairs"


def run_prompt_config(store: Any) -> PromptConfig:
    """The :class:`PromptConfig` a pipeline run rendered its SFT pairs with, read from the
    ``config.prompt`` facts of its ``build_pairs`` manifest (``store``: an
    ``pipeline.core.artifacts.ArtifactStore``), so GRPO and evaluation render the same bytes.

    Raises ``ArtifactError`` when the run has no complete ``build_pairs`` artifact and
    :class:`ConfigError` when its manifest records no (or an invalid) prompt section."""
    art = store.require(PROMPT_STAGE)
    recorded = (art.manifest.get("config") or {}).get("prompt")
    if not isinstance(recorded, dict):
        raise ConfigError(f"the {PROMPT_STAGE} manifest of run {store.run_id} records no prompt config "
                          f"(config.prompt): rerun {PROMPT_STAGE} so its prompts can be matched")
    return build_flat(PromptConfig, recorded, what=f"prompt config of run {store.run_id}")

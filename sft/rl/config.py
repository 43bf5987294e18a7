"""Configuration of the online GRPO step: :class:`GRPOConfig` (defined in
``pipeline.core.train_config``, the ``grpo:`` section of the run config) and its loaders.

Defaults follow SkillRL's official ALFWorld GRPO script where it defines them: group size 8,
16 tasks per step, 50 env steps, lr 1e-6, KL ``low_var_kl`` with coefficient 0.01, clip ratio
0.2, entropy 0.001, response length 512, temperature 1.0 (train) / 0.4 (validation),
invalid-action penalty 0.1, validation every 5 steps, update threshold 0.4, 3 new skills at
most. The prompt (history length 2, top-6 general skills) is the run's own ``PromptConfig``.
Those are GPU-cluster budgets; :func:`smoke` returns the small CPU budget used by ``make run``,
the DAG and the tests (the default ``grpo:`` section of the run config). Names match TRL's ``GRPOConfig`` where the meaning is the same
(``num_generations``, ``beta``, ``epsilon``, ``learning_rate``, ``max_completion_length``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from pipeline.core.config import ConfigError, PromptConfig, build_flat
from pipeline.core.train_config import GRPO_SMOKE, GRPOConfig

__all__ = ["GRPOConfig", "smoke", "to_dict", "from_dict", "pop_prompt", "run_prompt_config"]


def smoke(**overrides: Any) -> GRPOConfig:
    """The CPU budget of ``make run`` and the tests: 2 steps of 1 task x 2 episodes x 3 actions,
    32 new tokens, a rank-8 LoRA update at lr 1e-4, one validation/evolution at step 2 on 2 dev
    games."""
    return from_dict({**GRPO_SMOKE, **overrides})


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

"""``skillpipe rl rollout`` and ``skillpipe rl grpo``: a typer sub-app (mounted on the main ``skillpipe`` CLI).

Copy-paste::

    # episodes of the embedded LLM in TextWorld Express -> Parquet + SkillRL txt tree, then parse them
    python -m sft.rl.cli rollout --games twc --tasks 4 --episodes-per-task 2 --out runs/tw/rollouts
    skillpipe run --input runs/tw/rollouts --run-id tw
    # a few GRPO steps on CPU (the `make run` budget), then resume to step 4
    python -m sft.rl.cli grpo --smoke --output-dir runs/tw/grpo
    python -m sft.rl.cli grpo --smoke --max-steps 4 --resume auto --output-dir runs/tw/grpo

Policies for ``rollout``: ``embedded`` (llama.cpp server on SmolLM2, started and stopped here),
``endpoint`` (``--base-url``/``--model``/``--api-key-env``: any OpenAI-compatible server), or a
local folder: an HF model, a LoRA adapter, or a GRPO checkpoint (its ``policy/``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from typing import Any, Optional

import typer

from pipeline.core.layout import CHECKPOINT_MANIFEST

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Environment rollouts and online GRPO.")


def _policy(policy: str, base_url: str, model: str, api_key_env: str, temperature: float, max_tokens: int,
            stack: contextlib.ExitStack, log_dir: str, noise: float = 0.0, seed: int = 0):
    from sft.rl.rollout import GoldPolicy, OpenAIPolicy
    if policy == "gold":
        return GoldPolicy(noise, seed)
    if noise:
        raise typer.BadParameter("--noise applies to --policy gold only", param_hint="--noise")
    if policy == "embedded":
        from pipeline.llm.provider import embedded_endpoint
        from pipeline.llm.server import EMBEDDED_MODEL_ALIAS
        # the embedded policy is the small SmolLM2 (the student's base model), not the teacher
        url, alias, mid = embedded_endpoint(stack, log_dir, EMBEDDED_MODEL_ALIAS)
        return OpenAIPolicy(url, alias, "", temperature, max_tokens, model_id=mid)
    if policy == "endpoint":
        if not base_url or not model:
            raise typer.BadParameter("--policy endpoint needs --base-url and --model")
        return OpenAIPolicy(base_url, model, api_key_env, temperature, max_tokens)
    folder = os.path.join(policy, "policy") if os.path.isfile(os.path.join(policy, CHECKPOINT_MANIFEST)) else policy
    if not os.path.isdir(folder):
        raise typer.BadParameter(f"--policy must be gold, embedded, endpoint or a model folder; {policy!r} is none")
    from sft.rl.policy import HFPolicy, load_model
    m, tok = load_model(folder)
    # recorded as the path given (a GRPO checkpoint), not its policy/ subfolder
    return HFPolicy(m, tok, max_tokens, temperature, 1.0, model_id=f"hf:{os.path.abspath(policy)}")


def collect_rollouts(out: str, root: str, run_id: str, env: str = "textworld", games: str = "twc", tasks: int = 4,
                     episodes_per_task: int = 2, fold: str = "train", seed0: int = 0, max_steps: int = 10,
                     policy: str = "embedded", base_url: str = "", model: str = "", api_key_env: str = "",
                     temperature: float = 0.4, max_tokens: int = 256, skill_bank: str = "", history_length: int = 2,
                     game_params: str = "", policy_obj: Any = None, noise: float = 0.0,
                     noise_seed: int = 0, replace_tree: bool = False, force: bool = False) -> dict[str, Any]:
    """Play ``tasks`` x ``episodes_per_task`` episodes; write the txt tree to ``out`` and the
    Parquet ``rollout`` artifact of ``run_id`` under ``root`` (:class:`sft.rl.rollout_io.RolloutStep`
    through :func:`pipeline.engine.steps.run_step`: the same settings, policy and bank with the tree
    still in ``out`` replay nothing, unless ``force``). Returns ``parquet`` (the artifact folder),
    ``txt_files`` (paths), ``skipped`` and the episode summary.
    ``policy_obj`` (any ``sft.rl.rollout.Policy``) overrides ``policy``; ``policy="gold"`` plays
    the engine's gold plan with ``noise`` (``sft.rl.rollout.GoldPolicy``, seeded by
    ``noise_seed``). ``replace_tree`` clears an earlier tree in ``out`` instead of refusing it.
    Raises ``pipeline.core.config.ConfigError`` for a bad env/games/count or an ``out`` that holds
    another tree, and ``EnvUnavailable`` for a missing ALFWorld, all before any policy or server starts."""
    from pipeline.engine.steps import run_step
    from sft.rl.rollout_io import RolloutConfig, RolloutStep, chosen_tasks

    cfg = RolloutConfig(env, games, tasks, episodes_per_task, fold, seed0, max_steps, policy, base_url, model,
                        api_key_env, temperature, max_tokens, skill_bank, history_length, game_params, noise,
                        noise_seed)
    chosen_tasks(cfg)  # a bad env or game: a usage error before the fingerprint reads the bank

    def open_policy(stack: contextlib.ExitStack) -> Any:
        return policy_obj or _policy(policy, base_url, model, api_key_env, temperature, max_tokens, stack, out,
                                     noise, noise_seed)
    step = RolloutStep(out, open_policy, _identity(policy, policy_obj), replace_tree)
    res = run_step(step, root, run_id, cfg, force=force, log=lambda m: None)
    return {"parquet": res["uri"], "txt_files": [os.path.join(out, f) for f in res["txt_files"]],
            "skipped": res["skipped"], **res["summary"]}


def _identity(policy: str, policy_obj: Any) -> dict[str, Any]:
    """What names a rollout policy in the fingerprint: a model folder by its weights' hashes."""
    if policy_obj is not None:
        return {"model_id": getattr(policy_obj, "model_id", type(policy_obj).__name__)}
    if policy in ("gold", "embedded", "endpoint") or not os.path.isdir(policy):
        return {"policy": policy}
    from sft.eval import model_policy
    return model_policy(policy)[2]


@app.command()
def rollout(
    out: str = typer.Option(..., "--out", "-o", help="folder for the SkillRL txt tree (envNNN/testK.txt)"),
    root: str = typer.Option(".", help="folder that holds runs/ (Parquet goes to runs/RUN_ID/rollout/)"),
    run_id: str = typer.Option("rollout", "--run-id", help="run id of the Parquet artifact"),
    env: str = typer.Option("textworld", help="textworld | alfworld (needs the package and ALFWORLD_DATA)"),
    games: str = typer.Option("twc", help="comma-separated TextWorld Express games (twc, cookingworld, ...)"),
    tasks: int = typer.Option(4, min=1, help="distinct games (seeds) to play"),
    episodes_per_task: int = typer.Option(2, min=1, help="episodes per game (files test1..testK)"),
    fold: str = typer.Option("train", help="train | dev: which fold's seeds"),
    max_steps: int = typer.Option(10, min=1, help="actions per episode at most"),
    policy: str = typer.Option("embedded", help="gold (TextWorld Express's gold plan, no model) | embedded | endpoint "
                                                "| a local model/adapter/GRPO checkpoint folder"),
    noise: float = typer.Option(0.0, min=0.0, max=1.0, help="with --policy gold: probability of an admissible wrong "
                                                             "action per step (then undone when it can be), giving "
                                                             "failures and recoveries"),
    seed: int = typer.Option(0, help="with --policy gold: seed of the injected noise"),
    seed0: int = typer.Option(0, min=0, help="first seed of the fold (TextWorld: seeds seed0..seed0+tasks-1)"),
    base_url: str = typer.Option("", help="endpoint URL for --policy endpoint"),
    model: str = typer.Option("", help="model name for --policy endpoint"),
    api_key_env: str = typer.Option("", help="env var holding the endpoint's API key"),
    temperature: float = typer.Option(0.4, min=0.0, help="sampling temperature (SkillRL's validation value)"),
    max_tokens: int = typer.Option(256, min=1, help="max new tokens per action"),
    skill_bank: str = typer.Option("", help="SkillRL bank JSON whose skills condition the prompts"),
    history_length: int = typer.Option(2, min=0, help="history window of the prompt (same as SFT)"),
    game_params: str = typer.Option("", help="TextWorld Express gameParams ('' = small per-game defaults)"),
):
    """Run a policy in an environment; write Parquet trajectories and a SkillRL txt tree.

    `--policy gold` needs no model: it plays TextWorld Express's gold plan (`--noise RATE` injects
    admissible wrong actions), e.g. `skillpipe rl rollout --policy gold --games coin --tasks 20
    --noise 0.2 --out traces/`, then `skillpipe run --input traces/ --env textworld`.
    """
    from pipeline.core.config import ConfigError
    from pipeline.envs.sim.alfworld import EnvUnavailable
    if fold not in ("train", "dev"):
        raise typer.BadParameter(f"must be train or dev, got {fold!r}", param_hint="--fold")
    try:
        res = collect_rollouts(out, root, run_id, env, games, tasks, episodes_per_task, fold, seed0, max_steps, policy,
                               base_url, model, api_key_env, temperature, max_tokens, skill_bank, history_length,
                               game_params, noise=noise, noise_seed=seed)
    except ConfigError as e:  # bad --env / --games: a usage error, raised before anything starts
        raise typer.BadParameter(str(e))
    except EnvUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)
    res["txt_files"] = len(res["txt_files"])
    typer.echo(json.dumps(res, indent=2))


def _config_file(config: str) -> dict[str, Any]:
    """The mapping of GRPOConfig fields in the YAML file ``config``; a ``typer.BadParameter``
    (a usage error) when it cannot be read, is not YAML or is not a mapping."""
    import yaml
    try:
        with open(config, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except OSError as e:
        raise typer.BadParameter(f"cannot read {config}: {e.strerror or e}", param_hint="--config")
    except yaml.YAMLError as e:
        raise typer.BadParameter(f"{config}: not valid YAML: {e}".replace("\n", " "), param_hint="--config")
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{config}: expected a mapping of GRPOConfig fields, got {type(data).__name__}",
                                 param_hint="--config")
    return data


def is_run_config(data: dict[str, Any]) -> bool:
    """Whether the mapping of a ``--config`` file is a run config (the file of ``skillpipe run
    --config``, with a ``grpo:`` section) rather than flat GRPOConfig fields: it names a run
    config section other than ``prompt`` (which both forms may have)."""
    from pipeline.core.config import PipelineConfig
    sections = {f.name for f in dataclasses.fields(PipelineConfig)} - {"prompt"}
    return bool(sections & set(map(str, data)))


def _grpo_config(config: Optional[str], data: dict[str, Any], smoke: bool, run_id: Optional[str],
                 overrides: dict[str, Any]):
    """The GRPOConfig of ``skillpipe rl grpo``: the ``grpo:`` section of a run config file (as the
    DAG task reads it), or flat fields (with ``--smoke``, or ``--run-id`` and no file: over the
    CPU budget), then the options; a bad value is a usage error."""
    from sft.rl.config import from_dict
    from sft.rl.config import smoke as smoke_cfg
    if config and is_run_config(data):
        from sft.cli import run_config_section
        return run_config_section(config, "grpo", overrides)
    try:
        # --run-id without --config: the small CPU budget (the `make run` step, the run config's default)
        return smoke_cfg(**{**data, **overrides}) if smoke or (run_id and not data) \
            else from_dict({**data, **overrides})
    except (ValueError, TypeError) as e:  # ConfigError: unknown key, wrong type, out of range
        raise typer.BadParameter(str(e))


@app.command()
def grpo(
    config: Optional[str] = typer.Option(None, "--config", "-c", help="run config YAML (its grpo: section, as "
                                         "the DAG reads it) or a YAML of flat GRPOConfig fields"),
    smoke: bool = typer.Option(False, help="start flat fields from the small CPU budget (sft.rl.config.smoke; "
                                           "a run config's grpo: section already does)"),
    output_dir: Optional[str] = typer.Option(None, help="override output_dir"),
    max_steps: Optional[int] = typer.Option(None, help="override max_steps"),
    model: Optional[str] = typer.Option(None, help="override model (HF folder / LoRA adapter)"),
    skill_bank: Optional[str] = typer.Option(None, help="override skill_bank (SkillRL JSON)"),
    resume: Optional[str] = typer.Option(None, help="'' | auto | a checkpoint folder"),
    llm_base_url: Optional[str] = typer.Option(None, help="skill updater endpoint ('' = embedded server)"),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="start from this pipeline run's SFT checkpoint "
                                         "and skill bank; output to runs/RUN_ID/grpo (the `make run` step)"),
    root: str = typer.Option(".", help="folder that holds runs/ (with --run-id)"),
    force: bool = typer.Option(False, help="with --run-id: rerun even when inputs and config are unchanged"),
):
    """Online GRPO on TextWorld Express (or ALFWorld) with skill-bank evolution.

    Needs --run-id (start from that run's SFT checkpoint and bank) or an output folder
    (--output-dir, or output_dir in a flat --config): a bare `grpo` must not start a full default run.
    """
    from sft.rl.grpo import train
    from sft.rl.step import record_standalone

    data = _config_file(config) if config else {}
    flat = not is_run_config(data)
    if run_id:
        clash = [f"--{k.replace('_', '-')}" for k, v in dict(output_dir=output_dir, model=model,
                                                             skill_bank=skill_bank).items() if v is not None]
        from sft.rl.config import LEGACY_PROMPT_KEYS
        clash += [f"{k} (in --config)" for k in ("prompt", *LEGACY_PROMPT_KEYS) if flat and k in data]
        if clash:  # grpo_for_run sets these from the run; silently dropping them would mislead
            raise typer.BadParameter(f"{', '.join(clash)} cannot be combined with --run-id (the run's "
                                     "SFT checkpoint, skill bank, prompt config and runs/RUN_ID/grpo are used)")
    elif not (output_dir or (flat and data.get("output_dir"))):
        raise typer.BadParameter("give --run-id (continue a pipeline run) or --output-dir (a standalone run)")
    overrides = {k: v for k, v in dict(output_dir=output_dir, max_steps=max_steps, model=model,
                                       skill_bank=skill_bank, resume=resume, llm_base_url=llm_base_url).items()
                 if v is not None}
    cfg = _grpo_config(config, data, smoke, run_id, overrides)
    if run_id:
        from pipeline.core.artifacts import ArtifactError
        from sft.rl.step import grpo_for_run
        try:
            m = grpo_for_run(root, run_id, cfg, force=force, log=typer.echo)
        except (FileNotFoundError, ValueError, ArtifactError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1)
        typer.echo(json.dumps({k: m[k] for k in ("uri", "steps", "checkpoint", "bank_version", "log", "skipped")}))
        return
    typer.echo(json.dumps(record_standalone(cfg.output_dir, train(cfg)), indent=2))


if __name__ == "__main__":  # pragma: no cover
    app()

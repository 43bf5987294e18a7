"""Online GRPO with skills: environment rollouts, group-relative updates, skill-bank evolution.

Usage (the DAG task ``grpo`` and ``make run`` call :func:`train`)::

    python -m sft.rl.cli grpo --smoke --output-dir runs/demo/grpo --skill-bank <export>/skill_bank.json

One step (SkillRL's scheme, with the fixes D-R1..D-R4 of docs/reference_defects.md):

1. pick ``tasks_per_step`` training games (seeded by step, so a resumed run sees the same ones);
2. play ``num_generations`` episodes of each (``sft.rl.rollout.run_episodes`` with
   ``sft.rl.policy.HFPolicy``): every prompt is rendered by the SFT renderer, skills at every step;
   the slots are interleaved (task 0, task 1, ..., task 0, ...), and advantages are still exact
   because groups are keyed by id (``sft.rl.loss.group_advantages``);
3. one policy-gradient update over every step sample (``sft.rl.loss.policy_loss``, KL to a
   frozen copy of the starting policy) with ``torch.optim.AdamW``; log-probabilities and
   entropies by TRL's ``selective_log_softmax`` / ``entropy_from_logits``;
4. every ``eval_steps``: validate on dev games, evolve the bank (``sft.rl.evolution``);
5. every ``save_steps`` and at the end: a coupled checkpoint (``sft.rl.checkpoint``).

``lora_r > 0`` trains a new PEFT LoRA adapter on the starting policy instead of all weights (an
SFT LoRA adapter is merged into its base first): the KL reference is then the same model with
the adapter switched off, and a checkpoint's ``policy/`` holds only the adapter (a few MB
instead of the full model). ``make run`` uses it (``smoke()``); the default, 0, is SkillRL's
full-weight update.

Why not ``trl.GRPOTrainer``: its ``environment_factory`` runs a multi-turn *tool-calling*
conversation in one growing sequence, and ``rollout_func`` returns one completion per prompt
grouped by batch position; SkillRL's scheme re-renders a fresh prompt (history window + skills)
at every step and has a variable number of step samples per episode. So the rollout and
grouping are ours, and the update is built from TRL/transformers/torch parts.

Outputs in ``output_dir``: ``grpo_log.jsonl`` (one line per step: per-group rewards and
advantages, KL, loss; one line per validation), ``checkpoints/step-N/``, ``banks/<version>.json``,
``grpo_manifest.json`` (final checkpoint, bank version, summary; written by the recorder once the
run is over).
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import random
import time
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.config import LLMConfig
from pipeline.core.layout import GRPO_LOG, GRPO_MANIFEST
from pipeline.progress import bar as progress_bar
from sft.rl.rollout import Episode, episode_summary, run_episodes

from sft.rl import checkpoint as ckpt
from sft.rl.config import GRPOConfig, to_dict
from sft.rl.loss import episode_reward, group_advantages, policy_loss
from pipeline.bank.evolving import SkillBank
from sft.rl.evolution import evolve

__all__ = ["train", "group_advantages", "episode_reward"]


def make_envs(cfg: GRPOConfig, n: int) -> list[Any]:
    """``n`` environment engines of ``cfg.env`` (raises ``EnvUnavailable`` for a missing ALFWorld)."""
    if cfg.env == "textworld":
        from pipeline.envs.sim.textworld import TextWorldExpressEnv
        return [TextWorldExpressEnv(step_limit=max(cfg.max_env_steps * 2, 10)) for _ in range(n)]
    if cfg.env == "alfworld":
        from pipeline.envs.sim.alfworld import AlfWorldEnv
        return [AlfWorldEnv(step_limit=cfg.max_env_steps) for _ in range(n)]
    raise ValueError(f"unknown env {cfg.env!r}: textworld | alfworld")


def make_task_lists(cfg: GRPOConfig) -> tuple[list[Any], list[Any]]:
    """(training tasks, validation tasks): TextWorld train/dev folds, or ALFWorld train/valid_seen."""
    if cfg.env == "alfworld":
        from pipeline.envs.sim.alfworld import list_tasks
        return list_tasks("train", cfg.train_seeds), list_tasks("valid_seen", cfg.val_tasks)
    from pipeline.envs.sim.textworld import make_tasks
    return (make_tasks(list(cfg.games), cfg.train_seeds, "train", 0, cfg.game_params),
            make_tasks(list(cfg.games), cfg.val_tasks, "dev", 0, cfg.game_params))


def _batch(samples: list[tuple], pad_id: int):
    """Left-pad prompts, right-pad completions (TRL's layout); returns tensors for one micro-batch."""
    import torch
    P = max(len(s[0]) for s in samples)
    C = max(len(s[1]) for s in samples)
    ids, att, cmask = [], [], []
    for p, c, _ in samples:
        ids.append([pad_id] * (P - len(p)) + p + c + [pad_id] * (C - len(c)))
        att.append([0] * (P - len(p)) + [1] * (len(p) + len(c)) + [0] * (C - len(c)))
        cmask.append([1] * len(c) + [0] * (C - len(c)))
    ids, att = torch.tensor(ids), torch.tensor(att)
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    return ids, att, pos, torch.tensor(cmask), torch.tensor([s[2] for s in samples], dtype=torch.float32), C


def _token_logps(model, ids, att, pos, C: int, temperature: float, with_entropy: bool):
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax
    logits = model(input_ids=ids, attention_mask=att, position_ids=pos, logits_to_keep=C + 1).logits[:, :-1, :]
    logits = logits / max(temperature, 1e-6)
    logps = selective_log_softmax(logits, ids[:, -C:])
    return logps, (entropy_from_logits(logits) if with_entropy else None)


def _reference_logps(model, ref_model, ids, att, pos, C: int, temperature: float):
    """Log-probabilities under the KL reference: ``ref_model``, or, when it is ``None`` (a LoRA
    run), ``model`` itself with its adapter switched off (= the starting policy)."""
    import torch
    with torch.no_grad():
        if ref_model is not None:
            return _token_logps(ref_model, ids, att, pos, C, temperature, False)[0]
        with model.disable_adapter():
            return _token_logps(model, ids, att, pos, C, temperature, False)[0]


def update(model, ref_model, optimizer, episodes: list[Episode], advantages: list[float], cfg: GRPOConfig,
           pad_id: int) -> dict[str, float]:
    """One optimizer step over every step sample of ``episodes`` (advantage per episode).

    Token-mean over the whole step: each micro-batch loss is divided by the step's total number
    of completion tokens, so accumulated gradients equal one big batch's.
    """
    import torch
    samples = [(s.completion.prompt_ids, s.completion.completion_ids, a)
               for e, a in zip(episodes, advantages) for s in e.samples if s.completion.completion_ids]
    n_tokens = sum(len(s[1]) for s in samples)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss_sum, kl_sum, clipped = 0.0, 0.0, 0.0
    for i in range(0, len(samples), max(1, cfg.micro_batch_size)):
        ids, att, pos, cmask, adv, C = _batch(samples[i:i + cfg.micro_batch_size], pad_id)
        logps, ent = _token_logps(model, ids, att, pos, C, cfg.temperature, cfg.entropy_coeff > 0)
        ref = _reference_logps(model, ref_model, ids, att, pos, C, cfg.temperature) if cfg.beta > 0 else None
        loss, m = policy_loss(logps, logps.detach(), ref, adv, cmask, cfg.beta, cfg.epsilon, ent,
                              cfg.entropy_coeff, n_tokens)
        loss.backward()
        loss_sum += float(loss.detach())
        kl_sum += m["kl_sum"]
        clipped += m["clipped"]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)) if samples else 0.0
    if samples:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"loss": loss_sum, "kl": kl_sum / max(n_tokens, 1), "clip_fraction": clipped / max(n_tokens, 1),
            "grad_norm": grad_norm, "samples": len(samples), "tokens": n_tokens}


def _groups_log(episodes: list[Episode], rewards: list[float], stats) -> list[dict[str, Any]]:
    out = []
    for g in stats.values():
        eps = [episodes[i] for i in g.indices]
        out.append({"group_id": g.group_id, "task": eps[0].trajectory.env_instance, "category": eps[0].trajectory.category,
                    "rewards": g.rewards, "advantages": g.advantages, "won": [e.won for e in eps],
                    "invalid_steps": [e.n_invalid for e in eps], "actions": [len(e.samples) for e in eps],
                    "mean": g.mean, "std": g.std, "no_signal": g.no_signal})
    return out


class _Log:
    def __init__(self, path: str):
        self.path = path

    def write(self, entry: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n")


def _updater(cfg: GRPOConfig, stack: contextlib.ExitStack):
    """The skill-updater LLM client, opened as the data stages open theirs
    (:func:`pipeline.llm.provider.llm_factory`): the same default teacher, started as an embedded
    server when no URL is set, the same ``llm`` settings and limits, a response cache in the
    output folder."""
    from pipeline.llm.provider import llm_factory
    llm = LLMConfig(base_url=cfg.llm_base_url, model=cfg.llm_model, api_key_env=cfg.llm_api_key_env)
    return llm_factory(llm, cfg.output_dir, stack)()


def starting_policy(cfg: GRPOConfig) -> str:
    """Folder of the starting policy: ``cfg.model`` (an HF folder or a LoRA adapter folder, e.g.
    the SFT output) or the embedded SmolLM2 converted by ``sft.base_model.ensure_base_model``."""
    from sft.base_model import ensure_base_model
    if cfg.model and os.path.isfile(os.path.join(cfg.model, "adapter_config.json")):
        return cfg.model
    return str(ensure_base_model(cfg.model, cfg.model_cache_dir))


def _with_adapter(model, cfg: GRPOConfig, saved: str | None):
    """``model`` wrapped in a trainable PEFT LoRA adapter: a new one (rank ``cfg.lora_r``), or the
    one saved in the checkpoint folder ``saved`` when resuming."""
    from peft import LoraConfig, PeftModel, get_peft_model
    if saved:
        return PeftModel.from_pretrained(model, saved, is_trainable=True)
    targets = cfg.lora_target_modules
    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, task_type="CAUSAL_LM",
                      target_modules=targets if targets == "all-linear" else [t.strip() for t in targets.split(",")])
    return get_peft_model(model, lora)


#: What :func:`train` writes into ``output_dir`` (removed before a fresh, non-resumed run, so
#: a stale log or a later-step checkpoint of an earlier run can neither mix in nor be resumed).
OUTPUTS = (GRPO_LOG, GRPO_MANIFEST, "checkpoints", "banks")


def _clear_outputs(output_dir: str) -> None:
    import shutil
    for name in OUTPUTS:
        p = os.path.join(output_dir, name)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)


@dataclass
class _Run:
    """What the steps of one GRPO run share (built by :func:`_start`)."""
    cfg: GRPOConfig
    model: Any
    tok: Any
    ref_model: Any
    optimizer: Any
    bank: SkillBank
    log: _Log
    start_step: int
    start_dir: str
    model_dir: str
    resume_from: str | None
    policy: Any = None
    val_policy: Any = None
    recent_train: list[Episode] = field(default_factory=list)
    usefulness_gate: Any = None  # the skill updater's usefulness gate (opened on first use)
    client: Any = None


def _load_policy(cfg: GRPOConfig, start_dir: str, resume_from: str | None):
    """``(model, tokenizer, KL reference or None)``: a LoRA adapter on the starting policy
    (reference = adapter off), or full weights with a frozen copy of the starting policy."""
    import copy

    from sft.rl.policy import load_model
    if cfg.lora_r > 0:
        model, tok = load_model(start_dir)
        return _with_adapter(model, cfg, os.path.join(resume_from, "policy") if resume_from else None), tok, None
    model, tok = load_model(os.path.join(resume_from, "policy") if resume_from else start_dir)
    ref_model = None
    if cfg.beta > 0:  # reference = a frozen copy of the starting policy, also after a resume
        ref_model = load_model(start_dir)[0] if resume_from else copy.deepcopy(model)
        ref_model.eval().requires_grad_(False)
    return model, tok, ref_model


def _start(cfg: GRPOConfig) -> _Run:
    """Prepare ``output_dir`` (a fresh run replaces earlier outputs), seed, load the policy, the
    optimizer and the bank, restoring them from the checkpoint to resume."""
    import torch

    from sft.rl.policy import HFPolicy

    os.makedirs(cfg.output_dir, exist_ok=True)
    resume_from = ckpt.resolve(cfg.resume, cfg.output_dir)
    if resume_from is None:  # a fresh run replaces an earlier run's outputs, never appends to them
        _clear_outputs(cfg.output_dir)
    os.makedirs(os.path.join(cfg.output_dir, "banks"), exist_ok=True)
    if cfg.torch_threads > 0:
        torch.set_num_threads(cfg.torch_threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    start_dir = starting_policy(cfg)
    model, tok, ref_model = _load_policy(cfg, start_dir, resume_from)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.learning_rate,
                                  weight_decay=cfg.weight_decay)
    start, bank = 0, SkillBank.load(cfg.skill_bank, cfg.env, cfg.skill_bank_env)
    if resume_from:
        state = ckpt.restore_state(resume_from, optimizer)
        start, bank = state["step"], state["bank"]
    model_dir = os.path.join(resume_from, "policy") if resume_from else start_dir
    run = _Run(cfg, model, tok, ref_model, optimizer, bank, _Log(os.path.join(cfg.output_dir, GRPO_LOG)),
               start, start_dir, model_dir, resume_from)
    model_id = f"grpo:{os.path.basename(os.path.normpath(model_dir))}"
    run.policy = HFPolicy(model, tok, cfg.max_completion_length, cfg.temperature, cfg.top_p, model_id)
    run.val_policy = HFPolicy(model, tok, cfg.max_completion_length, cfg.val_temperature, 1.0, model_id)
    return run


def _train_step(run: _Run, step: int, envs: list[Any], train_tasks: list[Any]) -> tuple[dict[str, float], list]:
    """Roll out the step's groups, update the policy once, log the step; returns ``(metrics, episodes)``."""
    cfg, n_slots, t0 = run.cfg, slots_per_step(run.cfg), time.monotonic()
    chosen = random.Random(cfg.seed * 100_003 + step).sample(train_tasks, min(cfg.tasks_per_step, len(train_tasks)))
    slots = [t for _ in range(cfg.num_generations) for t in chosen]  # interleaved groups
    gids = [f"s{step}:{t.instance}" for t in slots]
    eps = run_episodes(envs[:len(slots)], slots, gids, run.policy, run.bank.rows, cfg.prompt, cfg.max_env_steps,
                       cfg.env, record_offset=step * n_slots, bank_version=run.bank.version)
    t_roll = time.monotonic() - t0
    rewards = [episode_reward(e.won, e.score, e.n_invalid, cfg.reward, cfg.invalid_action_penalty) for e in eps]
    adv, stats = group_advantages(rewards, gids, cfg.scale_rewards, cfg.adv_epsilon)
    metrics = update(run.model, run.ref_model, run.optimizer, eps, adv, cfg, run.tok.pad_token_id)
    run.recent_train = (run.recent_train + eps)[-4 * n_slots:]
    run.log.write({"kind": "train", "step": step, "bank_version": run.bank.version, **metrics,
                   "no_signal_groups": sum(g.no_signal for g in stats.values()),
                   "groups": _groups_log(eps, rewards, stats), **episode_summary(eps),
                   "rollout_s": round(t_roll, 2), "wall_s": round(time.monotonic() - t0, 2)})
    return metrics, eps


def slots_per_step(cfg: GRPOConfig) -> int:
    """Episodes played at once in a training step: ``tasks_per_step * num_generations``."""
    return cfg.tasks_per_step * cfg.num_generations


def _usefulness_gate(run: _Run, cfg: GRPOConfig):
    """The usefulness gate of the skills the updater adds (``skill_usefulness``), opened once per run;
    ``None`` when it is off."""
    if cfg.skill_usefulness == "off":
        return None
    if run.usefulness_gate is None:
        from pipeline.usefulness.gate import evolution_gate
        run.usefulness_gate = evolution_gate(cfg.skill_usefulness, cfg.prompt)
    return run.usefulness_gate


def _validate(run: _Run, step: int, envs: list[Any], val_tasks: list[Any], stack: contextlib.ExitStack) -> None:
    """Play the validation games, evolve the bank when configured (saving a changed one under
    ``banks/``) and log the validation."""
    cfg, n_slots, val = run.cfg, slots_per_step(run.cfg), []
    for i in range(0, len(val_tasks), n_slots):
        chunk = val_tasks[i:i + n_slots]
        val += run_episodes(envs[:len(chunk)], chunk, [f"val{step}:{t.instance}" for t in chunk], run.val_policy,
                            run.bank.rows, cfg.prompt, cfg.max_env_steps, cfg.env, bank_version=run.bank.version)
    entry = {"kind": "validation", "step": step, "bank_version": run.bank.version, **episode_summary(val)}
    if cfg.evolve_skills:
        run.client = run.client or _updater(cfg, stack)
        res = evolve(run.bank, val, run.recent_train, run.client, cfg, step, gate=_usefulness_gate(run, cfg))
        entry["evolution"] = res.record
        for line in [f"[grpo] step {step}: skill bank {res.record['parent_version']} -> {res.record['version']}"
                     if res.record["diff"] else f"[grpo] step {step}: skill bank unchanged", *res.record["diff"]]:
            print(line, file=sys.stderr, flush=True)
        if res.changed:
            run.bank = res.bank
            run.bank.save(os.path.join(cfg.output_dir, "banks", f"{run.bank.version}.json"))
    run.log.write(entry)


def _loop(run: _Run) -> tuple[int, str | None]:
    """Steps ``start_step + 1 .. max_steps`` with validation and checkpoints; returns
    ``(last step, last checkpoint folder or None)``."""
    cfg, last_ckpt, step = run.cfg, run.resume_from, run.start_step
    train_tasks, val_tasks = make_task_lists(cfg)
    with contextlib.ExitStack() as stack:
        envs = make_envs(cfg, slots_per_step(cfg))
        for e in envs:
            stack.callback(e.close)
        # one line per step in a log (log_interval_s=0): a GRPO step takes seconds to minutes
        steps = stack.enter_context(progress_bar(cfg.max_steps - run.start_step, "grpo", unit="step",
                                                 log_interval_s=0))
        for step in range(run.start_step + 1, cfg.max_steps + 1):
            metrics, eps = _train_step(run, step, envs, train_tasks)
            steps.set_postfix(loss=f"{metrics['loss']:.4f}", kl=f"{metrics['kl']:.5f}",
                              won=f"{sum(e.won for e in eps)}/{len(eps)}", refresh=False)
            steps.update(1)
            if cfg.eval_steps and step % cfg.eval_steps == 0:
                _validate(run, step, envs, val_tasks, stack)
            if (cfg.save_steps and step % cfg.save_steps == 0) or step == cfg.max_steps:
                last_ckpt = ckpt.save(cfg.output_dir, step, run.model, run.tok, run.optimizer, run.bank,
                                      to_dict(cfg), {"base_model": os.path.abspath(run.start_dir)})
    return step, last_ckpt


def train(cfg: GRPOConfig) -> dict[str, Any]:
    """Run (or resume) GRPO as configured; returns the summary, which the caller records as
    ``grpo_manifest.json`` (the ``grpo`` step of a run, with its fingerprint, or ``skillpipe rl
    grpo --output-dir``: :func:`pipeline.core.recorder.record` of :func:`sft.rl.step.grpo_output`):
    ``output_dir``, ``steps`` (last step), ``started_at_step``, ``checkpoint`` (last checkpoint
    folder), ``bank_version``, ``bank_file`` (the bank of that checkpoint), ``log``, ``wall_s``, ``model``.

    Raises ``FileNotFoundError`` (model/bank/checkpoint missing), ``EnvUnavailable`` (ALFWorld
    without data), ``ValueError`` (bad config).
    """
    t_start = time.monotonic()
    run = _start(cfg)
    step, last_ckpt = _loop(run)
    summary = {"output_dir": cfg.output_dir, "steps": step, "started_at_step": run.start_step,
               "checkpoint": last_ckpt, "bank_version": run.bank.version,
               "bank_file": os.path.join(last_ckpt, "skill_bank.json") if last_ckpt else "",
               "log": run.log.path, "wall_s": round(time.monotonic() - t_start, 1), "model": run.model_dir}
    return summary

"""Outcome experiment: does SFT on the data skillpipe produces make a better agent than the base model?

    .venv/bin/python bench/outcome.py                 # CPU budget below, <= 60 min on 2 cores
    .venv/bin/python bench/outcome.py --grpo          # also a few GRPO steps from the SFT checkpoint
    make outcome

Steps (all real components, nothing stubbed):

1. expert traces: ``skillpipe rl rollout --policy gold --noise NOISE`` on ``--train-tasks`` seeds of
   the TextWorld Express *train* fold (real engine observations; no model, no API key);
2. the data pipeline on that tree with the embedded LLM (SmolLM2-135M-Instruct via llama.cpp):
   parse -> remove_loops -> verify -> split -> memory -> skills -> distill -> build_pairs -> export;
2b. the action-only control (``--no-baseline`` skips it): the same trajectories, memories and
   skill bank, distill with ``distill.reasoning=none`` (every think empty, no LLM call), then
   build_pairs/export and SFT as in steps 2-3 under run id ``<run-id>-actions``. It separates
   what SFT on the expert actions gives from what the distilled reasoning adds;
3. SFT (TRL ``SFTTrainer``, LoRA) of the base model on each export that has pairs;
4. ``skillpipe eval`` of the base model and of the SFT checkpoints (and of GRPO with ``--grpo``)
   on ``--eval-episodes`` seeds of the *dev* fold starting at ``--eval-seed0`` (no training data
   came from there: training used the train fold, and GRPO validates on dev seeds below 100),
   greedy decoding, the same prompts as SFT (``pipeline.prompts``).

It prints success rates with 95 % Wilson intervals per game, whether base and SFT intervals are
disjoint, the export's data-quality metrics when its manifest has them, and the wall time of
each step. The last line is ``outcome: ...`` with the SFT - base difference.

CPU budget (defaults; the whole run fits in 60 min on 2 shared cores): game ``coin`` with two
rooms, no doors and no distractors (gold plans ``look around, take coin`` or ``look around,
move <dir>, take coin``; the simplest TextWorld Express game), 40 training games at noise 0.1
(20 distinct trajectories after parse's duplicate check; LLM calls capped at 400 completion
tokens), SFT 60 steps of batch 2 at lr 5e-4 (cosine, rank-16 LoRA), 30 evaluation games per
policy of at most 4 actions and 64 new tokens, one torch thread. Measured 2026-12-02 at load
average 1-5 (other sessions on the 2 cores): rollouts 6 s, memory 502 s, distill 246-575 s,
base eval 466 s, SFT 955 s, SFT eval 192 s: about 40 min with the action-only control (when the
distilled export has pairs, add one SFT and one eval: about 20 min more).
``--quick`` shrinks every budget (a smoke run of a few minutes).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: Keys of the export manifest (or its counters) that may hold data-quality metrics.
QUALITY_KEYS = ("quality_metrics", "data_quality", "quality", "metrics")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help keeps the module docstring's layout and shows each option's default."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's options (``--help``)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("--root", default=os.path.join(ROOT, "runs", "outcome_root"), help="folder for runs/ and traces")
    p.add_argument("--run-id", default="outcome", help="run id of the distilled data (the control: <run-id>-actions)")
    p.add_argument("--game", default="coin", help="TextWorld Express game for training and evaluation")
    p.add_argument("--game-params", default="numLocations=2,numDistractorItems=0,includeDoors=0,limitInventorySize=0",
                   help="TextWorld Express game parameters")
    p.add_argument("--train-tasks", type=int, default=40, help="training games (train fold seeds 0..N-1)")
    p.add_argument("--noise", type=float, default=0.1, help="gold policy noise rate")
    p.add_argument("--rollout-max-steps", type=int, default=12, help="actions per expert rollout")
    p.add_argument("--sft-steps", type=int, default=60, help="SFT optimizer steps")
    p.add_argument("--sft-batch", type=int, default=2, help="SFT pairs per step")
    p.add_argument("--sft-lr", type=float, default=5e-4, help="SFT peak learning rate (cosine schedule)")
    p.add_argument("--lora-r", type=int, default=16, help="LoRA rank (alpha = 2 x rank)")
    p.add_argument("--eval-episodes", type=int, default=30, help="held-out games per policy")
    p.add_argument("--eval-seed0", type=int, default=100, help="first dev-fold seed of the evaluation")
    p.add_argument("--eval-max-steps", type=int, default=4, help="actions per evaluation game")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens the policy may generate per action")
    p.add_argument("--eval-batch", type=int, default=20, help="evaluation games played in lock-step")
    p.add_argument("--llm-max-tokens", type=int, default=400, help="completion budget of each data-pipeline LLM call")
    p.add_argument("--grpo", action="store_true", help="also GRPO from the SFT checkpoint, then evaluate it")
    p.add_argument("--grpo-steps", type=int, default=4, help="GRPO steps with --grpo")
    p.add_argument("--llm-base-url", default="", help="data pipeline endpoint ('' = embedded llama.cpp server)")
    p.add_argument("--llm-model", default="", help="model name at --llm-base-url")
    p.add_argument("--base-model", default="", help="HF model folder to fine-tune ('' = embedded SmolLM2-135M)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch default; 1 is fastest on "
                                                          "shared cores, see GRPOConfig.torch_threads)")
    p.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True,
                   help="also train and evaluate the action-only control (SFT on the same trajectories with "
                        "empty thinks)")
    p.add_argument("--quick", action="store_true", help="tiny budgets: a smoke run of a few minutes")
    a = p.parse_args(argv)
    if a.quick:
        a.train_tasks, a.sft_steps, a.sft_batch, a.eval_episodes, a.eval_max_steps = 4, 2, 1, 2, 2
        a.max_new_tokens, a.grpo_steps = 24, 1
    return a


class Timer:
    """Wall seconds per named phase, printed at the end."""

    def __init__(self):
        self.phases: list[tuple[str, float]] = []

    def run(self, name: str, fn, *args, **kwargs):
        t0 = time.monotonic()
        print(f"--- {name} ...", flush=True)
        out = fn(*args, **kwargs)
        self.phases.append((name, time.monotonic() - t0))
        print(f"--- {name}: {self.phases[-1][1]:.0f} s", flush=True)
        return out


def rollouts(a: argparse.Namespace) -> dict:
    """Step 1: gold/noisy expert traces of the train fold as a SkillRL txt tree."""
    from pipeline.core.artifacts import ArtifactStore
    from sft.rl.cli import collect_rollouts
    prev = ArtifactStore(a.root, f"{a.run_id}-traces").load("rollout")
    if prev is not None and os.path.isdir(os.path.join(a.root, "traces", a.run_id)) and prev.manifest.get("args") == _roll_args(a):
        print("    reusing the traces of an earlier run with the same arguments (multi-room gold plans vary by JVM, "
              "so a replay could change the data and rerun every stage)", flush=True)
        return prev.manifest["summary"]
    shutil.rmtree(os.path.join(a.root, "traces", a.run_id), ignore_errors=True)  # no stale files of a bigger run
    res = collect_rollouts(os.path.join(a.root, "traces", a.run_id), a.root, f"{a.run_id}-traces", games=a.game,
                            tasks=a.train_tasks, episodes_per_task=1, fold="train", max_steps=a.rollout_max_steps,
                            policy="gold", game_params=a.game_params, noise=a.noise, noise_seed=0)
    art = ArtifactStore(a.root, f"{a.run_id}-traces").load("rollout")
    with open(os.path.join(art.path, "_manifest.json"), "w", encoding="utf-8") as f:
        json.dump(dict(art.manifest, args=_roll_args(a)), f, indent=2)
    return res


def _roll_args(a: argparse.Namespace) -> dict:
    return {k: getattr(a, k) for k in ("game", "game_params", "train_tasks", "noise", "rollout_max_steps")}


def pipeline(a: argparse.Namespace) -> list:
    """Step 2: the seven data stages with the embedded LLM (or ``--llm-base-url``)."""
    from pipeline.core.config import PipelineConfig
    from pipeline.core.runner import run_pipeline
    cfg = PipelineConfig()
    cfg.llm.max_tokens = a.llm_max_tokens
    # a greedy local model's failed answers only repeat on a rerun: record them and move on, so a
    # second outcome run with the same arguments skips every finished step (measured: it reran memory)
    cfg.llm.retry_failed = False
    if a.llm_base_url:
        cfg.llm.base_url, cfg.llm.model = a.llm_base_url, a.llm_model
    return run_pipeline(a.root, a.run_id, os.path.join(a.root, "traces", a.run_id), cfg, env="textworld",
                        log=lambda m: print(m, flush=True))


#: Artifacts the action-only control shares with the main run (copied, so its fingerprints match).
SHARED_STAGES = ("_plan", "parse", "remove_loops", "verify", "split", "memory", "skills")


def actions_baseline(a: argparse.Namespace) -> list:
    """Step 2b: the action-only control under run id ``<run-id>-actions``: the main run's
    artifacts up to the skill bank, then distill with empty thinks (``distill.reasoning=none``),
    build_pairs (``empty_think=flag``) and export. No LLM call."""
    from pipeline.core.config import PipelineConfig
    from pipeline.core.runner import run_pipeline
    src, dst = (os.path.join(a.root, "runs", r) for r in (a.run_id, f"{a.run_id}-actions"))
    for stage in SHARED_STAGES:
        shutil.rmtree(os.path.join(dst, stage), ignore_errors=True)
        if os.path.exists(os.path.join(src, stage)):
            shutil.copytree(os.path.join(src, stage), os.path.join(dst, stage))
    cfg = PipelineConfig()
    cfg.distill.reasoning, cfg.build_pairs.empty_think = "none", "flag"
    return run_pipeline(a.root, f"{a.run_id}-actions", os.path.join(a.root, "traces", a.run_id), cfg,
                        env="textworld", stages=("distill", "build_pairs", "export"),
                        log=lambda m: print(m, flush=True))


def sft(a: argparse.Namespace, run_id: str = "") -> dict:
    """Step 3: LoRA SFT of the base model on the export of ``run_id`` (default the main run)."""
    from sft.config import SFTFitConfig
    from sft.run_step import fit_for_run
    cfg = SFTFitConfig(max_steps=a.sft_steps, per_device_train_batch_size=a.sft_batch, learning_rate=a.sft_lr,
                       lora_r=a.lora_r, lora_alpha=2 * a.lora_r, lr_scheduler_type="cosine",
                       warmup_steps=min(10, a.sft_steps // 10), base_model=a.base_model)
    return fit_for_run(a.root, run_id or a.run_id, cfg)


def evaluate(a: argparse.Namespace, which: str, run_id: str = "") -> dict:
    """Step 4: held-out dev-fold games, greedy, of checkpoint ``which`` of ``run_id`` (default the
    main run)."""
    from sft.eval import eval_config, eval_for_run
    cfg = eval_config(games=a.game, game_params=a.game_params, fold="dev", seed0=a.eval_seed0,
                      episodes=a.eval_episodes, max_steps=a.eval_max_steps, max_new_tokens=a.max_new_tokens,
                      torch_threads=a.threads, batch_size=a.eval_batch)
    return eval_for_run(a.root, run_id or a.run_id, which, cfg, base_model=a.base_model)


def grpo(a: argparse.Namespace) -> dict:
    """Step 5: a few GRPO steps from the SFT checkpoint (no validation), the run's prompt config."""
    from sft.rl.config import smoke
    from sft.rl.step import grpo_for_run
    cfg = smoke(max_steps=a.grpo_steps, games=[a.game], game_params=a.game_params, max_env_steps=a.eval_max_steps,
                max_completion_length=a.max_new_tokens, eval_steps=0, num_generations=4, tasks_per_step=2,
                train_seeds=a.train_tasks)
    return grpo_for_run(a.root, a.run_id, cfg)


def quality(a: argparse.Namespace) -> dict:
    """The export manifest's data-quality metrics (first key of :data:`QUALITY_KEYS` present in its
    ``counters`` or at its top level), else {}."""
    from pipeline.core.artifacts import ArtifactStore
    art = ArtifactStore(a.root, a.run_id).load("export")
    m = art.manifest if art else {}
    for d in (m.get("counters") or {}, m):
        found = next((d[k] for k in QUALITY_KEYS if isinstance(d.get(k), dict)), None)
        if found is not None:
            return found
    return {}


def _flat(d: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _flat(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def report(a: argparse.Namespace, results: dict[str, dict], counts: dict, q: dict, timer: Timer,
           trained: tuple[str, ...] = ("sft",)) -> str:
    """Print the tables; returns the verdict line of each ``trained`` policy against the base
    (a policy missing from ``results`` had no data to train on)."""
    print("\n== data ==")
    for k, v in counts.items():
        print(f"  {k:28s} {v}")
    print("\n== data-quality metrics (export manifest) ==")
    if not q:
        print("  (the export manifest has no data-quality metrics)")
    for k, v in _flat(q):
        print(f"  {k:40s} {round(v, 4) if isinstance(v, float) else v}")
    print(f"\n== held-out evaluation: {a.game} ({a.game_params}), dev fold seeds {a.eval_seed0}.."
          f"{a.eval_seed0 + a.eval_episodes - 1}, greedy, <= {a.eval_max_steps} actions ==")
    print(f"  {'policy':11s} {'success':>12s} {'95% Wilson CI':>16s} {'reward':>7s} {'score':>6s} {'valid':>6s} "
          f"{'fmt err':>7s} {'steps':>6s}")
    for name, s in results.items():
        lo, hi = s["success_ci95"]
        print(f"  {name:11s} {s['wins']:>4d}/{s['episodes']:<3d}={s['success_rate']:.3f} {lo:>7.3f}-{hi:<7.3f} "
              f"{s['mean_reward']:>7.2f} {s['mean_score']:>6.3f} {s['valid_action_rate']:>6.3f} "
              f"{s['format_error_rate']:>7.3f} {s['mean_steps']:>6.2f}")
    print("\n== wall time ==")
    for name, sec in timer.phases:
        print(f"  {name:28s} {sec:7.0f} s")
    print(f"  {'total':28s} {sum(s for _, s in timer.phases):7.0f} s")
    return "; ".join(verdict(a.game, results["base"], name, results.get(name)) for name in trained)


def verdict(game: str, b: dict, name: str, s: dict | None) -> str:
    """One policy against the base: ``outcome: <game> base ... vs <name> ...: difference ...; 95%
    intervals DISJOINT|overlap``; ``s`` None means the run had no SFT pair to train on."""
    if s is None:
        return f"outcome: {game} {name}: no SFT pair survived the quality rules, nothing to train (target not reached)"
    disjoint = s["success_ci95"][0] > b["success_ci95"][1]
    label = "SFT" if name == "sft" else name
    return (f"outcome: {game} base {b['success_rate']:.3f} {b['success_ci95']} vs {label} {s['success_rate']:.3f} "
            f"{s['success_ci95']}: difference {s['success_rate'] - b['success_rate']:+.3f}; 95% intervals "
            + (f"DISJOINT ({label} better)" if disjoint else "overlap (target not reached)"))


def exported_pairs(results: list) -> int:
    """SFT pairs the export of ``results`` (run_pipeline's) wrote; 0 when it has none."""
    return int(next((r.manifest.get("counts", {}).get("out") or 0 for r in results if r.stage == "export"), 0))


def train_and_eval(a: argparse.Namespace, timer: Timer, results: list, name: str, run_id: str) -> tuple[dict, dict]:
    """SFT and eval of one run's export; ``({}, None)`` when it has no pair."""
    if not exported_pairs(results):
        print(f"--- {name}: the export has no SFT pair; no SFT, no eval", flush=True)
        return {}, None
    fit = timer.run(f"3 SFT ({name})", sft, a, run_id)
    return fit, timer.run(f"4 eval {name}", evaluate, a, "sft_fit", run_id)


def main(argv: list[str] | None = None) -> int:
    """Run the steps of the benchmark named by the options; returns the exit code."""
    a = parse_args(argv)
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    os.makedirs(a.root, exist_ok=True)
    print("outcome experiment:", json.dumps(vars(a)), flush=True)
    timer = Timer()
    roll = timer.run("1 gold/noisy rollouts", rollouts, a)
    results = timer.run("2 data pipeline (embedded LLM)", pipeline, a)
    control = timer.run("2b action-only control data", actions_baseline, a) if a.baseline else []
    evals = {"base": timer.run("4 eval base", evaluate, a, "base")}
    fit, evals["sft"] = train_and_eval(a, timer, results, "sft", a.run_id)
    if a.baseline:
        _, evals["sft-actions"] = train_and_eval(a, timer, control, "sft-actions", f"{a.run_id}-actions")
    if a.grpo and evals["sft"] is not None:
        timer.run("5 GRPO", grpo, a)
        evals["sft+grpo"] = timer.run("5b eval SFT+GRPO", evaluate, a, "grpo")
    stage = {r.stage: r.manifest.get("counts", {}) for r in results}
    counts = {"rollout episodes (wins)": f"{roll['episodes']} ({roll['wins']})",
              "parsed trajectories": stage.get("parse", {}).get("out"),
              "quarantined by memory": f"{stage.get('memory', {}).get('quarantined')} "
                                       f"{stage.get('memory', {}).get('quarantine_reasons')}",
              "quarantined by distill": f"{stage.get('distill', {}).get('quarantined')} "
                                        f"{stage.get('distill', {}).get('quarantine_reasons')}",
              "quarantined by build_pairs": f"{stage.get('build_pairs', {}).get('quarantined')} "
                                            f"{stage.get('build_pairs', {}).get('quarantine_reasons')}",
              "exported pairs": exported_pairs(results),
              "action-only control pairs": exported_pairs(control) if a.baseline else "skipped",
              "SFT steps / final loss": f"{fit.get('global_step')} / {fit.get('final_loss')}" if fit else "no SFT"}
    evals = {k: v for k, v in evals.items() if v is not None}
    line = report(a, evals, counts, quality(a), timer, trained=("sft", "sft-actions") if a.baseline else ("sft",))
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

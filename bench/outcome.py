"""Outcome experiment: do distilled reasoning and a skill bank make a better agent than plain demonstrations?

    .venv/bin/python bench/outcome.py                 # the four arms, CPU budget below
    .venv/bin/python bench/outcome.py --grpo          # also a few GRPO steps from the best SFT arm
    .venv/bin/python bench/outcome.py --arms base,actions   # a subset of the arms
    make outcome

Four arms on the same trajectories, memories and skill bank, the same student, SFT steps and
evaluation seeds (``bench/outcome_arms.py`` defines them and what each changes):

* ``base``: the base model, not trained, prompted with the skill bank;
* ``actions``: SFT on the expert actions with empty thinks (``distill.reasoning: none``);
* ``thinks``: SFT on distilled thinks written without the bank (``prompt.skills: false`` in the
  distill prompt, the SFT prompts and the evaluation prompts);
* ``skills``: SFT on distilled thinks written with the bank, the bank in every prompt (SkillRL).

Steps (all real components, nothing stubbed):

1. expert traces: ``skillpipe rl rollout --policy gold --noise NOISE`` on ``--train-tasks`` seeds of
   the TextWorld Express *train* fold (real engine observations; no model, no API key);
2. the data pipeline of the skills arm with the embedded LLM (or ``--llm-base-url``), run id
   ``<run-id>``: parse -> remove_loops -> verify -> split -> memory -> skills -> distill ->
   build_pairs -> export;
2b. each other trained arm under run id ``<run-id><suffix>``: the skills arm's artifacts up to
   the skill bank are copied (same trajectories, memories and bank; fingerprints match), then
   distill -> build_pairs -> export with the arm's config (the actions arm makes no LLM call);
3. SFT (TRL ``SFTTrainer``, LoRA) of the base model on each trained arm's export that has pairs;
4. ``skillpipe eval`` of the base model and of each SFT checkpoint on ``--eval-episodes`` seeds of
   the *dev* fold from ``--eval-seed0`` (no training data came from there), greedy, the prompts
   the arm trained with (``pipeline.prompts``, the run's recorded ``prompt`` section);
5. with ``--grpo``: GRPO from the best SFT arm's checkpoint, then the same evaluation.

It prints one table: per arm the success with its 95 % Wilson interval, valid-action and
format-error rates, mean steps, and the data figures (exported pairs, skill-use rate of the
pairs' thinks against the bank, mean think length in words, share of trajectories quarantined by
distill and of pairs quarantined by build_pairs); then where the skills arm's thinks cite the
bank during evaluation (share of steps; success of episodes with and without a citation;
descriptive, not causal); the wall time of each step; and ``outcome:`` lines naming the best
arm and whether its interval separates from each other arm's. The same figures go to
``<root>/outcome.json``, which ``skillpipe report`` of any of the arms' runs shows in its
Training section.

CPU budget (defaults): game ``coin`` with four rooms, no doors and no distractors (picked by
``bench/outcome_pilot.py``: action-only SFT won 16 of 30 held-out games there, 30 of 30 with two
rooms, 0 of 30 on ``twc`` with two items), 12 training games at noise 0.1, LLM calls capped at
400 completion tokens, skills calls sampled again up to twice, one observation/action pair of
history in every prompt, SFT 24 steps of batch 2 at lr 5e-4 in bf16 autocast (cosine, rank-16
LoRA), 60 evaluation games per arm of at most 8 actions and 96 new tokens (room for a think of
``distill.max_think_chars``) in bfloat16, one torch thread per job and four jobs at once
(``--jobs``: every arm's SFT and evaluation in its own worker process, the base model's
evaluation beside the three trainings). On 2 cores a run took 51 minutes (data stages 24, arms
27), within the 60-minute target; measured phases are in README -> Benchmarks.
``--arms`` runs a subset; ``--quick`` shrinks every budget (a smoke run of a few minutes; fewer
than 60 games).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.outcome_arms import ARMS, Arm, arm, arm_config, pair_steps, skill_use, where_skills_used  # noqa: E402
from pipeline.core import layout  # noqa: E402

#: Keys of the export manifest (or its counters) that may hold data-quality metrics.
QUALITY_KEYS = ("quality_metrics", "data_quality", "quality", "metrics")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help keeps the module docstring's layout and shows each option's default."""


def _data_options(p: argparse.ArgumentParser) -> None:
    """The data pipeline's options: the teacher's completion cap, skills retries, distill chunks."""
    p.add_argument("--llm-max-tokens", type=int, default=400, help="completion budget of each data-pipeline LLM call")
    p.add_argument("--skills-retries", type=int, default=2,
                   help="skills.sampled_retries: a skills call whose every item a content rule rejects is asked "
                        "again this many times, sampled (greedy only repeats it); a coin run without them ended "
                        "with an empty bank")
    p.add_argument("--distill-steps-per-call", type=int, default=8,
                   help="actions whose thinks one distill call writes (distill.max_steps_per_call). Measured on "
                        "coin with the embedded teacher: 8 (whole trajectories; a rejected step is asked again "
                        "alone) kept 14 of 15 trajectories in 995 s; 1 kept 7 in 721 s, the other steps' thinks "
                        "repeating each other (reused_think)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's options (``--help``)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("--root", default=os.path.join(ROOT, "runs", "outcome_root"), help="folder for runs/ and traces")
    p.add_argument("--run-id", default="outcome", help="run id of the skills arm (the others: <run-id>-actions, "
                                                       "<run-id>-noskills)")
    p.add_argument("--arms", default=",".join(a.name for a in ARMS),
                   help="comma-separated arms to run (the skills arm's data are always built: the others copy them)")
    p.add_argument("--game", default="coin", help="TextWorld Express game for training and evaluation")
    p.add_argument("--game-params", default="numLocations=4,numDistractorItems=0,includeDoors=0,limitInventorySize=0",
                   help="TextWorld Express game parameters")
    p.add_argument("--train-tasks", type=int, default=12, help="training games (train fold seeds 0..N-1)")
    p.add_argument("--noise", type=float, default=0.1, help="gold policy noise rate")
    p.add_argument("--rollout-max-steps", type=int, default=16, help="actions per expert rollout")
    p.add_argument("--sft-steps", type=int, default=24, help="SFT optimizer steps")
    p.add_argument("--sft-batch", type=int, default=2, help="SFT pairs per step")
    p.add_argument("--sft-lr", type=float, default=5e-4, help="SFT peak learning rate (cosine schedule)")
    p.add_argument("--lora-r", type=int, default=16, help="LoRA rank (alpha = 2 x rank)")
    p.add_argument("--sft-precision", default="bf16", choices=("auto", "bf16", "fp32"),
                   help="SFT precision (bf16 without a GPU is CPU autocast: 20%% faster per step here)")
    p.add_argument("--eval-dtype", default="bfloat16", choices=("float32", "bfloat16"),
                   help="weights' dtype in every arm's evaluation, the same for all arms. bfloat16 (the SFT's "
                        "autocast dtype) played 10 base-model games 1.6x faster than float32 here (34 s against "
                        "54 s) and prefilled 1.9x faster; on 8 games the skills student won 3 in bfloat16 against "
                        "6 in float32, so results of the two dtypes are not comparable")
    p.add_argument("--history-length", type=int, default=1,
                   help="observation/action pairs of history in every prompt of every arm (prompt.history_length; "
                        "SkillRL's RL default is 2): each one adds about 140 tokens to every step an arm trains on "
                        "and plays")
    p.add_argument("--eval-episodes", type=int, default=60, help="held-out games per arm")
    p.add_argument("--eval-seed0", type=int, default=100, help="first dev-fold seed of the evaluation")
    p.add_argument("--eval-max-steps", type=int, default=8, help="actions per evaluation game")
    p.add_argument("--max-new-tokens", type=int, default=96, help="tokens the policy may generate per action")
    p.add_argument("--eval-batch", type=int, default=20, help="evaluation games played in lock-step")
    _data_options(p)
    p.add_argument("--grpo", action="store_true", help="also GRPO from the best SFT arm's checkpoint, then evaluate it")
    p.add_argument("--grpo-steps", type=int, default=4, help="GRPO steps with --grpo")
    p.add_argument("--llm-base-url", default="", help="data pipeline endpoint ('' = embedded llama.cpp server)")
    p.add_argument("--llm-model", default="", help="model name at --llm-base-url")
    p.add_argument("--base-model", default="", help="HF model folder to fine-tune ('' = embedded SmolLM2-135M)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch default; 1 is fastest on "
                                                          "shared cores, see GRPOConfig.torch_threads)")
    p.add_argument("--jobs", type=int, default=4, help="arms trained and evaluated at once, each in its own process "
                                                        "with --threads torch threads (1 = one after the other; "
                                                        "4 starts the base model's evaluation beside the three "
                                                        "trainings, so no core idles while one job finishes)")
    p.add_argument("--quick", action="store_true", help="tiny budgets: a smoke run of a few minutes")
    a = p.parse_args(argv)
    try:
        a.arms = [arm(n.strip()).name for n in a.arms.split(",") if n.strip()]
    except ValueError as e:
        p.error(f"--arms: {e}")
    if not a.arms:
        p.error("--arms names no arm")
    if a.quick:
        a.train_tasks, a.sft_steps, a.sft_batch, a.eval_episodes, a.eval_max_steps = 4, 2, 1, 2, 2
        a.max_new_tokens, a.grpo_steps = 24, 1
    return a


class Timer:
    """Wall seconds per named phase, printed at the end."""

    def __init__(self):
        self.phases: list[tuple[str, float]] = []
        self.t0 = time.monotonic()

    def run(self, name: str, fn, *args, **kwargs):
        t0 = time.monotonic()
        print(f"--- {name} ...", flush=True)
        out = fn(*args, **kwargs)
        self.phases.append((name, time.monotonic() - t0))
        print(f"--- {name}: {self.phases[-1][1]:.0f} s", flush=True)
        return out


def rollouts(a: argparse.Namespace) -> dict:
    """Step 1: gold/noisy expert traces of the train fold as a SkillRL txt tree. The rollout step
    reuses the traces of an earlier run with the same settings (multi-room gold plans vary by
    JVM, so a replay could change the data and rerun every stage)."""
    from sft.rl.cli import collect_rollouts
    res = collect_rollouts(os.path.join(a.root, "traces", a.run_id), a.root, f"{a.run_id}-traces", games=a.game,
                           tasks=a.train_tasks, episodes_per_task=1, fold="train", max_steps=a.rollout_max_steps,
                           policy="gold", game_params=a.game_params, noise=a.noise, noise_seed=0, replace_tree=True)
    if res["skipped"]:
        print("    reusing the traces of an earlier run with the same settings", flush=True)
    return res


def base_config(a: argparse.Namespace):
    """The skills arm's pipeline config: the LLM settings of this run (every arm starts from it)."""
    from pipeline.core.config import PipelineConfig
    cfg = PipelineConfig()
    cfg.llm.max_tokens = a.llm_max_tokens
    cfg.prompt.history_length = a.history_length  # distill, SFT pairs and evaluation all render with it
    cfg.distill.max_steps_per_call = a.distill_steps_per_call
    cfg.skills.sampled_retries = a.skills_retries
    # four general skills fit the completion cap (about 75 tokens each); six were cut at 400 tokens
    cfg.skills.n_general = min(cfg.skills.n_general, 4)
    # a greedy local model's failed answers only repeat on a rerun: record them and move on, so a
    # second outcome run with the same arguments skips every finished step (measured: it reran memory)
    cfg.llm.retry_failed = False
    if a.llm_base_url:
        cfg.llm.base_url, cfg.llm.model = a.llm_base_url, a.llm_model
    return cfg


def pipeline(a: argparse.Namespace) -> list:
    """Step 2: the data stages of the skills arm with the embedded LLM (or ``--llm-base-url``)."""
    from pipeline.engine.runner import run_pipeline
    return run_pipeline(a.root, a.run_id, os.path.join(a.root, "traces", a.run_id),
                        arm_config(arm("skills"), base_config(a)), env="textworld",
                        log=lambda m: print(m, flush=True))


#: Artifacts every arm shares with the skills arm (copied, so its fingerprints match).
SHARED_STAGES = ("_plan", "parse", "remove_loops", "verify", "split", "memory", "skills")
#: The stages each arm runs on its own config.
ARM_STAGES = ("distill", "build_pairs", "export")


def arm_data(a: argparse.Namespace, which: Arm) -> list:
    """Step 2b: the data of a trained arm other than skills under its run id: the skills arm's
    artifacts up to the skill bank, then :data:`ARM_STAGES` with :func:`arm_config`."""
    from pipeline.engine.runner import run_pipeline
    run_id = which.run_id(a.run_id)
    if run_id == a.run_id:
        raise ValueError(f"arm {which.name} shares the skills arm's run; it has no data of its own")
    src, dst = (layout.run_dir(a.root, r) for r in (a.run_id, run_id))
    for stage in SHARED_STAGES:
        shutil.rmtree(os.path.join(dst, stage), ignore_errors=True)
        if os.path.exists(os.path.join(src, stage)):
            shutil.copytree(os.path.join(src, stage), os.path.join(dst, stage))
    return run_pipeline(a.root, run_id, os.path.join(a.root, "traces", a.run_id), arm_config(which, base_config(a)),
                        env="textworld", stages=ARM_STAGES, log=lambda m: print(m, flush=True))


def actions_baseline(a: argparse.Namespace) -> list:
    """The action-only arm's data (:func:`arm_data` of ``actions``): empty thinks, no LLM call."""
    return arm_data(a, arm("actions"))


def sft(a: argparse.Namespace, run_id: str = "") -> dict:
    """Step 3: LoRA SFT of the base model on the export of ``run_id`` (default the main run)."""
    from sft.config import SFTFitConfig
    from sft.run_step import fit_for_run
    cfg = SFTFitConfig(max_steps=a.sft_steps, per_device_train_batch_size=a.sft_batch, learning_rate=a.sft_lr,
                       lora_r=a.lora_r, lora_alpha=2 * a.lora_r, lr_scheduler_type="cosine",
                       warmup_steps=min(10, a.sft_steps // 10), base_model=a.base_model,
                       precision=a.sft_precision)
    return fit_for_run(a.root, run_id or a.run_id, cfg)


def evaluate(a: argparse.Namespace, which: str, run_id: str = "") -> dict:
    """Step 4: held-out dev-fold games, greedy, of checkpoint ``which`` of ``run_id`` (default the
    main run)."""
    from sft.eval import eval_config, eval_for_run
    cfg = eval_config(games=a.game, game_params=a.game_params, fold="dev", seed0=a.eval_seed0,
                      episodes=a.eval_episodes, max_steps=a.eval_max_steps, max_new_tokens=a.max_new_tokens,
                      torch_threads=a.threads, batch_size=a.eval_batch, dtype=a.eval_dtype)
    return eval_for_run(a.root, run_id or a.run_id, which, cfg, base_model=a.base_model)


def grpo(a: argparse.Namespace, run_id: str = "") -> dict:
    """Step 5: a few GRPO steps from the SFT checkpoint of ``run_id`` (default the skills arm's
    run; no validation), the run's prompt config."""
    from sft.rl.config import smoke
    from sft.rl.step import grpo_for_run
    cfg = smoke(max_steps=a.grpo_steps, games=[a.game], game_params=a.game_params, max_env_steps=a.eval_max_steps,
                max_completion_length=a.max_new_tokens, eval_steps=0, num_generations=4, tasks_per_step=2,
                train_seeds=a.train_tasks)
    return grpo_for_run(a.root, run_id or a.run_id, cfg)



def quality(a: argparse.Namespace, run_id: str = "") -> dict:
    """The export manifest's data-quality metrics of ``run_id`` (default the skills arm's run;
    first key of :data:`QUALITY_KEYS` present in its ``counters`` or at its top level), else {}."""
    from pipeline.core.artifacts import ArtifactStore
    art = ArtifactStore(a.root, run_id or a.run_id).load("export")
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


def _rate(counts: dict) -> float | None:
    n = counts.get("in")
    return round((counts.get("quarantined") or 0) / n, 4) if n else None


def data_figures(root: str, run_id: str, bank_rows: list[dict], min_shared: int = 2) -> dict:
    """The data figures of one trained arm's run: ``pairs`` exported, ``skill_use`` of their
    thinks against ``bank_rows`` (the skills arm's bank: :func:`bench.outcome_arms.skill_use`),
    ``think_words`` (mean words per think, empty thinks included), ``quarantine_distill`` (share
    of distill's input trajectories it quarantined) and ``quarantine_pairs`` (share of candidate
    pairs build_pairs quarantined); ``None`` for what the run has no artifact of."""
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.records import Trajectory
    store = ArtifactStore(root, run_id)
    export, verify = store.load("export"), store.load("verify")
    pairs = export.read_rows() if export else []
    trajs = {t.trajectory_id: t for t in (Trajectory.from_row(r) for r in (verify.read_rows() if verify else []))}
    use = skill_use(pair_steps(pairs, trajs), bank_rows, "textworld", min_shared)
    q = {s: (art.manifest.get("counts") or {}) if (art := store.load(s)) else {} for s in ("distill", "build_pairs")}
    return {"pairs": len(pairs), "skill_use": use["rate"], "skill_use_detail": use,
            "think_words": round(sum(len((p.get("think") or "").split()) for p in pairs) / len(pairs), 2)
            if pairs else None,
            "quarantine_distill": _rate(q["distill"]),
            "quarantine_distill_reasons": q["distill"].get("quarantine_reasons"),
            "quarantine_pairs": _rate(q["build_pairs"]),
            "quarantine_pairs_reasons": q["build_pairs"].get("quarantine_reasons")}


def _fmt(v, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


#: Columns of the four-arm table: (heading, width).
COLUMNS = (("arm", 38), ("success", 12), ("95% Wilson CI", 13), ("valid", 6), ("fmt err", 7), ("steps", 5),
           ("pairs", 5), ("skill use", 9), ("think w", 7), ("q distill", 9), ("q pairs", 7))


def arm_table(rows: list[dict]) -> list[str]:
    """The four-arm table as text lines: one row per ``{"name", "label", "eval": summary | None,
    "data": data_figures | None}`` (an arm without an eval shows why in its success cell)."""
    head = " ".join(f"{h:<{w}s}" if i == 0 else f"{h:>{w}s}" for i, (h, w) in enumerate(COLUMNS))
    out = [head]
    for r in rows:
        s, d = r.get("eval"), r.get("data") or {}
        if s:
            lo, hi = s["success_ci95"]
            cells = [f"{s['wins']}/{s['episodes']}={s['success_rate']:.3f}", f"{lo:.3f}-{hi:.3f}",
                     f"{s['valid_action_rate']:.3f}", f"{s['format_error_rate']:.3f}", f"{s['mean_steps']:.2f}"]
        else:
            cells = [r.get("why") or "not run", "-", "-", "-", "-"]
        cells += [_fmt(d.get("pairs"), "d"), _fmt(d.get("skill_use")), _fmt(d.get("think_words"), ".1f"),
                  _fmt(d.get("quarantine_distill")), _fmt(d.get("quarantine_pairs"))]
        label = f"{r['name']}: {r['label']}"
        out.append(" ".join([f"{label:<{COLUMNS[0][1]}s}"] + [f"{c:>{w}s}" for c, (_, w) in zip(cells, COLUMNS[1:])]))
    return out


def compare(x: str, sx: dict, y: str, sy: dict) -> str:
    """``x <rate> [lo, hi] vs y <rate> [lo, hi]: difference +d; 95% intervals separate (x better) |
    separate (y better) | overlap``."""
    d = sx["success_rate"] - sy["success_rate"]
    if sx["success_ci95"][0] > sy["success_ci95"][1]:
        how = f"separate ({x} better)"
    elif sy["success_ci95"][0] > sx["success_ci95"][1]:
        how = f"separate ({y} better)"
    else:
        how = "overlap"
    return (f"{x} {sx['success_rate']:.3f} {list(sx['success_ci95'])} vs {y} {sy['success_rate']:.3f} "
            f"{list(sy['success_ci95'])}: difference {d:+.3f}; 95% intervals {how}")


#: The comparisons each isolate one switch: (arm, arm it is compared with, what the difference measures).
CONTRASTS = (("actions", "base", "SFT on the expert actions"), ("skills", "actions", "the distilled think"),
             ("skills", "thinks", "the skill bank"), ("thinks", "actions", "a think written without the bank"))


def verdict(game: str, evals: dict[str, dict | None]) -> list[str]:
    """The ``outcome:`` lines: the best arm (highest success; ties named together) and whether its
    interval separates from each other evaluated arm's, then each :data:`CONTRASTS` pair whose
    arms both have an eval. An arm whose eval is ``None`` had no SFT pair."""
    done = {k: v for k, v in evals.items() if v is not None}
    lines = [f"outcome: {game} {k}: no SFT pair survived the quality rules, nothing to train"
             for k, v in evals.items() if v is None]
    if not done:
        return lines + [f"outcome: {game}: no arm was evaluated"]
    top = max(v["success_rate"] for v in done.values())
    best = [k for k, v in done.items() if v["success_rate"] == top]
    others = [k for k in done if k not in best]
    sep = [k for k in others if done[best[0]]["success_ci95"][0] > done[k]["success_ci95"][1]]
    line = f"outcome: {game} best arm {' = '.join(best)} {top:.3f} {list(done[best[0]]['success_ci95'])}"
    if others:
        line += ("; its interval separates from " + (", ".join(sep) if sep else "no other arm")
                 + ("" if len(sep) == len(others) else "; overlaps " + ", ".join(k for k in others if k not in sep)))
    lines.append(line)
    lines += [f"outcome: {what}: {compare(x, done[x], y, done[y])}" for x, y, what in CONTRASTS
              if x in done and y in done]
    return lines


def machine() -> str:
    """What ran the experiment: CPU count and model, and the GPU when torch sees one."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    text = f"{os.cpu_count()} CPUs ({cpu})"
    try:
        import torch
        if torch.cuda.is_available():
            text += f", GPU {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return text


def commit() -> str:
    """The repository's HEAD commit ('' outside a git checkout), with ``+dirty`` for local changes."""
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("+dirty" if head and dirty else "")


#: The result file bench/outcome.py writes into ``--root`` and ``skillpipe report`` reads.
RESULT_FILE = "outcome.json"


def write_result(a: argparse.Namespace, rows: list[dict], where: dict | None, lines: list[str], timer: Timer) -> str:
    """Write ``<root>/outcome.json`` (date, commit, machine, budget, one entry per arm with its run
    id, eval summary and data figures, where the skills arm cites the bank, the verdict lines,
    wall times); returns its path."""
    keep = ("episodes", "wins", "success_rate", "success_ci95", "valid_action_rate", "format_error_rate",
            "inadmissible_rate", "mean_steps", "mean_reward", "mean_score")
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": commit(),
           "machine": machine(), "game": a.game, "game_params": a.game_params,
           "eval_seeds": [a.eval_seed0, a.eval_seed0 + a.eval_episodes - 1], "fold": "dev",
           "budget": {k: getattr(a, k) for k in ("train_tasks", "noise", "sft_steps", "sft_batch", "sft_lr", "lora_r",
                                                 "sft_precision", "eval_dtype", "history_length", "distill_steps_per_call",
                                                 "skills_retries",
                                                 "eval_episodes", "eval_max_steps", "max_new_tokens", "llm_max_tokens",
                                                 "threads", "base_model", "llm_base_url", "llm_model")},
           "arms": [{"name": r["name"], "label": r["label"], "run_id": r["run_id"], "trained": r["trained"],
                     "eval": {k: r["eval"][k] for k in keep if k in r["eval"]} if r.get("eval") else None,
                     "why": r.get("why", ""), "data": r.get("data")} for r in rows],
           "where_skills_used": where, "verdict": lines,
           "wall_s": {**{name: round(sec) for name, sec in timer.phases}, "total": round(time.monotonic() - timer.t0)}}
    path = os.path.join(a.root, RESULT_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, path)
    from bench.results import write_result as write_dated  # also a dated result file (bench/results.py)
    write_dated("outcome", {k: doc[k] for k in ("game", "game_params", "eval_seeds", "arms", "where_skills_used",
                                                 "verdict", "wall_s")}, doc["budget"])
    return path


def exported_pairs(results: list) -> int:
    """SFT pairs the export of ``results`` (run_pipeline's) wrote; 0 when it has none."""
    return int(next((r.manifest.get("counts", {}).get("out") or 0 for r in results if r.stage == "export"), 0))


def arm_job(a: argparse.Namespace, name: str, run_id: str, pairs: int) -> tuple[list[tuple[str, float]], dict | None]:
    """The torch part of one arm, run in a worker process: SFT on the export of ``run_id`` then
    the held-out eval (a trained arm with ``pairs`` > 0), or the eval of the base model (``base``).
    Returns the worker's timed phases and the eval summary (None: no pair, nothing trained)."""
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    timer = Timer()
    if name == "base":
        return timer.phases, timer.run("4 eval base", evaluate, a, "base")
    if not pairs:
        print(f"--- {name}: the export has no SFT pair; no SFT, no eval", flush=True)
        return timer.phases, None
    timer.run(f"3 SFT ({name})", sft, a, run_id)
    return timer.phases, timer.run(f"4 eval {name}", evaluate, a, layout.SFT_STEP, run_id)


#: Deadline of one arm's worker process (SFT plus 60-game eval took at most 36 min on 2 cores).
ARM_JOB_TIMEOUT_S = 4 * 3600.0


def run_arm_jobs(a: argparse.Namespace, timer: Timer, jobs: list[tuple[str, str, int]]) -> dict[str, dict | None]:
    """:func:`arm_job` of each ``(name, run_id, pairs)``, ``a.jobs`` at a time, each in a child
    ``python bench/outcome.py --arm-job FILE`` (one after the other in this process when
    ``a.jobs`` is 1); returns each arm's eval summary. The workers' phases join ``timer`` and a
    ``3-4 arms`` phase records the wall time of all of them (the phases of parallel workers
    overlap). Raises ``RuntimeError`` naming the arm when a worker fails, and
    :class:`pipeline.core.waits.WaitTimeout` when one runs past :data:`ARM_JOB_TIMEOUT_S`
    (then every worker is killed)."""
    t0 = time.monotonic()
    out: dict[str, dict | None] = {}
    if a.jobs <= 1 or len(jobs) <= 1:
        for name, run_id, pairs in jobs:
            phases, out[name] = arm_job(a, name, run_id, pairs)
            timer.phases += phases
    else:
        out = _arm_workers(a, timer, jobs)
    timer.phases.append(("3-4 arms (wall)", time.monotonic() - t0))
    return out


def _arm_workers(a: argparse.Namespace, timer: Timer, jobs: list[tuple[str, str, int]]) -> dict[str, dict | None]:
    """:func:`run_arm_jobs` with child processes: each gets a job file (the options and its arm)
    and writes its result next to it."""
    import tempfile
    from pipeline.core.waits import WaitTimeout, wait_exit
    os.makedirs(a.root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="arm-jobs-", dir=a.root)
    todo, running, out = list(jobs), {}, {}
    try:
        while todo or running:
            while todo and len(running) < a.jobs:
                name, run_id, pairs = todo.pop(0)
                path = os.path.join(work, f"{name}.json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump({"args": vars(a), "name": name, "run_id": run_id, "pairs": pairs}, f)
                proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--arm-job", path])
                running[name] = (proc, path, time.monotonic())
            for name, (proc, path, started) in list(running.items()):
                if proc.poll() is None:
                    if time.monotonic() - started > ARM_JOB_TIMEOUT_S:
                        raise WaitTimeout(f"outcome arm job {name}", proc.pid, ARM_JOB_TIMEOUT_S)
                    continue
                del running[name]
                if proc.returncode != 0:
                    raise RuntimeError(f"the {name} arm's worker failed (exit status {proc.returncode}); its "
                                       f"output is above")
                with open(path + ".out", encoding="utf-8") as f:
                    res = json.load(f)
                timer.phases += [tuple(p) for p in res["phases"]]
                out[name] = res["eval"]
            time.sleep(1.0)
    finally:
        for proc, _, _ in running.values():  # an error or a deadline: leave no worker behind
            proc.kill()
            wait_exit(proc, "outcome arm job", 30, killed=True)
        shutil.rmtree(work, ignore_errors=True)
    return out


def arm_job_main(path: str) -> int:
    """Entry of one worker (``--arm-job FILE``): :func:`arm_job` of the job file's arm, its result
    written to ``FILE.out``."""
    with open(path, encoding="utf-8") as f:
        job = json.load(f)
    phases, summary = arm_job(argparse.Namespace(**job["args"]), job["name"], job["run_id"], job["pairs"])
    with open(path + ".out", "w", encoding="utf-8") as f:
        json.dump({"phases": phases, "eval": summary}, f, default=str)
    return 0


def skills_citations(a: argparse.Namespace, bank_rows: list[dict]) -> dict | None:
    """:func:`bench.outcome_arms.where_skills_used` of the skills arm's eval episodes (None when
    it was not evaluated)."""
    from pipeline.core.artifacts import ArtifactStore
    art = ArtifactStore(a.root, a.run_id).load(layout.eval_stage(layout.SFT_STEP))
    return where_skills_used(art.read_rows(), bank_rows, "textworld") if art else None


def print_report(a: argparse.Namespace, rows: list[dict], where: dict | None, q: dict, timer: Timer) -> None:
    """Print the data-quality metrics of the skills arm's export, the four-arm table, where the
    skills arm cites the bank, and the wall times."""
    print("\n== data-quality metrics (skills arm's export manifest) ==")
    if not q:
        print("  (the export manifest has no data-quality metrics)")
    for k, v in _flat(q):
        print(f"  {k:40s} {round(v, 4) if isinstance(v, float) else v}")
    for r in rows:
        d = r.get("data") or {}
        if d.get("quarantine_distill_reasons") or d.get("quarantine_pairs_reasons"):
            print(f"  {r['name']}: quarantined by distill {d.get('quarantine_distill_reasons')}, "
                  f"by build_pairs {d.get('quarantine_pairs_reasons')}")
    print(f"\n== four arms: {a.game} ({a.game_params}), held-out dev seeds {a.eval_seed0}.."
          f"{a.eval_seed0 + a.eval_episodes - 1}, greedy, <= {a.eval_max_steps} actions; data: "
          f"{a.train_tasks} training games, SFT {a.sft_steps} steps, history {a.history_length} ==")
    for line in arm_table(rows):
        print("  " + line)
    print("  (skill use: share of the pairs' thinks sharing >= 2 content words with a bank skill shown for the "
          "task, beyond task/observation/action; q distill / q pairs: share quarantined)")
    print("\n== where the skills arm's thinks cite the bank (eval steps; descriptive) ==")
    if where is None:
        print("  (the skills arm was not evaluated)")
    else:
        print(f"  steps citing a skill: {where['citing_steps']}/{where['steps']} = {_fmt(where['step_rate'])}")
        print(f"  success of episodes with a citation: {where['wins_citing']}/{where['episodes_citing']} = "
              f"{_fmt(where['success_citing'])}; without: {where['wins_not_citing']}/{where['episodes_not_citing']}"
              f" = {_fmt(where['success_not_citing'])}")
    print("\n== wall time ==")
    for name, sec in timer.phases:
        print(f"  {name:28s} {sec:7.0f} s")
    print(f"  {'total (wall)':28s} {time.monotonic() - timer.t0:7.0f} s")


def main(argv: list[str] | None = None) -> int:
    """Run the arms named by ``--arms`` and print the table; returns the exit code."""
    from pipeline.core.artifacts import ArtifactStore
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--arm-job"] and len(argv) == 2:  # a worker of run_arm_jobs
        return arm_job_main(argv[1])
    a = parse_args(argv)
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    os.makedirs(a.root, exist_ok=True)
    print("outcome experiment:", json.dumps(vars(a)), flush=True)
    timer = Timer()
    timer.run("1 gold/noisy rollouts", rollouts, a)
    results = {"skills": timer.run("2 data pipeline (skills arm)", pipeline, a)}
    for name in a.arms:
        if name not in ("base", "skills"):
            results[name] = timer.run(f"2b data ({name} arm)", arm_data, a, arm(name))
    bank = ArtifactStore(a.root, a.run_id).load("skills")
    bank_rows = bank.read_rows() if bank else []
    chosen = [w for w in ARMS if w.name in a.arms]
    # the longest jobs first (SFT then eval), the base eval last, so two workers finish together
    jobs = [(w.name, w.run_id(a.run_id), exported_pairs(results[w.name])) for w in chosen if w.trained]
    jobs += [(w.name, w.run_id(a.run_id), 0) for w in chosen if not w.trained]
    evals = run_arm_jobs(a, timer, jobs)
    rows = []
    for which in chosen:
        row = {"name": which.name, "label": which.label, "run_id": which.run_id(a.run_id), "trained": which.trained}
        if which.trained:
            row["data"] = data_figures(a.root, row["run_id"], bank_rows)
            row["why"] = "" if evals[which.name] else "no SFT pair"
        row["eval"] = evals[which.name]
        rows.append(row)
    trained = {k: v for k, v in evals.items() if v is not None and k != "base"}
    if a.grpo and trained:
        best = max(trained, key=lambda k: trained[k]["success_rate"])
        run_id = arm(best).run_id(a.run_id)
        timer.run(f"5 GRPO ({best})", grpo, a, run_id)
        s = timer.run(f"5b eval {best}+GRPO", evaluate, a, layout.GRPO_STEP, run_id)
        rows.append({"name": f"{best}+grpo", "label": f"{arm(best).label}, then GRPO", "run_id": run_id,
                     "trained": True, "eval": s, "data": None})
        evals[f"{best}+grpo"] = s
    where = skills_citations(a, bank_rows) if evals.get("skills") else None
    print_report(a, rows, where, quality(a), timer)
    lines = verdict(a.game, evals)
    path = write_result(a, rows, where, lines, timer)
    print(f"\nresult file: {path}")
    for line in lines:
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

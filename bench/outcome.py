"""Outcome experiment: do distilled reasoning and a skill bank, gated by measured usefulness or not,
make a better agent than plain demonstrations?

    .venv/bin/python bench/outcome.py --dry-run       # the plan and its estimated minutes; runs nothing
    .venv/bin/python bench/outcome.py                 # the five arms, CPU budget below
    .venv/bin/python bench/outcome.py --seeds 5       # five SFT seeds for each deciding arm
    .venv/bin/python bench/outcome.py --arms actions,skills,gated   # the deciding arms alone
    .venv/bin/python bench/outcome.py --grpo          # also a few GRPO steps from the best SFT arm
    make outcome

Five arms on the same trajectories and memories, the same student, SFT steps and held-out games
(``bench/outcome_arms.py`` defines them and what each changes):

* ``base``: the base model, not trained, prompted with the ungated skill bank;
* ``actions``: SFT on the expert actions with empty thinks (``distill.reasoning: none``);
* ``thinks``: SFT on distilled thinks written without the bank (``prompt.skills: false``);
* ``skills``: SFT on distilled thinks written with the bank, the bank in every prompt (SkillRL),
  usefulness gate off (the ungated bank);
* ``gated``: the same with ``usefulness.policy: quarantine``: the skills stage drops bank items
  with no measured gain before distill writes thinks with the bank, the usefulness stage drops
  thinks with no gain.

actions, skills and gated decide the question: each trains with ``--seeds`` SFT seeds (default 3;
the seed changes data order and LoRA init), base and thinks once. The other arms run with the gate
off (``bench/outcome_arms.py`` says why).

Steps (all real components, nothing stubbed):

1. expert traces: ``skillpipe rl rollout --policy gold --noise NOISE`` on ``--train-tasks`` seeds of
   the TextWorld Express *train* fold (real engine observations; no model, no API key);
2. the data pipeline of the skills arm with the embedded LLM (or ``--llm-base-url``), run id
   ``<run-id>``, every stage, usefulness gate off;
2b. each other trained arm under run id ``<run-id><suffix>``: the skills arm's artifacts before
   its own stages are copied (same trajectories and memories; fingerprints match), then its own
   stages with its config: actions and thinks distill -> build_pairs -> usefulness -> export on the
   ungated bank (the actions arm makes no LLM call); gated skills -> distill -> build_pairs ->
   usefulness -> export with the gate on. The gated run also gets the skills arm's teacher answers
   (its LLM response cache), so its skills stage reads the same answers and its bank is the
   ungated bank less what the gate drops; distill then asks anew wherever the gated bank changed
   the prompt;
3-4. one **unit** per arm and SFT seed, ``--jobs`` at a time in worker processes: SFT (TRL
   ``SFTTrainer``, LoRA) of the base model on the arm's export with that seed, then ``skillpipe
   eval`` of the checkpoint on ``--eval-episodes`` seeds of the *dev* fold from ``--eval-seed0``
   (no training data came from there; every arm and seed plays the same games), greedy, the prompts
   the arm trained with; the base model's evaluation is one more unit. Each SFT and each evaluation
   is a fingerprinted step (``bench/outcome_steps.py``), so an interrupted run resumes at the first
   unfinished one and a finished run reruns in seconds;
5. with ``--grpo``: GRPO from the best arm's seed-0 checkpoint, then the same evaluation.

It prints the plan and its estimated minutes first, one progress line per phase and unit started
and finished (elapsed time, ETA), then: the data-quality metrics; one table with per arm the
pooled success over seeds x games with its 95 % bootstrap interval over games, valid-action and
format-error rates, mean steps and the data figures; each seed's result; the paired comparisons
gated vs actions, gated vs skills and skills vs actions, game by game (``bench/outcome_stats.py``:
the per-game difference of win shares pooled over seeds, its mean and a seeded 95 % paired
bootstrap interval over games, and whether that interval excludes 0); where the skills and gated
arms' thinks cite their bank during evaluation (descriptive); the wall time of each step. The
same figures go to ``<root>/outcome.json`` (``skillpipe report`` of any arm's run shows it) and a
dated result file in ``bench/results/`` (not for ``--quick``).

CPU budget (defaults): game ``coin`` with four rooms, no doors and no distractors (picked by
``bench/outcome_pilot.py``), 12 training games at noise 0.1, LLM calls capped at 400 completion
tokens, skills calls sampled again up to twice, one observation/action pair of history in every
prompt, SFT 24 steps of batch 2 at lr 5e-4 in bf16 autocast (cosine, rank-16 LoRA), 60 evaluation
games per arm and seed of at most 8 actions and 96 new tokens in bfloat16, one torch thread per
worker and four workers at once. The target is 150 minutes on 2 cores; the plan estimates it
from the phase times of the newest full run in ``bench/results/`` (``bench/outcome_plan.py``).
When a budget must shrink, cut training games or SFT steps, never held-out games or seeds.
``--quick`` shrinks every budget (a smoke run of a few minutes; 2 games, 2 seeds).
"""
from __future__ import annotations

import argparse
import dataclasses
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

from bench import outcome_plan as plan, outcome_stats as stats, outcome_steps as steps  # noqa: E402
from bench.outcome_arms import ARMS, Arm, arm, arm_config, pair_steps, skill_use, where_skills_used  # noqa: E402
from bench.outcome_plan import Unit  # noqa: E402
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


def _plan_options(p: argparse.ArgumentParser) -> None:
    """The plan's options: smoke run, dry run, the budget it is checked against, the bootstrap."""
    p.add_argument("--quick", action="store_true", help="tiny budgets: a smoke run of a few minutes (2 games, "
                                                        "2 seeds; no result file in bench/results)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its estimated minutes, run nothing")
    p.add_argument("--budget-minutes", type=float, default=plan.TARGET_MIN,
                   help="the plan's target: it says OVER when its estimate exceeds this")
    p.add_argument("--bootstrap", type=int, default=stats.N_BOOT,
                   help="bootstrap resamples of every interval over games (seeded: the same on a rerun)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's options (``--help``)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("--root", default=os.path.join(ROOT, "runs", "outcome_root"), help="folder for runs/ and traces")
    p.add_argument("--run-id", default="outcome", help="run id of the skills arm (the others: <run-id>-actions, "
                                                       "<run-id>-noskills, <run-id>-gated)")
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
    p.add_argument("--seeds", type=int, default=3, help="SFT seeds of each deciding arm (actions, skills, gated; "
                                                         "base and thinks run once): data order and LoRA init")
    p.add_argument("--eval-episodes", type=int, default=60, help="held-out games per arm and seed (the same games "
                                                                  "for all)")
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
    p.add_argument("--jobs", type=int, default=4, help="units (an arm and SFT seed: SFT then eval) run at once, "
                                                        "each in its own process with --threads torch threads "
                                                        "(1 = one after the other in this process; 4 on 2 cores "
                                                        "keeps a core busy while one unit finishes)")
    _plan_options(p)
    return _checked(p, p.parse_args(argv))


def _checked(p: argparse.ArgumentParser, a: argparse.Namespace) -> argparse.Namespace:
    """``a`` with ``--arms`` as a list of known names and the ``--quick`` budgets; ``p.error`` for a bad value."""
    try:
        a.arms = [arm(n.strip()).name for n in a.arms.split(",") if n.strip()]
    except ValueError as e:
        p.error(f"--arms: {e}")
    if not a.arms:
        p.error("--arms names no arm")
    if a.seeds < 1:
        p.error("--seeds must be at least 1")
    if a.quick:
        a.train_tasks, a.sft_steps, a.sft_batch, a.eval_episodes, a.eval_max_steps = 4, 2, 1, 2, 2
        a.max_new_tokens, a.grpo_steps, a.seeds, a.bootstrap = 24, 1, 2, 1000
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


def shared_stages(which: Arm) -> tuple[str, ...]:
    """The folders arm ``which`` copies from the skills arm's run: the run plan and every data stage
    before its first own stage (:attr:`Arm.own_stages`; none for the skills arm)."""
    first = layout.STAGES.index(which.own_stages[0])
    return ("_plan", *layout.STAGES[:first]) if first else ()


def share_teacher_answers(src: str, dst: str) -> int:
    """Add the validated LLM answers cached in run folder ``src`` to those of ``dst``
    (:class:`pipeline.llm.cache.ResponseCache`; an answer already there is kept); returns how many
    were added. A stage of ``dst`` that sends the same request then reads the same answer."""
    from pipeline.llm.cache import CACHE_FILE, ResponseCache
    if not os.path.isfile(os.path.join(src, CACHE_FILE)):
        return 0
    source = ResponseCache(os.path.join(src, CACHE_FILE))
    try:
        entries, _ = source.entries_after(0)
    finally:
        source.close()
    target = ResponseCache(os.path.join(dst, CACHE_FILE))
    try:
        return target.import_entries(entries)
    finally:
        target.close()


def arm_data(a: argparse.Namespace, which: Arm) -> list:
    """Step 2b: the data of a trained arm other than skills under its run id: the skills arm's
    artifacts of :func:`shared_stages` copied, then the arm's own stages with :func:`arm_config`
    (an arm that reruns ``skills`` also gets the skills arm's teacher answers:
    :func:`share_teacher_answers`)."""
    from pipeline.engine.runner import run_pipeline
    run_id = which.run_id(a.run_id)
    if run_id == a.run_id:
        raise ValueError(f"arm {which.name} shares the skills arm's run; it has no data of its own")
    src, dst = (layout.run_dir(a.root, r) for r in (a.run_id, run_id))
    for stage in shared_stages(which):
        shutil.rmtree(os.path.join(dst, stage), ignore_errors=True)
        if os.path.exists(os.path.join(src, stage)):
            shutil.copytree(os.path.join(src, stage), os.path.join(dst, stage))
    if "skills" in which.own_stages:
        os.makedirs(dst, exist_ok=True)
        print(f"    {share_teacher_answers(src, dst)} teacher answers of {a.run_id} added to {run_id}'s cache",
              flush=True)
    return run_pipeline(a.root, run_id, os.path.join(a.root, "traces", a.run_id), arm_config(which, base_config(a)),
                        env="textworld", stages=which.own_stages, log=lambda m: print(m, flush=True))


def actions_baseline(a: argparse.Namespace) -> list:
    """The action-only arm's data (:func:`arm_data` of ``actions``): empty thinks, no LLM call."""
    return arm_data(a, arm("actions"))


def sft(a: argparse.Namespace, run_id: str, seed: int = 0) -> dict:
    """Step 3: LoRA SFT of the base model on the export of ``run_id`` with SFT seed ``seed``
    (:func:`bench.outcome_steps.fit_seed`: skipped when unchanged)."""
    from sft.config import SFTFitConfig
    cfg = SFTFitConfig(max_steps=a.sft_steps, per_device_train_batch_size=a.sft_batch, learning_rate=a.sft_lr,
                       lora_r=a.lora_r, lora_alpha=2 * a.lora_r, lr_scheduler_type="cosine",
                       warmup_steps=min(10, a.sft_steps // 10), base_model=a.base_model,
                       precision=a.sft_precision)
    return steps.fit_seed(a.root, run_id, cfg, seed)


def eval_cfg(a: argparse.Namespace):
    """The held-out games and decoding every arm and seed is evaluated with."""
    from sft.eval import eval_config
    return eval_config(games=a.game, game_params=a.game_params, fold="dev", seed0=a.eval_seed0,
                       episodes=a.eval_episodes, max_steps=a.eval_max_steps, max_new_tokens=a.max_new_tokens,
                       torch_threads=a.threads, batch_size=a.eval_batch, dtype=a.eval_dtype)


def evaluate(a: argparse.Namespace, which: str, run_id: str = "", seed: int = 0) -> dict:
    """Step 4: the held-out games, greedy, of checkpoint ``which`` of ``run_id`` (default the main
    run): ``base``, ``grpo`` (:func:`sft.eval.eval_for_run`) or ``sft_fit`` with SFT seed ``seed``
    (:func:`bench.outcome_steps.eval_seed`). Skipped when unchanged."""
    from sft.eval import eval_for_run
    if which == layout.SFT_STEP:
        return steps.eval_seed(a.root, run_id or a.run_id, seed, eval_cfg(a), base_model=a.base_model)
    return eval_for_run(a.root, run_id or a.run_id, which, eval_cfg(a), progress=False, base_model=a.base_model)


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
    of distill's input trajectories it quarantined), ``quarantine_pairs`` (share of candidate
    pairs build_pairs quarantined), ``quarantine_useful`` (share of pairs the usefulness stage
    quarantined), ``bank_items`` (the run's own bank) and ``bank_gated`` (bank items its skills
    stage quarantined for no measured gain); ``None`` for what the run has no artifact of."""
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.core.records import Trajectory
    store = ArtifactStore(root, run_id)
    export, verify, bank = store.load("export"), store.load("verify"), store.load("skills")
    pairs = export.read_rows() if export else []
    trajs = {t.trajectory_id: t for t in (Trajectory.from_row(r) for r in (verify.read_rows() if verify else []))}
    use = skill_use(pair_steps(pairs, trajs), bank_rows, "textworld", min_shared)
    arts = {s: store.load(s) for s in ("distill", "build_pairs", "usefulness")}
    q = {s: (art.manifest.get("counts") or {}) if art else {} for s, art in arts.items()}
    gate = ((bank.manifest.get("counters") or {}).get("usefulness") or {}) if bank else {}
    return {"pairs": len(pairs), "skill_use": use["rate"], "skill_use_detail": use,
            "think_words": round(sum(len((p.get("think") or "").split()) for p in pairs) / len(pairs), 2)
            if pairs else None,
            "quarantine_distill": _rate(q["distill"]),
            "quarantine_distill_reasons": q["distill"].get("quarantine_reasons"),
            "quarantine_pairs": _rate(q["build_pairs"]),
            "quarantine_pairs_reasons": q["build_pairs"].get("quarantine_reasons"),
            "quarantine_useful": _rate(q["usefulness"]),
            "bank_items": bank.manifest.get("counts", {}).get("out") if bank else None,
            "bank_gated": sum(int(r.get("quarantined") or 0) for r in gate.values() if isinstance(r, dict))
            if bank else None}


def _fmt(v, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


#: Columns of the arms' table: (heading, width).
COLUMNS = (("arm", 38), ("seeds", 5), ("success", 13), ("95% CI", 11), ("valid", 6), ("fmt err", 7), ("steps", 5),
           ("pairs", 5), ("skill use", 9), ("think w", 7), ("q distill", 9), ("q pairs", 7), ("q useful", 8),
           ("bank", 4), ("gated", 5))


def arm_table(rows: list[dict]) -> list[str]:
    """The arms' table as text lines: one row per ``{"name", "label", "seeds", "eval": summary |
    None, "data": data_figures | None}`` (the summary pooled over the arm's seeds: its
    ``success_ci95`` is the bootstrap interval over games; an arm without an eval shows why in its
    success cell)."""
    head = " ".join(f"{h:<{w}s}" if i == 0 else f"{h:>{w}s}" for i, (h, w) in enumerate(COLUMNS))
    out = [head]
    for r in rows:
        s, d = r.get("eval"), r.get("data") or {}
        cells = [str(len(r.get("seeds") or [])) if r.get("trained") else "-"]
        if s:
            lo, hi = s["success_ci95"]
            cells += [f"{s['wins']}/{s['episodes']}={s['success_rate']:.3f}", f"{lo:.3f}-{hi:.3f}",
                      f"{s['valid_action_rate']:.3f}", f"{s['format_error_rate']:.3f}", f"{s['mean_steps']:.2f}"]
        else:
            cells += [r.get("why") or "not run", "-", "-", "-", "-"]
        cells += [_fmt(d.get("pairs"), "d"), _fmt(d.get("skill_use")), _fmt(d.get("think_words"), ".1f"),
                  _fmt(d.get("quarantine_distill")), _fmt(d.get("quarantine_pairs")),
                  _fmt(d.get("quarantine_useful")), _fmt(d.get("bank_items"), "d"), _fmt(d.get("bank_gated"), "d")]
        label = f"{r['name']}: {r['label']}"
        out.append(" ".join([f"{label:<{COLUMNS[0][1]}s}"] + [f"{c:>{w}s}" for c, (_, w) in zip(cells, COLUMNS[1:])]))
    return out


#: Eval summary keys kept in the result file (pooled over seeds and per seed).
EVAL_KEYS = ("episodes", "wins", "success_rate", "success_ci95", "valid_action_rate", "format_error_rate",
             "inadmissible_rate", "mean_steps", "mean_reward", "mean_score")


def pooled_eval(rows_by_seed: dict[int, list[dict]], pool: dict) -> dict:
    """One arm's evaluation pooled over its seeds: :func:`sft.eval.summarize` of every seed's
    episode rows, its success rate and interval replaced by ``pool``'s (:func:`bench.outcome_stats.pooled`:
    the mean win share over games and the bootstrap interval over games), plus ``seeds`` and the
    interval's method."""
    from sft.eval import summarize
    s = summarize([r for rows in rows_by_seed.values() for r in rows])
    return {**{k: s[k] for k in EVAL_KEYS if k in s}, "success_rate": pool["rate"], "success_ci95": pool["ci95"],
            "seeds": pool["seeds"], "ci_method": "percentile bootstrap over games, seeds pooled"}


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


def write_result(a: argparse.Namespace, rows: list[dict], where: dict | None, lines: list[str], timer: Timer,
                 extra: dict | None = None) -> str:
    """Write ``<root>/outcome.json`` (date, commit, machine, budget, one entry per arm with its run
    id, seeds, eval pooled over its seeds, each seed's eval and the data figures, where the skills
    arm cites the bank, the verdict lines, wall times, and ``extra``: the pooled and paired figures,
    the plan); returns its path. Also a dated result file (:func:`bench.results.write_result`),
    except for ``--quick``."""
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": commit(),
           "machine": machine(), "game": a.game, "game_params": a.game_params,
           "eval_seeds": [a.eval_seed0, a.eval_seed0 + a.eval_episodes - 1], "fold": "dev",
           "budget": {k: getattr(a, k) for k in ("train_tasks", "noise", "seeds", "sft_steps", "sft_batch", "sft_lr",
                                                 "lora_r", "sft_precision", "eval_dtype", "history_length",
                                                 "distill_steps_per_call", "skills_retries", "eval_episodes",
                                                 "eval_max_steps", "max_new_tokens", "llm_max_tokens", "threads",
                                                 "jobs", "base_model", "llm_base_url", "llm_model", "arms")},
           "arms": [{"name": r["name"], "label": r["label"], "run_id": r["run_id"], "trained": r["trained"],
                     "usefulness": r.get("usefulness", "off"), "seeds": r.get("seeds") or [],
                     "eval": {k: v for k, v in r["eval"].items() if k in (*EVAL_KEYS, "seeds", "ci_method")}
                     if r.get("eval") else None,
                     "per_seed": [{"seed": k, **{x: v[x] for x in EVAL_KEYS if x in v}}
                                  for k, v in (r.get("per_seed") or {}).items()],
                     "why": r.get("why", ""), "data": r.get("data")} for r in rows],
           "where_skills_used": where, "verdict": lines, **(extra or {}),
           "wall_s": {**{name: round(sec) for name, sec in timer.phases}, "total": round(time.monotonic() - timer.t0)}}
    path = os.path.join(a.root, RESULT_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, default=str)
    os.replace(tmp, path)
    if not a.quick:
        from bench.results import write_result as write_dated  # also a dated result file (bench/results.py)
        write_dated("outcome", {k: doc[k] for k in ("game", "game_params", "eval_seeds", "arms", "pooled", "paired",
                                                     "where_skills_used", "where_gated_used", "verdict", "plan",
                                                     "wall_s") if k in doc}, doc["budget"])
    return path


def exported_pairs(results: list) -> int:
    """SFT pairs the export of ``results`` (run_pipeline's) wrote; 0 when it has none."""
    return int(next((r.manifest.get("counts", {}).get("out") or 0 for r in results if r.stage == "export"), 0))


def unit_job(a: argparse.Namespace, u: Unit, pairs: int) -> tuple[list[tuple[str, float]], dict | None]:
    """The torch part of one unit, run in a worker process: SFT seed ``u.seed`` on the export of
    ``u.run_id`` then its held-out eval (a trained arm with ``pairs`` > 0), or the eval of the base
    model (``u.seed`` None). Returns the worker's timed phases and the eval summary with
    ``reused`` (both steps were skipped: unchanged fingerprints); None: no pair, nothing trained."""
    timer = Timer()
    if u.seed is None:
        s = timer.run("4 eval base", evaluate, a, "base", u.run_id)
        return timer.phases, {**s, "reused": bool(s.get("skipped"))}
    if not pairs:
        print(f"--- {u.label}: the export has no SFT pair; no SFT, no eval", flush=True)
        return timer.phases, None
    fit = timer.run(f"3 SFT ({u.label})", sft, a, u.run_id, u.seed)
    s = timer.run(f"4 eval {u.label}", evaluate, a, layout.SFT_STEP, u.run_id, u.seed)
    return timer.phases, {**s, "reused": bool(fit.get("skipped")) and bool(s.get("skipped"))}


#: Deadline of one unit's worker process (SFT plus 60-game eval took at most 36 min on 2 cores).
ARM_JOB_TIMEOUT_S = 4 * 3600.0


def run_units(a: argparse.Namespace, timer: Timer, jobs: list[tuple[Unit, int]],
              progress: plan.Progress | None = None) -> dict[str, dict | None]:
    """:func:`unit_job` of each ``(unit, pairs)``, ``a.jobs`` at a time, each in a child ``python
    bench/outcome.py --arm-job FILE`` (one after the other in this process when ``a.jobs`` is 1);
    returns each unit's eval summary by :attr:`Unit.label`. The workers' phases join ``timer`` and
    a ``3-4 arms (wall)`` phase records the wall time of all of them (the phases of parallel
    workers overlap); ``progress`` hears each unit start and finish. Raises ``RuntimeError`` naming
    the unit when a worker fails, and :class:`pipeline.core.waits.WaitTimeout` when one runs past
    :data:`ARM_JOB_TIMEOUT_S` (then every worker is killed)."""
    t0 = time.monotonic()
    out: dict[str, dict | None] = {}
    if a.jobs <= 1 or len(jobs) <= 1:
        for u, pairs in jobs:
            progress and progress.start(u.label)
            phases, out[u.label] = unit_job(a, u, pairs)
            timer.phases += phases
            progress and progress.finish(u.label, bool((out[u.label] or {}).get("reused")))
    else:
        out = _unit_workers(a, timer, jobs, progress)
    timer.phases.append(("3-4 arms (wall)", time.monotonic() - t0))
    return out


def _unit_workers(a: argparse.Namespace, timer: Timer, jobs: list[tuple[Unit, int]],
                  progress: plan.Progress | None) -> dict[str, dict | None]:
    """:func:`run_units` with child processes: each gets a job file (the options and its unit) and
    writes its result next to it. A worker's torch threads come from ``OMP_NUM_THREADS``
    (``a.threads``), so a unit whose steps are reused never imports torch to set them."""
    import tempfile
    from pipeline.core.waits import WaitTimeout, wait_exit
    os.makedirs(a.root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="arm-jobs-", dir=a.root)
    env = {**os.environ, **({"OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads)}
                            if a.threads else {})}
    todo, running, out = list(jobs), {}, {}
    try:
        while todo or running:
            while todo and len(running) < a.jobs:
                u, pairs = todo.pop(0)
                path = os.path.join(work, f"{u.arm}-{u.seed}.json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump({"args": vars(a), "unit": dataclasses.asdict(u), "pairs": pairs}, f)
                progress and progress.start(u.label)
                proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--arm-job", path], env=env)
                running[u.label] = (proc, path, time.monotonic())
            for label, (proc, path, started) in list(running.items()):
                if proc.poll() is None:
                    if time.monotonic() - started > ARM_JOB_TIMEOUT_S:
                        raise WaitTimeout(f"outcome unit {label}", proc.pid, ARM_JOB_TIMEOUT_S)
                    continue
                del running[label]
                if proc.returncode != 0:
                    raise RuntimeError(f"the worker of {label} failed (exit status {proc.returncode}); its "
                                       f"output is above")
                with open(path + ".out", encoding="utf-8") as f:
                    res = json.load(f)
                timer.phases += [tuple(p) for p in res["phases"]]
                out[label] = res["eval"]
                progress and progress.finish(label, bool((res["eval"] or {}).get("reused")))
            time.sleep(0.2 if not running else 1.0)
    finally:
        for proc, _, _ in running.values():  # an error or a deadline: leave no worker behind
            proc.kill()
            wait_exit(proc, "outcome unit job", 30, killed=True)
        shutil.rmtree(work, ignore_errors=True)
    return out


def arm_job_main(path: str) -> int:
    """Entry of one worker (``--arm-job FILE``): :func:`unit_job` of the job file's unit, its result
    written to ``FILE.out``."""
    with open(path, encoding="utf-8") as f:
        job = json.load(f)
    phases, summary = unit_job(argparse.Namespace(**job["args"]), Unit(**job["unit"]), job["pairs"])
    with open(path + ".out", "w", encoding="utf-8") as f:
        json.dump({"phases": phases, "eval": summary}, f, default=str)
    return 0


def arm_results(a: argparse.Namespace, chosen: list[Arm], evals: dict[str, dict | None]
                ) -> dict[str, dict[int, list[dict]] | None]:
    """Each chosen arm's evaluation rows by SFT seed (the base model's under seed 0), read from the
    eval artifacts of the units that were evaluated; None for an arm none of whose units was."""
    out: dict[str, dict[int, list[dict]] | None] = {}
    for w in chosen:
        seeds = [None] if not w.trained else w.seeds(a.seeds)
        got = {0 if k is None else k: steps.eval_rows(a.root, w.run_id(a.run_id), k) for k in seeds
               if evals.get(Unit(w.name, k, "").label)}
        out[w.name] = {k: v for k, v in got.items() if v is not None} or None
    return out


def citations(a: argparse.Namespace, which: Arm, rows_by_seed: dict[int, list[dict]] | None) -> dict | None:
    """:func:`bench.outcome_arms.where_skills_used` of ``which``'s evaluation episodes over all its
    seeds, against the bank its run shows (None when it was not evaluated)."""
    from pipeline.core.artifacts import ArtifactStore
    if not rows_by_seed:
        return None
    bank = ArtifactStore(a.root, which.run_id(a.run_id)).load("skills")
    episodes = [r for rows in rows_by_seed.values() for r in rows]
    return where_skills_used(episodes, bank.read_rows() if bank else [], "textworld")


def print_report(a: argparse.Namespace, rows: list[dict], where: dict[str, dict | None], q: dict, timer: Timer,
                 lines: list[str]) -> None:
    """Print the data-quality metrics of the skills arm's export, the arms' table, each seed's
    result, where the skills and gated arms cite their bank, the wall times and the verdict."""
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
    print(f"\n== arms: {a.game} ({a.game_params}), the same held-out dev seeds {a.eval_seed0}.."
          f"{a.eval_seed0 + a.eval_episodes - 1} for every arm and seed, greedy, <= {a.eval_max_steps} actions; data: "
          f"{a.train_tasks} training games, SFT {a.sft_steps} steps, history {a.history_length} ==")
    for line in arm_table(rows):
        print("  " + line)
    print("  (success: wins/(seeds x games), 95% CI: percentile bootstrap over games, seeds pooled; skill use: "
          "share of the pairs' thinks sharing >= 2 content words with a bank skill shown for the task, beyond "
          "task/observation/action; q distill / q pairs / q useful: share quarantined by distill, build_pairs, "
          "usefulness; bank: items in the arm's bank, gated: items its gate dropped)")
    print("\n== each seed (Wilson 95% interval over its games) ==")
    for r in rows:
        for k, s in (r.get("per_seed") or {}).items():
            lo, hi = s["success_ci95"]
            print(f"  {r['name']:8s} {'seed ' + str(k) if r['trained'] else '':8s} {s['wins']}/{s['episodes']} = "
                  f"{s['success_rate']:.3f} [{lo:.3f}, {hi:.3f}]{' (reused)' if s.get('reused') else ''}")
    for name, w in where.items():
        print(f"\n== where the {name} arm's thinks cite its bank (eval steps, all seeds; descriptive) ==")
        if w is None:
            print(f"  (the {name} arm was not evaluated)")
            continue
        print(f"  steps citing a skill: {w['citing_steps']}/{w['steps']} = {_fmt(w['step_rate'])}")
        print(f"  success of episodes with a citation: {w['wins_citing']}/{w['episodes_citing']} = "
              f"{_fmt(w['success_citing'])}; without: {w['wins_not_citing']}/{w['episodes_not_citing']}"
              f" = {_fmt(w['success_not_citing'])}")
    print("\n== wall time ==")
    for name, sec in timer.phases:
        print(f"  {name:34s} {sec:7.0f} s")
    print(f"  {'total (wall)':34s} {time.monotonic() - timer.t0:7.0f} s")
    print("\n== verdict (paired: per game, the win share over seeds of one arm minus the other's; mean over games "
          "with a seeded 95% percentile bootstrap interval over games) ==")
    for line in lines:
        print(line, flush=True)


def cores() -> int:
    """CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def start_plan(a: argparse.Namespace, chosen: list[Arm]) -> tuple[list[tuple[str, float]], list[Unit], int, dict]:
    """Print the plan and its estimate (:mod:`bench.outcome_plan`); returns ``(phases, units,
    parallel, the plan's figures for the result file)``."""
    t = plan.timings()
    phases, units, parallel = plan.estimate(a, plan.plan_units(chosen, a.run_id, a.seeds), t, cores())
    for line in plan.plan_text(a, chosen, phases, units, t, parallel, a.budget_minutes):
        print(line, flush=True)
    return phases, units, parallel, {"timings_from": t.source, "estimate_min": round(sum(s for _, s in phases) / 60, 1),
                                     "units": [u.label for u in units]}


def data_phases(a: argparse.Namespace, chosen: list[Arm], timer: Timer, progress: plan.Progress) -> dict[str, list]:
    """Steps 1-2b with a progress line per phase: the rollouts, the skills arm's data, each other
    trained arm's; returns each trained arm's ``run_pipeline`` results (skipped stages included)."""
    def phase(name: str, fn, *args):
        progress.start(name)
        t0 = time.monotonic()
        out = fn(*args)
        timer.phases.append((name, time.monotonic() - t0))
        progress.finish(name, bool(out.get("skipped") if isinstance(out, dict) else all(r.skipped for r in out)))
        return out

    phase("1 gold/noisy rollouts", rollouts, a)
    results = {"skills": phase("2 data pipeline (skills arm)", pipeline, a)}
    for w in chosen:
        if w.trained and w.name != "skills":
            results[w.name] = phase(f"2b data ({w.name} arm)", arm_data, a, w)
    return results


def arm_rows(a: argparse.Namespace, chosen: list[Arm], by_arm: dict, pools: dict, evals: dict) -> list[dict]:
    """One row per chosen arm for the table and the result file: its seeds, the evaluation pooled
    over them (:func:`pooled_eval`), each seed's summary, and a trained arm's data figures."""
    from pipeline.core.artifacts import ArtifactStore
    bank = ArtifactStore(a.root, a.run_id).load("skills")
    bank_rows = bank.read_rows() if bank else []
    rows = []
    for w in chosen:
        run_id, got = w.run_id(a.run_id), by_arm[w.name]
        row = {"name": w.name, "label": w.label, "run_id": run_id, "trained": w.trained, "usefulness": w.usefulness,
               "seeds": w.seeds(a.seeds), "eval": pooled_eval(got, pools[w.name]) if got else None,
               "per_seed": {k: evals[Unit(w.name, k if w.trained else None, "").label] for k in (got or {})}}
        if w.trained:
            row["data"] = data_figures(a.root, run_id, bank_rows)
            row["why"] = "" if got else "no SFT pair"
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the arms named by ``--arms`` and print the tables; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--arm-job"] and len(argv) == 2:  # a worker of run_units
        return arm_job_main(argv[1])
    a = parse_args(argv)
    chosen = [w for w in ARMS if w.name in a.arms]
    phases, units, parallel, plan_doc = start_plan(a, chosen)
    if a.dry_run:
        return 0
    os.makedirs(a.root, exist_ok=True)
    print("outcome experiment:", json.dumps(vars(a)), flush=True)
    timer, progress = Timer(), plan.Progress(phases[:-1], units, parallel)
    results = data_phases(a, chosen, timer, progress)
    if a.threads and a.jobs <= 1:  # the units run in this process
        import torch
        torch.set_num_threads(a.threads)
    evals = run_units(a, timer, [(u, exported_pairs(results[u.arm]) if u.seed is not None else 0) for u in units],
                      progress)
    by_arm = arm_results(a, chosen, evals)
    lines, pools, pairs = stats.verdict(a.game, {w.name: None if by_arm[w.name] is None else
                                                 {k: stats.per_game(v) for k, v in by_arm[w.name].items()}
                                                 for w in chosen}, a.bootstrap)
    rows = arm_rows(a, chosen, by_arm, pools, evals)
    trained = {w.name: pools[w.name]["rate"] for w in chosen if w.trained and w.name in pools}
    if a.grpo and trained:
        best = max(trained, key=trained.get)
        run_id = arm(best).run_id(a.run_id)
        timer.run(f"5 GRPO ({best})", grpo, a, run_id)
        s = timer.run(f"5b eval {best}+GRPO", evaluate, a, layout.GRPO_STEP, run_id)
        rows.append({"name": f"{best}+grpo", "label": f"{arm(best).label}, seed 0, then GRPO", "run_id": run_id,
                     "trained": True, "seeds": [0], "eval": s, "data": None})
    where = {w.name: citations(a, w, by_arm[w.name]) for w in chosen if w.name in ("skills", "gated")}
    print_report(a, rows, where, quality(a), timer, lines)
    path = write_result(a, rows, where.get("skills"), lines, timer,
                        {"pooled": pools, "paired": pairs, "where_gated_used": where.get("gated"), "plan": plan_doc,
                         "bootstrap": {"resamples": a.bootstrap, "seed": stats.BOOT_SEED, "level": 0.95}})
    print(f"\nresult file: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

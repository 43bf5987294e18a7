"""Evaluate a policy on held-out TextWorld Express games (or ALFWorld when its data is present).

``skillpipe eval`` and the DAG tasks ``eval_sft`` / ``eval_grpo`` call :func:`evaluate`. The
episodes are played by :func:`sft.rl.rollout.run_episodes`, so every prompt is rendered by
``pipeline.prompts`` exactly as for the SFT pairs and GRPO (same history window, skills block
from the same bank, skills from the first step).

Held-out games: training data of a pipeline run come from the TextWorld Express ``train`` fold
(``skillpipe rl rollout`` default, GRPO training games), and GRPO validates (and may evolve the bank)
on ``dev`` seeds ``0..val_tasks-1``; the default evaluation fold is ``test``, which the engine
generates from its own pool of game instances (Jansen & Côté 2023, TextWorldExpress, §3: folds
differ in seeds and, for several games, in object sets). :func:`check_held_out` also refuses any
evaluation game whose instance id (``game-fold-seed``) occurs in the run's exported pairs or
rollout artifact.

Metrics of a set of episodes (:func:`summarize`):

- ``success_rate`` = wins / episodes, with the 95 % **Wilson score interval** (E. B. Wilson,
  1927, "Probable inference, the law of succession, and statistical inference", JASA 22:209-212;
  computed by ``scipy.stats.binomtest(...).proportion_ci(method="wilson")``): it stays inside
  [0, 1] and is not degenerate at 0 or n wins, unlike the normal (Wald) interval;
- ``mean_reward``: mean episode reward in SkillRL's units (10 on a win, else 0);
  ``mean_score``: mean final engine score (normalised 0..1, partial progress);
- ``valid_action_rate``: steps whose output had ``<think>``/``</think>``/``<action>`` and an
  admissible action, over all steps; ``format_error_rate``: steps whose output broke the format
  (``sft.rl.rollout.project_action``); ``inadmissible_rate``: well-formed but not admissible;
- ``mean_steps``: actions per episode (an episode stops at a win, the engine's end, or ``max_steps``).

Outputs: the artifact ``runs/<run_id>/eval_<label>/`` (one Parquet row per episode,
:data:`EPISODE_SCHEMA`; ``summary.json``; ``_manifest.json`` with the summary and a fingerprint).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from typing import Any, Callable, Optional

import pyarrow as pa
import typer

from pipeline.core.config import build_flat
from pipeline.core.layout import (ARTIFACT_MANIFEST, CHECKPOINT_MANIFEST, EVAL_SUMMARY, GRPO_MANIFEST, GRPO_STEP,
                                  ROLLOUT_STAGE, RUNS_DIR, SFT_MANIFEST, SFT_STEP, eval_stage, run_dir)
from pipeline.core.recorder import counts
from pipeline.engine.steps import run_step
from pipeline.stage.step import StepOutput, TrainingStep
from pipeline.core.train_config import EvalConfig  # the `eval:` section of the run config


def typer_option(name: str, default: Any, help: str) -> Any:
    """``typer.Option(default, name, help=help)``: keeps the option table of :func:`eval_cmd` short."""
    return typer.Option(default, name, help=help)


EPISODE_SCHEMA = pa.schema([
    ("episode", pa.int32()), ("instance", pa.string()), ("game", pa.string()), ("fold", pa.string()),
    ("seed", pa.int64()), ("category", pa.string()), ("task", pa.string()), ("won", pa.bool_()),
    ("reward", pa.float64()), ("score", pa.float64()), ("steps", pa.int32()), ("valid_steps", pa.int32()),
    ("format_errors", pa.int32()), ("inadmissible", pa.int32()), ("actions", pa.list_(pa.string())),
    ("outputs", pa.list_(pa.string())), ("policy", pa.string()), ("bank_version", pa.string()),
])


def eval_config(**overrides: Any) -> EvalConfig:
    """An :class:`EvalConfig` from flat overrides (``games`` may be a comma-separated string);
    raises :class:`pipeline.core.config.ConfigError` for an unknown key, bad type or range, or an
    unknown TextWorld Express game."""
    from sft.rl.config import pop_prompt
    if isinstance(overrides.get("games"), str):
        overrides["games"] = [g.strip() for g in overrides["games"].split(",") if g.strip()]
    overrides, prompt = pop_prompt(overrides, "eval config")
    cfg = build_flat(EvalConfig, overrides, what="eval config")
    if prompt is not None:
        cfg.prompt = prompt
    return cfg.validate()


def wilson_interval(wins: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``wins / n`` (module docstring).

    Returns ``(low, high)`` in [0, 1]; ``(0.0, 1.0)`` when ``n == 0``. Raises ``ValueError``
    when ``wins`` is outside ``0..n``.

    >>> tuple(round(x, 4) for x in wilson_interval(0, 10))
    (0.0, 0.2775)
    """
    if n == 0:
        return 0.0, 1.0
    if not 0 <= wins <= n:
        raise ValueError(f"wins must be in 0..n, got {wins} of {n}")
    from scipy.stats import binomtest
    ci = binomtest(wins, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def make_tasks(cfg: EvalConfig) -> list[Any]:
    """The evaluation games: TextWorld Express ``EnvTask`` s of ``cfg.fold``, or ALFWorld tasks of
    ``valid_unseen`` (fold test) / ``valid_seen`` (fold dev); ``EnvUnavailable`` without ALFWorld data."""
    if cfg.env == "alfworld":
        from pipeline.envs.sim.alfworld import list_tasks
        return list_tasks("valid_unseen" if cfg.fold == "test" else "valid_seen", cfg.episodes)
    from pipeline.envs.sim.textworld import EnvTask
    g = len(cfg.games)
    return [EnvTask(cfg.games[i % g], cfg.seed0 + i // g, cfg.fold, cfg.game_params) for i in range(cfg.episodes)]


def training_instances(root: str, run_id: str) -> set[str]:
    """Instance ids that training data of run ``run_id`` came from: the exported pairs'
    ``env_instance`` and the run's ``rollout`` artifact (empty when the run has neither)."""
    from pipeline.core.artifacts import ArtifactStore
    store = ArtifactStore(root, run_id)
    seen: set[str] = set()
    for stage in ("export", ROLLOUT_STAGE):
        art = store.load(stage)
        if art is not None:
            seen |= set(art.read_table().column("env_instance").to_pylist())
    return seen


def check_held_out(tasks: list[Any], trained_on: set[str]) -> None:
    """Raise ``ValueError`` naming the games whose instance id is in ``trained_on``."""
    leaked = sorted({t.instance for t in tasks if getattr(t, "instance", None) in trained_on})
    if leaked:
        raise ValueError(f"evaluation games overlap the training data: {', '.join(leaked[:5])}"
                         f"{' ...' if len(leaked) > 5 else ''}; choose another --fold or --seed0")


def episode_row(i: int, ep: Any, task: Any) -> dict[str, Any]:
    """One :data:`EPISODE_SCHEMA` row of a :class:`sft.rl.rollout.Episode`."""
    s = ep.samples
    t = ep.trajectory
    return {"episode": i, "instance": t.env_instance, "game": getattr(task, "game", t.env),
            "fold": getattr(task, "fold", ""), "seed": getattr(task, "seed", None), "category": t.category,
            "task": t.task, "won": bool(ep.won), "reward": float(t.reward), "score": float(ep.score),
            "steps": len(s), "valid_steps": sum(x.valid for x in s), "format_errors": sum(not x.format_ok for x in s),
            "inadmissible": sum(x.format_ok and not x.admissible for x in s), "actions": [x.action for x in s],
            "outputs": [x.completion.text for x in s], "policy": json.loads(t.metadata).get("model", ""),
            "bank_version": json.loads(t.metadata).get("bank_version", "")}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Metrics of episode rows (module docstring), overall and ``per_game``.

    >>> summarize([{"game": "coin", "won": True, "reward": 10.0, "score": 1.0, "steps": 2,
    ...             "valid_steps": 2, "format_errors": 0, "inadmissible": 0}])["success_rate"]
    1.0
    """
    def block(rs: list[dict[str, Any]]) -> dict[str, Any]:
        n, wins, steps = len(rs), sum(r["won"] for r in rs), sum(r["steps"] for r in rs)
        lo, hi = wilson_interval(wins, n)
        return {"episodes": n, "wins": wins, "success_rate": wins / n if n else 0.0,
                "success_ci95": [round(lo, 4), round(hi, 4)],
                "mean_reward": sum(r["reward"] for r in rs) / n if n else 0.0,
                "mean_score": sum(r["score"] for r in rs) / n if n else 0.0,
                "valid_action_rate": sum(r["valid_steps"] for r in rs) / steps if steps else 0.0,
                "format_error_rate": sum(r["format_errors"] for r in rs) / steps if steps else 0.0,
                "inadmissible_rate": sum(r["inadmissible"] for r in rs) / steps if steps else 0.0,
                "mean_steps": steps / n if n else 0.0}
    games = sorted({r["game"] for r in rows})
    return {**block(rows), "ci_method": "wilson", "per_game": {g: block([r for r in rows if r["game"] == g])
                                                               for g in games}}


def play(policy: Any, tasks: list[Any], cfg: EvalConfig, bank_rows: list[dict], bank_version: str = "",
         progress: bool = True) -> list[dict[str, Any]]:
    """Play every task once with ``policy`` (batches of ``cfg.batch_size``); returns episode rows.

    Raises ``RuntimeError`` when the env engine cannot start (no Java / package)."""
    from pipeline.progress import bar as progress_bar
    from sft.rl.rollout import run_episodes

    from sft.rl.grpo import make_envs
    from sft.rl.config import GRPOConfig

    width = min(cfg.batch_size, len(tasks))
    gcfg = GRPOConfig(env=cfg.env, max_env_steps=cfg.max_steps)
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        envs = make_envs(gcfg, width)
        for e in envs:
            stack.callback(e.close)
        bar = stack.enter_context(progress_bar(len(tasks), f"eval {policy.model_id}"[:60], unit="ep",
                                               disable=not progress))
        for i in range(0, len(tasks), width):
            chunk = tasks[i:i + width]
            eps = run_episodes(envs[:len(chunk)], chunk, [f"eval:{t.instance}" for t in chunk], policy, bank_rows,
                               cfg.prompt, cfg.max_steps, cfg.env, record_offset=i, bank_version=bank_version)
            rows += [episode_row(i + j, ep, t) for j, (ep, t) in enumerate(zip(eps, chunk))]
            bar.update(len(chunk))
            bar.set_postfix(wins=sum(r["won"] for r in rows))
    return rows


class EvalStep(TrainingStep):
    """Play a policy on held-out games into ``runs/<run_id>/eval_<label>/``: one Parquet row per
    episode (:data:`EPISODE_SCHEMA`), ``summary.json``, the summary in the manifest.

    The policy is opened by ``open_policy(stack)`` (closed with ``stack``) only when the step runs;
    ``identity`` (weight hashes, a model id) names it in the fingerprint. Without one the policy
    cannot be named, so an earlier artifact is never reused."""
    # what the policy was trained on (the held-out check reads their instances)
    optional_inputs = ("export", ROLLOUT_STAGE)
    config_section = "eval"
    not_fingerprinted = ("torch_threads",)  # speed only
    manifest_name = ARTIFACT_MANIFEST

    def __init__(self, label: str, open_policy: Callable[[contextlib.ExitStack], Any],
                 identity: dict[str, Any] | None, bank_path: str = "", progress: bool = True):
        self.name, self.label = eval_stage(label), label
        self.open_policy, self.identity, self.bank_path, self.progress = open_policy, identity, bank_path, progress

    def _bank(self, cfg: EvalConfig) -> Any:
        from pipeline.bank.evolving import SkillBank
        if not self.bank_path:
            return SkillBank([], cfg.env)
        return SkillBank.load(self.bank_path, cfg.env, _bank_env(self.bank_path))

    def input_facts(self, store: Any, cfg: EvalConfig) -> list[dict[str, Any]]:
        """The policy's identity and the version of the bank in its prompts."""
        return [{"policy": self.identity or {}, "bank_version": self._bank(cfg).version}]

    def still_valid(self, store: Any, cfg: EvalConfig, prev: dict[str, Any]) -> bool:
        """Reuse only a named policy (same weights, bank and games: the same episodes)."""
        return bool(self.identity)

    def run(self, store: Any, cfg: EvalConfig) -> StepOutput:
        """Refuse training games (:func:`check_held_out`), play (:func:`play`); returns the episode
        rows, ``summary.json`` and the summary for the manifest (the step runner writes the artifact)."""
        from pipeline.core.records import to_table
        tasks = make_tasks(cfg)
        check_held_out(tasks, training_instances(store.root, store.run_id))
        bank = self._bank(cfg)
        with contextlib.ExitStack() as stack:
            policy = self.open_policy(stack)
            t0 = time.monotonic()
            rows = play(policy, tasks, cfg, bank.rows, bank.version, self.progress)
        summary = {"label": self.label, "policy": policy.model_id, "bank_version": bank.version,
                   "config": dataclasses.asdict(cfg), **summarize(rows), "wall_s": round(time.monotonic() - t0, 1)}
        return StepOutput({"stage": self.name, "run_id": store.run_id, "summary": summary,
                           "identity": self.identity or {}}, counts(len(tasks), len(rows), where=self.name),
                          rows=to_table(rows, EPISODE_SCHEMA),
                          extra_files={EVAL_SUMMARY: json.dumps(summary, indent=2, sort_keys=True)})

    def rows(self, manifest: dict[str, Any]) -> int:
        """Episodes played."""
        return manifest["counts"]["out"]

    def describe(self, manifest: dict[str, Any]) -> list[str]:
        """The summary line (:func:`format_summary`)."""
        return [format_summary(manifest["summary"])]


def evaluate(policy: Any, cfg: EvalConfig, root: str, run_id: str, label: str, bank_path: str = "",
             identity: dict[str, Any] | None = None, progress: bool = True) -> dict[str, Any]:
    """Evaluate ``policy`` into the artifact ``runs/<run_id>/eval_<label>/`` under ``root``
    (:class:`EvalStep` run by :func:`pipeline.engine.steps.run_step`).

    Args:
        policy: a ``sft.rl.rollout.Policy`` (``sft.rl.policy.HFPolicy``, ``OpenAIPolicy``, ``GoldPolicy``).
        bank_path: SkillRL bank JSON conditioning the prompts (the one the policy trained with);
            '' = no skills.
        identity: what names the policy (e.g. checkpoint hashes); goes into the fingerprint.

    Returns the summary (:func:`summarize`) plus ``uri``, ``rows``, ``fingerprint`` and ``skipped``:
    with an ``identity``, an earlier artifact of the same fingerprint (policy, bank, games and
    decoding; not ``torch_threads``) is returned instead of replaying. Raises ``ValueError`` when
    an evaluation game is in the run's training data (:func:`check_held_out`).
    """
    step = EvalStep(label, lambda stack: policy, identity, bank_path, progress)
    return _summary(run_step(step, root, run_id, cfg, log=lambda m: None))


def _summary(res: dict[str, Any]) -> dict[str, Any]:
    return {**res["summary"], **{k: res[k] for k in ("uri", "rows", "fingerprint", "skipped")}}


def _bank_env(bank_path: str) -> str:
    with open(bank_path, encoding="utf-8") as f:
        return (json.load(f).get("metadata") or {}).get("env", "")


def resolve_checkpoint(path: str) -> tuple[str, str]:
    """``(model folder for sft.rl.policy.load_model, skill bank JSON or '')`` for a policy path:
    an SFT output folder (``skillpipe_sft_manifest.json``; bank = the export's), a GRPO output
    folder (``grpo_manifest.json``: its final checkpoint), a GRPO checkpoint (``checkpoint.json``;
    bank = the checkpoint's), or any HF model / adapter folder (no bank). Raises
    ``FileNotFoundError`` for a path that is none of these."""
    if os.path.isfile(os.path.join(path, GRPO_MANIFEST)):
        with open(os.path.join(path, GRPO_MANIFEST), encoding="utf-8") as f:
            path = json.load(f)["checkpoint"]
    if os.path.isfile(os.path.join(path, CHECKPOINT_MANIFEST)):
        with open(os.path.join(path, CHECKPOINT_MANIFEST), encoding="utf-8") as f:
            bank = os.path.join(path, json.load(f).get("bank_file", "skill_bank.json"))
        return path, bank if os.path.isfile(bank) else ""
    if os.path.isfile(os.path.join(path, SFT_MANIFEST)):
        with open(os.path.join(path, SFT_MANIFEST), encoding="utf-8") as f:
            pairs = (json.load(f).get("config") or {}).get("pairs", "")
        bank = os.path.join(pairs, "skill_bank.json") if pairs else ""
        return path, bank if bank and os.path.isfile(bank) else ""
    if os.path.isfile(os.path.join(path, "config.json")) or os.path.isfile(os.path.join(path, "adapter_config.json")):
        return path, ""
    raise FileNotFoundError(f"{path} is not a model folder, SFT output, GRPO output or GRPO checkpoint")


def make_policy(spec: str, cfg: EvalConfig, stack: contextlib.ExitStack, log_dir: str, base_url: str = "",
                model: str = "", api_key_env: str = "", base_model: str = "") -> tuple[Any, str, dict[str, Any]]:
    """``(policy, skill bank path, identity)`` for a ``--policy`` value.

    ``base``: ``base_model`` (a HF folder; '' = the embedded SmolLM2-135M-Instruct converted to a
    Hugging Face model, the default SFT base) through ``HFPolicy`` (same
    tokenizer and decoding as a checkpoint, so base vs SFT is a fair comparison); ``embedded``:
    the llama.cpp server (started here, stopped with ``stack``); ``endpoint``: ``base_url`` +
    ``model``; ``gold``: the engine's gold plan (an upper bound, and a check of the harness);
    otherwise a checkpoint path (:func:`resolve_checkpoint`). Raises ``ValueError`` / ``FileNotFoundError``.
    """
    from sft.rl.rollout import GoldPolicy, OpenAIPolicy

    if spec == "gold":
        return GoldPolicy(), "", {"policy": "gold"}
    if spec == "embedded":
        from pipeline.llm.provider import embedded_endpoint
        from pipeline.llm.server import EMBEDDED_MODEL_ALIAS
        # the embedded policy is the small SmolLM2 (the student's base model), not the teacher
        url, alias, mid = embedded_endpoint(stack, log_dir, EMBEDDED_MODEL_ALIAS)
        return (OpenAIPolicy(url, alias, "", cfg.temperature, cfg.max_new_tokens, model_id=mid),
                "", {"policy": mid})
    if spec == "endpoint":
        if not base_url or not model:
            raise ValueError("--policy endpoint needs --base-url and --model")
        return (OpenAIPolicy(base_url, model, api_key_env, cfg.temperature, cfg.max_new_tokens),
                "", {"policy": f"{base_url}#{model}"})
    folder, bank, identity = model_policy(spec, base_model)
    return open_model_policy(folder, identity["policy"], cfg, stack), bank, identity


def model_policy(spec: str, base_model: str = "") -> tuple[str, str, dict[str, Any]]:
    """``(model folder, skill bank path or '', identity)`` of a model policy without loading it:
    ``base`` (``base_model``, '' = the embedded SmolLM2 converted to Hugging Face) or a checkpoint
    path (:func:`resolve_checkpoint`). The identity names the policy and hashes its weights and
    tokenizer (``sft.base_model.content_hashes``). Raises ``FileNotFoundError``."""
    from sft.base_model import content_hashes, ensure_base_model
    if spec == "base":
        folder, bank = str(ensure_base_model(base_model)), ""
        name = "base:" + (os.path.basename(os.path.normpath(base_model)) if base_model else "smollm2-135m-instruct")
    else:
        folder, bank = resolve_checkpoint(spec)
        name = f"hf:{os.path.abspath(spec)}"
    weights = os.path.join(folder, "policy") if os.path.isfile(os.path.join(folder, CHECKPOINT_MANIFEST)) else folder
    return folder, bank, {"policy": name, **content_hashes(weights)}


def open_model_policy(folder: str, name: str, cfg: EvalConfig, stack: contextlib.ExitStack) -> Any:
    """An ``HFPolicy`` of the model in ``folder`` (on the GPU when there is one) in ``cfg.dtype``,
    decoding as ``cfg`` says; ``stack`` is unused (the model lives as long as the policy)."""
    import torch

    from sft.rl.policy import HFPolicy, load_model
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    m, tok = load_model(folder, cfg.dtype)
    if torch.cuda.is_available():  # evaluation only: the GPU variant of bench/outcome.py
        m = m.to("cuda")
    return HFPolicy(m, tok, cfg.max_new_tokens, cfg.temperature, 1.0, model_id=name)


#: DAG/CLI checkpoint names of a run -> folder under ``runs/<run_id>/``.
RUN_CHECKPOINTS = {SFT_STEP: SFT_STEP, GRPO_STEP: GRPO_STEP}


def eval_for_run(root: str, run_id: str, which: str, cfg: EvalConfig | None = None,
                 log: Callable[[str], None] = print, progress: bool = True, base_model: str = "") -> dict[str, Any]:
    """Evaluate a run's checkpoint ``which`` (``sft_fit`` | ``grpo`` | ``base``) into
    ``runs/<run_id>/eval_<which>/``; the entry point of the DAG tasks ``eval_sft`` / ``eval_grpo``.

    ``base`` (``base_model``, '' = embedded SmolLM2) uses the run's exported bank, like SFT did.
    Prompts follow the run's recorded ``prompt`` section when it has a ``build_pairs`` artifact
    (:func:`sft.rl.config.run_prompt_config`), else ``cfg.prompt``.
    Runs :class:`EvalStep` through :func:`pipeline.engine.steps.run_step`: the model is loaded only
    when its weights, the bank or the games changed. Returns :func:`evaluate`'s dict.
    Raises ``FileNotFoundError`` when the checkpoint is missing, ``ValueError`` for an unknown name."""
    from pipeline.core.artifacts import ArtifactStore
    if which not in (*RUN_CHECKPOINTS, "base"):
        raise ValueError(f"unknown checkpoint {which!r}; choose from {', '.join([*RUN_CHECKPOINTS, 'base'])}")
    from sft.rl.config import PROMPT_STAGE, run_prompt_config
    cfg = cfg or EvalConfig()
    store = ArtifactStore(root, run_id)
    if store.load(PROMPT_STAGE) is not None:  # the prompts the run's pairs were rendered with
        cfg = dataclasses.replace(cfg, prompt=run_prompt_config(store))
    spec = "base" if which == "base" else os.path.join(store.run_dir, RUN_CHECKPOINTS[which])
    if spec != "base" and not os.path.isdir(spec):
        raise FileNotFoundError(f"no {which} checkpoint in {spec}")
    folder, bank, ident = model_policy(spec, base_model)
    if which == "base":
        export = store.load("export")
        path = os.path.join(export.path, "skill_bank.json") if export else ""
        bank = path if path and os.path.isfile(path) else ""
    step = EvalStep(which, lambda stack: open_model_policy(folder, ident["policy"], cfg, stack), ident, bank, progress)
    return _summary(run_step(step, root, run_id, cfg, log=log))


def format_summary(s: dict[str, Any]) -> str:
    """One line: success with its 95 % CI, mean reward/score, valid/format-error rates, mean steps."""
    lo, hi = s["success_ci95"]
    return (f"{s['policy']}: success {s['wins']}/{s['episodes']} = {s['success_rate']:.3f} "
            f"[95% CI {lo:.3f}-{hi:.3f}], mean reward {s['mean_reward']:.2f}, mean score {s['mean_score']:.3f}, "
            f"valid actions {s['valid_action_rate']:.3f}, format errors {s['format_error_rate']:.3f}, "
            f"mean steps {s['mean_steps']:.2f}")


def _run_of(policy: str) -> tuple[str, str] | None:
    """``(root, run_id)`` when ``policy`` is a folder ``<root>/runs/<run_id>/<name>[/...]``."""
    from pathlib import Path
    parts = Path(policy).resolve().parts
    hits = [i for i, p in enumerate(parts[:-2]) if p == RUNS_DIR]
    return (str(Path(*parts[:hits[-1]])), parts[hits[-1] + 1]) if hits else None


def cli_config(config: Optional[str], given: dict[str, Any]) -> EvalConfig:
    """The EvalConfig of ``skillpipe eval``: the options ``given`` (``None`` = not given) over the
    ``eval:`` section of the run config ``config`` (as the DAG's eval tasks read it), or over
    :class:`EvalConfig`'s defaults without one. A bad value is a usage error."""
    if config:
        from sft.cli import run_config_section
        return run_config_section(config, "eval", given)
    try:
        return eval_config(**{k: v for k, v in given.items() if v is not None})
    except ValueError as e:
        raise typer.BadParameter(str(e))


def eval_cmd(
    policy: str = typer_option("--policy", SFT_STEP, "sft_fit | grpo | base (of --run-id) | gold | embedded | "
                               "endpoint | a checkpoint folder (SFT output, GRPO output or checkpoint, HF model)"),
    run_id: str = typer_option("--run-id", "", "run whose checkpoint to evaluate / where eval_<label>/ goes "
                               "(default: the run of a runs/<id>/... policy path, else 'eval')"),
    root: str = typer_option("--root", "", "folder that holds runs/ (default: that of the policy path, else .)"),
    label: str = typer_option("--label", "", "output name: runs/RUN_ID/eval_LABEL/ (default from --policy)"),
    config: Optional[str] = typer_option("--config", None, "run config YAML (the file of skillpipe run --config): "
                                         "its eval: section, as the DAG's eval tasks read it (defaults: 4 games of "
                                         "<= 5 actions of 48 tokens); the options below override it"),
    games: Optional[str] = typer_option("--games", None, "comma-separated TextWorld Express games (default twc)"),
    game_params: Optional[str] = typer_option("--game-params", None, "TextWorld Express gameParams ('' = small "
                                              "defaults)"),
    fold: Optional[str] = typer_option("--fold", None, "held-out fold: test (default) | dev"),
    seed0: Optional[int] = typer_option("--seed0", None, "first seed (default 0)"),
    episodes: Optional[int] = typer_option("--episodes", None, "episodes (distinct games; default 8)"),
    max_steps: Optional[int] = typer_option("--max-steps", None, "actions per episode at most (default 10)"),
    max_new_tokens: Optional[int] = typer_option("--max-new-tokens", None, "new tokens per action (default 96)"),
    temperature: Optional[float] = typer_option("--temperature", None, "0 = greedy (the default)"),
    batch_size: Optional[int] = typer_option("--batch-size", None, "episodes in lock-step (default 8)"),
    env: Optional[str] = typer_option("--env", None, "textworld (default) | alfworld"),
    base_url: str = typer_option("--base-url", "", "endpoint URL for --policy endpoint"),
    model: str = typer_option("--model", "", "model name for --policy endpoint"),
    api_key_env: str = typer_option("--api-key-env", "", "env var holding the endpoint's API key"),
):
    """Play a policy on held-out games; print success (95 % Wilson CI), reward, valid-action and
    format-error rates, mean steps; write runs/RUN_ID/eval_LABEL/ (Parquet per episode + summary.json).
    Settings: each option given, over the eval: section of --config when given, else over the
    defaults shown below."""
    from pipeline.envs.sim.alfworld import EnvUnavailable
    cfg = cli_config(config, dict(env=env, games=games, game_params=game_params, fold=fold, seed0=seed0,
                                  episodes=episodes, max_steps=max_steps, max_new_tokens=max_new_tokens,
                                  temperature=temperature, batch_size=batch_size))
    found = _run_of(policy) if os.path.isdir(policy) else None
    root = root or (found[0] if found else ".")
    run_id = run_id or (found[1] if found else "eval")
    try:
        if policy in RUN_CHECKPOINTS or policy == "base":
            res = eval_for_run(root, run_id, policy, cfg, log=lambda m: None)
        else:
            if policy not in ("gold", "embedded", "endpoint") and not os.path.isdir(policy):
                raise typer.BadParameter(f"not a policy name or folder: {policy!r}", param_hint="--policy")
            lab = label or (policy if not os.path.isdir(policy) else os.path.basename(os.path.normpath(policy)))
            with contextlib.ExitStack() as stack:
                pol, bank, ident = make_policy(policy, cfg, stack, run_dir(root, run_id), base_url,
                                               model, api_key_env)
                res = evaluate(pol, cfg, root, run_id, lab.replace("/", "_"), bank, ident)
    except (FileNotFoundError, ValueError, EnvUnavailable) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)
    typer.echo(format_summary(res))
    typer.echo(json.dumps({k: res[k] for k in ("uri", "rows", "fingerprint", "success_rate", "success_ci95",
                                               "mean_reward", "valid_action_rate", "format_error_rate",
                                               "mean_steps", "per_game")}, indent=2))

"""Write rollout episodes as Parquet trajectories and as SkillRL rollout txt trees.

Parquet: one ``records.TRAJECTORY_SCHEMA`` row per episode, written as the ``rollout`` stage of
a run through :class:`~pipeline.core.artifacts.ArtifactStore` (atomic, with a manifest).

Text (SkillRL's rollout log layout, the one ``skillpipe run`` parses with ``pipeline.formats.skillrl_txt``)::

    <out>/env000/test1.txt ...      one folder per env instance (in first-seen order),
                                    one file per episode of it (K = 1..)
    === Trajectory for Test K, Env N ===
    Step -1 | Action: None | Reward: 0.000 | Done: False
    Obs: <the full prompt of the next turn>
    <blank line>
    Step 00 | Action: <projected action> | Reward: 10.000 | Done: True
    Obs: ...

As in SkillRL's writer the ``Obs:`` payload is the whole prompt of the next turn (here: our
renderer's system + blank line + user text, the SFT pair's alpaca ``instruction``), so the
parser recovers observation and admissible list from it, and step counts round-trip exactly.
"""
from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import ConfigError, PromptConfig
from pipeline.core.fsutil import atomic_write
from pipeline.core.layout import ARTIFACT_MANIFEST, ROLLOUT_STAGE
from pipeline.core.recorder import counts
from pipeline.stage.step import StepOutput, TrainingStep
from pipeline.prompts import render_step_messages
from pipeline.core.records import TRAJECTORY_SCHEMA, to_table
from sft.rl.rollout import Episode

STAGE = ROLLOUT_STAGE
#: Environment engines (one JVM each, ~100 MB) a rollout keeps at once; more tasks are played in chunks.
MAX_ENGINES = 8


@dataclass
class RolloutConfig:
    """What ``skillpipe rl rollout`` plays (its options have the help text): ``tasks`` games of
    ``games`` in ``env`` from fold ``fold`` (seeds ``seed0..``), ``episodes_per_task`` each, at most
    ``max_steps`` actions, by ``policy`` (gold with ``noise``/``noise_seed``, embedded, endpoint
    or a model folder) at ``temperature`` with ``max_tokens`` per action, prompts with
    ``history_length`` steps of history and the skills of ``skill_bank``."""
    env: str = "textworld"
    games: str = "twc"
    tasks: int = 4
    episodes_per_task: int = 2
    fold: str = "train"
    seed0: int = 0
    max_steps: int = 10
    policy: str = "embedded"
    base_url: str = ""
    model: str = ""
    api_key_env: str = ""
    temperature: float = 0.4
    max_tokens: int = 256
    skill_bank: str = ""
    history_length: int = 2
    game_params: str = ""
    noise: float = 0.0
    noise_seed: int = 0

    def game_list(self) -> list[str]:
        """``games`` as a list of names."""
        return [g.strip() for g in self.games.split(",") if g.strip()]


def prompt_text(messages: list[dict[str, str]]) -> str:
    """System + blank line + user: the prompt as one text (validate's alpaca ``instruction``)."""
    return messages[0]["content"] + "\n\n" + messages[1]["content"]


def render_txt(ep: Episode, test_no: int, env_no: int, prompt_cfg: PromptConfig) -> str:
    """One episode in the SkillRL rollout txt layout (module docstring)."""
    traj = ep.trajectory
    blocks = [f"=== Trajectory for Test {test_no}, Env {env_no} ==="]
    for j, step in enumerate(traj.steps):
        obs = prompt_text(render_step_messages(traj, j + 1, ep.skills_block, prompt_cfg))
        label = "-1" if j == 0 else f"{j - 1:02d}"
        action = "None" if step.action is None else step.action
        blocks.append(f"Step {label} | Action: {action} | Reward: {step.reward:.3f} | Done: {step.done}\nObs: {obs}")
    return "\n\n".join(blocks) + "\n"


def write_txt_tree(out_dir: str, episodes: list[Episode], prompt_cfg: PromptConfig) -> list[str]:
    """Write ``envNNN/testK.txt`` files under ``out_dir``; returns the paths, in write order.

    Env folders are numbered by first appearance of each ``env_instance``; K counts that
    instance's episodes from 1. Each file is written to a temp name and renamed.
    """
    env_no: dict[str, int] = {}
    tests: dict[str, int] = defaultdict(int)
    paths = []
    for ep in episodes:
        inst = ep.trajectory.env_instance
        n = env_no.setdefault(inst, len(env_no))
        tests[inst] += 1
        folder = os.path.join(out_dir, f"env{n:03d}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"test{tests[inst]}.txt")
        atomic_write(path, render_txt(ep, tests[inst], n, prompt_cfg))
        paths.append(path)
    return paths


def rollout_output(store: ArtifactStore, episodes: list[Episode], manifest: dict[str, Any]) -> StepOutput:
    """The episodes as what the ``rollout`` step of run ``store`` produced: one trajectory row per
    episode, counted, with the extra ``manifest`` fields (the step runner writes the artifact)."""
    rows = [ep.trajectory.to_row() for ep in episodes]
    return StepOutput({"stage": STAGE, "run_id": store.run_id, **manifest}, counts(len(rows), len(rows), where=STAGE),
                      rows=to_table(rows, TRAJECTORY_SCHEMA))


def tree_files(out: str) -> list[str]:
    """The rollout txt files (``envNNN/testK.txt``) under ``out``, sorted."""
    return sorted(glob.glob(os.path.join(glob.escape(out), "env[0-9]*", "test*.txt")))


class RolloutStep(TrainingStep):
    """Play a policy in an environment: the run's ``rollout`` artifact (one trajectory row per
    episode) and a SkillRL txt tree in ``out`` that ``skillpipe run`` parses.

    ``open_policy(stack)`` opens the policy (closed with ``stack``) only when the step runs;
    ``identity`` names it in the fingerprint. ``replace_tree``: clear an earlier tree in ``out``
    instead of refusing it (its files would be parsed with this one's)."""
    name = ROLLOUT_STAGE
    config_section = ""  # set on the command line (``skillpipe rl rollout``)
    # the key's variable name is no result; the bank counts by its version (input facts)
    not_fingerprinted = ("api_key_env", "skill_bank")
    manifest_name = ARTIFACT_MANIFEST

    def __init__(self, out: str, open_policy: Callable[[contextlib.ExitStack], Any], identity: dict[str, Any],
                 replace_tree: bool = False):
        self.out, self.open_policy, self.identity, self.replace_tree = out, open_policy, identity, replace_tree

    def input_facts(self, store: ArtifactStore, cfg: RolloutConfig) -> list[dict[str, Any]]:
        """The policy's identity and the version of the bank in its prompts."""
        from pipeline.bank.evolving import SkillBank
        return [{"policy": self.identity, "bank_version": SkillBank.load(cfg.skill_bank, cfg.env).version}]

    def still_valid(self, store: ArtifactStore, cfg: RolloutConfig, prev: dict[str, Any]) -> bool:
        """The txt tree of that rollout is still in ``out``, whole."""
        return prev.get("txt_tree") == os.path.abspath(self.out) and \
            [os.path.relpath(f, self.out) for f in tree_files(self.out)] == prev.get("txt_files")

    def run(self, store: ArtifactStore, cfg: RolloutConfig) -> StepOutput:
        """Play (:func:`play_rollouts`), write the txt tree; returns the episodes (:func:`rollout_output`).
        Raises ``ConfigError`` when ``out`` holds another tree (unless ``replace_tree``)."""
        old = tree_files(self.out)
        if old and not self.replace_tree:
            raise ConfigError(f"--out {self.out} already holds a rollout tree ({len(old)} files, e.g. {old[0]}); "
                              "choose an empty or new folder")
        episodes, model_id, bank_version = play_rollouts(cfg, self.open_policy, self.out)
        for f in old:
            os.remove(f)
        files = write_txt_tree(self.out, episodes, PromptConfig(history_length=cfg.history_length))
        from sft.rl.rollout import episode_summary
        return rollout_output(store, episodes, {
            "policy": model_id, "env": cfg.env, "bank_version": bank_version,
            "txt_tree": os.path.abspath(self.out), "txt_files": [os.path.relpath(f, self.out) for f in files],
            "summary": episode_summary(episodes)})

    def rows(self, manifest: dict[str, Any]) -> int:
        """Episodes played."""
        return manifest["counts"]["out"]


def play_rollouts(cfg: RolloutConfig, open_policy: Callable[[contextlib.ExitStack], Any],
                  log_dir: str) -> tuple[list[Episode], str, str]:
    """``(episodes, policy model id, bank version)``: ``cfg.episodes_per_task`` rounds over the
    chosen games, at most :data:`MAX_ENGINES` engines at once. Raises ``ConfigError`` for a bad
    env/games/count and ``EnvUnavailable`` for a missing ALFWorld."""
    from pipeline.bank.evolving import SkillBank
    from pipeline.progress import bar as progress_bar
    from sft.rl.grpo import make_envs
    from sft.rl.rollout import run_episodes
    chosen = chosen_tasks(cfg)
    bank = SkillBank.load(cfg.skill_bank, cfg.env)
    pcfg = PromptConfig(history_length=cfg.history_length)
    gcfg = engine_config(cfg)
    episodes: list[Episode] = []
    with contextlib.ExitStack() as stack:
        pol = open_policy(stack)
        envs = make_envs(gcfg, min(len(chosen), MAX_ENGINES))
        for e in envs:
            stack.callback(e.close)
        w = len(envs)
        bar = stack.enter_context(progress_bar(cfg.episodes_per_task * len(chosen), "rollout", unit="ep"))
        for k in range(cfg.episodes_per_task):
            for i in range(0, len(chosen), w):  # at most MAX_ENGINES JVMs, reused across chunks
                part = chosen[i:i + w]
                episodes += run_episodes(envs[:len(part)], part, [f"rollout:{t.instance}" for t in part], pol,
                                         bank.rows, pcfg, cfg.max_steps, cfg.env, record_offset=k * len(chosen) + i,
                                         bank_version=bank.version)
                bar.update(len(part))
    return episodes, getattr(pol, "model_id", ""), bank.version


def chosen_tasks(cfg: RolloutConfig) -> list[Any]:
    """The games a rollout plays: the ``train`` or ``dev`` fold's tasks of ``cfg`` (TextWorld:
    seeds shifted by ``seed0``). Raises ``ConfigError`` for a bad env, games or count."""
    from sft.rl.grpo import make_task_lists
    train_tasks, dev_tasks = make_task_lists(engine_config(cfg))
    chosen = dev_tasks if cfg.fold == "dev" else train_tasks
    if cfg.env == "textworld" and cfg.seed0:
        chosen = [dataclasses.replace(t, seed=t.seed + cfg.seed0) for t in chosen]
    return chosen


def engine_config(cfg: RolloutConfig) -> Any:
    """The ``GRPOConfig`` that makes the rollout's engines and task lists (validated); raises
    ``ConfigError`` for a bad env, games or count."""
    from sft.rl.config import GRPOConfig
    return GRPOConfig(env=cfg.env, games=cfg.game_list(), train_seeds=cfg.tasks, val_tasks=cfg.tasks,
                      max_env_steps=cfg.max_steps, game_params=cfg.game_params).validate()

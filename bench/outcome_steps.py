"""One SFT seed of an outcome arm as its own fingerprinted steps: ``sft_fit`` and its evaluation.

Seed 0 of an arm is the run's own ``sft_fit`` step (what ``skillpipe report``, ``--grpo`` and
``skillpipe eval`` of the run see); seed ``k > 0`` is the step ``sft_fit_seed<k>`` of the same
run, the same :class:`sft.run_step.SFTFitStep` with ``sft.seed = k`` and its own folder::

    runs/<arm run>/sft_fit/              seed 0     runs/<arm run>/eval_sft_fit/
    runs/<arm run>/sft_fit_seed1/        seed 1     runs/<arm run>/eval_sft_fit_seed1/

Both run through :func:`pipeline.engine.steps.run_step`, so each is skipped when its fingerprint
(the export's content, the SFT settings with the seed; the checkpoint's weights, the bank and
the games for the evaluation) matches what its folder recorded: an interrupted ``make outcome``
redoes only the seeds it had not finished, and a finished one reruns in seconds. Nothing here
writes a manifest.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from pipeline.core.layout import SFT_STEP, eval_stage
from sft.run_step import SFTFitStep


def fit_name(seed: int) -> str:
    """The step (folder) of SFT seed ``seed``: ``sft_fit`` for 0, else ``sft_fit_seed<seed>``."""
    if seed < 0:
        raise ValueError(f"an SFT seed is >= 0, got {seed}")
    return SFT_STEP if seed == 0 else f"{SFT_STEP}_seed{seed}"


def eval_name(seed: int | None) -> str:
    """The evaluation artifact of SFT seed ``seed`` (``eval_sft_fit[_seed<k>]``); ``eval_base`` for None."""
    return eval_stage("base" if seed is None else fit_name(seed))


class SeedFitStep(SFTFitStep):
    """:class:`sft.run_step.SFTFitStep` with ``sft.seed`` set to ``seed``, in folder :func:`fit_name`."""

    def __init__(self, seed: int):
        self.seed, self.name = seed, fit_name(seed)

    def configure(self, store: Any, cfg: Any) -> Any:
        """The SFT step's configuration (the run's export, this step's folder) with ``seed``."""
        from sft.config import SFTFitConfig
        return super().configure(store, dataclasses.replace(cfg or SFTFitConfig(), seed=self.seed))


def fit_seed(root: str, run_id: str, cfg: Any, seed: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """SFT seed ``seed`` of run ``run_id`` (:class:`SeedFitStep` by ``run_step``): the checkpoint
    manifest plus ``skipped``, ``uri``, ``rows``, ``fingerprint``."""
    from pipeline.engine.steps import run_step
    return run_step(SeedFitStep(seed), root, run_id, cfg, log=log)


def eval_seed(root: str, run_id: str, seed: int, cfg: Any, base_model: str = "",
              log: Callable[[str], None] = print) -> dict[str, Any]:
    """Evaluate SFT seed ``seed``'s checkpoint of run ``run_id`` into :func:`eval_name` as
    :func:`sft.eval.eval_for_run` does for ``sft_fit`` (the run's prompt section, the export's
    bank, the checkpoint's hashes as the policy's identity), for any seed. Returns the summary
    plus ``uri``, ``rows``, ``fingerprint``, ``skipped``. Raises ``FileNotFoundError`` when the
    seed has no checkpoint."""
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.engine.steps import run_step
    from sft.eval import EvalStep, model_policy, open_model_policy
    from sft.rl.config import PROMPT_STAGE, run_prompt_config
    store = ArtifactStore(root, run_id)
    if store.load(PROMPT_STAGE) is not None:  # the prompts the run's pairs were rendered with
        cfg = dataclasses.replace(cfg, prompt=run_prompt_config(store))
    spec = os.path.join(store.run_dir, fit_name(seed))
    if not os.path.isdir(spec):
        raise FileNotFoundError(f"no SFT checkpoint of seed {seed} in {spec}")
    folder, bank, ident = model_policy(spec, base_model)
    step = EvalStep(fit_name(seed), lambda stack: open_model_policy(folder, ident["policy"], cfg, stack), ident,
                    bank, progress=False)
    res = run_step(step, root, run_id, cfg, log=log)
    return {**res["summary"], **{k: res[k] for k in ("uri", "rows", "fingerprint", "skipped")}}


def eval_rows(root: str, run_id: str, seed: int | None) -> list[dict[str, Any]] | None:
    """The episode rows of :func:`eval_name` of ``seed`` in run ``run_id`` (None when it has no
    complete evaluation)."""
    from pipeline.core.artifacts import ArtifactStore
    art = ArtifactStore(root, run_id).load(eval_name(seed))
    return art.read_rows() if art else None

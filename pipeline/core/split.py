"""Train/val split by environment instance, decided once, before the skill bank is built.

The rule: every trajectory of one ``env_instance`` (env folder / game file / WebShop session)
lands in the same split. Only instances with a successful trajectory are drawn (SFT pairs come
from successes only, so a failure-only instance in val would leave the validation split empty);
the others are train. A drawn instance's split depends only on its own name, the seed and
``export.val_fraction`` (see :func:`split_instances`).

The assignment is an artifact of its own, written by the ``split`` stage right after
``verify`` (one row per instance, :data:`~pipeline.core.records.SPLIT_SCHEMA`), and read by
``skills`` and ``export`` (:func:`read_assignment`). Why before the bank: the skill bank is
distilled from memories, and a skill can quote its source memory almost verbatim (a WebShop skill
naming the very product a session searched for). If memories of val instances fed the bank,
those skills would reach train prompts and the val prompts of the instance they came from, so
val would measure recall of leaked answers. ``skills`` therefore keeps val instances' memories
out of the bank, and ``export`` splits the pairs with the same assignment, so val is exactly
the set of instances the bank never saw.
"""
from __future__ import annotations

from typing import Any, Iterable

from pipeline.core.artifacts import StageArtifact
from pipeline.core.lineage import content_hash


def split_instances(instances: Iterable[str], val_fraction: float, seed: int) -> dict[str, str]:
    """Assign each environment instance to ``"train"`` or ``"val"``.

    An instance goes to val when ``sha256(seed, instance)`` read as a number in [0, 1) is below
    ``val_fraction``, so the assignment of one instance never depends on the others. With fewer
    than 2 instances, or ``val_fraction <= 0``, everything is train. Otherwise both splits are
    kept non-empty: if the draw puts no instance in val, the instance with the smallest hash
    moves there; if it puts all in val, the one with the largest hash stays in train.
    Returns ``{instance: "train" | "val"}`` over the distinct names.
    """
    names = sorted(set(instances))
    if len(names) < 2 or val_fraction <= 0:
        return {n: "train" for n in names}
    score = {n: int(content_hash(seed, n), 16) / 16 ** 16 for n in names}
    val = {n for n in names if score[n] < val_fraction}
    if not val:
        val = {min(names, key=score.__getitem__)}
    if len(val) == len(names):
        val.discard(max(names, key=score.__getitem__))
    return {n: "val" if n in val else "train" for n in names}


def split_rows(instances: Iterable[str], succeeded: set[str], val_fraction: float, seed: int
               ) -> list[dict[str, Any]]:
    """The rows of the ``split`` artifact, sorted by instance: the instances in ``succeeded``
    (those with a successful trajectory) drawn by :func:`split_instances` (``rule`` ``"hash"``),
    every other one train (``rule`` ``"no_success"``)."""
    names = sorted(set(instances))
    drawn = split_instances([n for n in names if n in succeeded], val_fraction, seed)
    return [{"env_instance": n, "split": drawn.get(n, "train"), "rule": "hash" if n in drawn else "no_success",
             "val_fraction": float(val_fraction), "seed": int(seed)} for n in names]


def read_assignment(artifact: StageArtifact) -> dict[str, str]:
    """``{env_instance: "train" | "val"}`` of a ``split`` artifact."""
    table = artifact.read_table()
    return dict(zip(table.column("env_instance").to_pylist(), table.column("split").to_pylist()))

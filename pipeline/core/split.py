"""Train/val split by environment instance, decided once, before the skill bank is built.

The rule (DESIGN §3.7): every trajectory of one ``env_instance`` (env folder / game file / WebShop
session) lands in the same split, and an instance's split depends only on its own name, the seed
and ``export.val_fraction`` (see :func:`split_instances`).

Why it runs in ``skills`` and not only in ``export``: the skill bank is distilled from
memories, and a skill can quote its source memory almost verbatim (a WebShop skill naming the very
product a session searched for). If memories of val instances fed the bank, those skills would
reach train prompts and the val prompts of the instance they came from, so val would measure
recall of leaked answers. ``skills`` therefore splits first, builds the bank from train
instances only and records the assignment in its manifest (``counters["split"]``, see
:func:`split_record`); ``export`` reuses that record so the val split is exactly the set of
instances kept out of the bank (:func:`assignment_from_record`).
"""
from __future__ import annotations

from typing import Any, Iterable

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


def split_record(assignment: dict[str, str], val_fraction: float, seed: int) -> dict[str, Any]:
    """The manifest record of an assignment: ``{"val_fraction", "seed", "val_instances": [sorted],
    "train_instances": [sorted]}`` (JSON-ready; both lists so a reader can tell a recorded train
    instance from one the record never saw)."""
    return {"val_fraction": val_fraction, "seed": seed,
            "val_instances": sorted(n for n, s in assignment.items() if s == "val"),
            "train_instances": sorted(n for n, s in assignment.items() if s == "train")}


def assignment_from_record(record: dict[str, Any] | None, instances: Iterable[str], val_fraction: float,
                           seed: int) -> dict[str, str]:
    """Split of ``instances``: the recorded split (``split_record``) for every instance it lists,
    :func:`split_instances` for the rest (all of them when ``record`` is None or empty).

    The fallback draws only the unrecorded instances, so a recorded instance never changes side.
    """
    names = sorted(set(instances))
    recorded: dict[str, str] = {}
    for split in ("train", "val"):
        recorded.update({n: split for n in (record or {}).get(f"{split}_instances", [])})
    rest = split_instances([n for n in names if n not in recorded], val_fraction, seed)
    return {n: recorded.get(n) or rest[n] for n in names}

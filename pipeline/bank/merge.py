"""Merge near-duplicate skills by sentence-embedding cosine similarity (skills stage).

The reference never deduplicates skills across calls; a general skill and a category skill, or
two mistakes, often say the same thing in other words. Near-duplicates are merged
by the cosine similarity of their sentence embeddings (:mod:`pipeline.encoder`, the MiniLM that
rule ``off_topic`` uses too).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.encoder import Encoder, encode


def skill_text(row: dict[str, Any]) -> str:
    """What is compared: title, principle, when_to_apply (mistakes: description, why, how), joined by '. '."""
    keys = ("description", "why_it_happens", "how_to_avoid") if row["kind"] == "mistake" \
        else ("title", "principle", "when_to_apply")
    return ". ".join((row.get(k) or "").strip().rstrip(".") for k in keys if (row.get(k) or "").strip())


#: Two skills of a group whose principles alone (mistakes: descriptions) reach this cosine
#: similarity are one skill whatever their titles: the 1.5B teacher wrote "Heat Eggs" and "Heat
#: Water" with the same principle and condition word for word (whole-text similarity 0.893, under
#: the 0.9 merge threshold, because the titles differ), while the paraphrased principles of
#: tests/pipeline/stages/test_skills.py stay apart.
SAME_CORE = 0.97


def core_text(row: dict[str, Any]) -> str:
    """The rule itself, without its label: the principle of a skill, the description of a mistake."""
    return (row.get("description" if row["kind"] == "mistake" else "principle") or "").strip()


def merge_similar(rows: list[dict[str, Any]], threshold: float, encoder: Encoder | None = None,
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Greedy merge of near-duplicates within each (kind, category) group, order kept.

    A row whose cosine similarity to an earlier kept row of its group is ``>= threshold`` (or
    whose principle's is ``>= SAME_CORE``, :func:`core_text`) is dropped and its
    ``source_memory_ids`` / ``source_trajectory_ids`` are unioned into that row (the most
    similar one). Then a task-specific row that is as similar to a general row merges
    into it (every prompt of a category shows the general skills too). Exact duplicates (same
    ``skill_id``) always merge, without encoding.

    Returns ``(kept_rows, merges)`` with one ``{kept, dropped, kind, category, similarity}`` dict
    per merge (similarity rounded to 4 decimals). ``encoder`` defaults to :func:`encode`.
    """
    kept: list[dict[str, Any]] = []
    merges: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    unique: list[dict[str, Any]] = []
    for r in rows:  # exact duplicates first: identical content needs no model
        if r["skill_id"] in by_id:
            _absorb(by_id[r["skill_id"]], r)
            merges.append(_merge_record(by_id[r["skill_id"]], r, 1.0))
        else:
            r = dict(r, source_memory_ids=list(r["source_memory_ids"]),
                     source_trajectory_ids=list(r["source_trajectory_ids"]))
            by_id[r["skill_id"]] = r
            unique.append(r)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(unique):
        groups.setdefault((r["kind"], r["category"]), []).append(i)
    kinds = {r["kind"] for r in unique}
    if any(len(ix) > 1 for ix in groups.values()) or {"general", "task_specific"} <= kinds:
        # one encoder call for both texts of every row: whole items first, then their principles
        both = (encoder or encode)([skill_text(r) for r in unique] + [core_text(r) for r in unique])
        vecs, cores = both[:len(unique)], both[len(unique):]
    dropped: set[int] = set()
    for ix in groups.values():
        for pos, i in enumerate(ix):
            earlier = [j for j in ix[:pos] if j not in dropped]
            if not earlier:
                continue
            # a principle repeated under another title counts as reaching the threshold
            same = (cores[earlier] @ cores[i]) >= SAME_CORE
            full = (vecs[earlier] @ vecs[i]).astype(np.float64)  # float64: threshold itself must compare >=
            sims = np.where(same, np.maximum(full, threshold), full)
            best = int(np.argmax(sims))
            if float(sims[best]) >= threshold:
                target = unique[earlier[best]]
                _absorb(target, unique[i])
                merges.append(_merge_record(target, unique[i], float(sims[best])))
                dropped.add(i)
    if {"general", "task_specific"} <= kinds:
        _merge_into_general(unique, vecs, threshold, dropped, merges)
    kept = [r for i, r in enumerate(unique) if i not in dropped]
    return kept, merges


def _merge_into_general(rows: list[dict[str, Any]], vecs, threshold: float, dropped: set[int],
                        merges: list[dict[str, Any]]) -> None:
    """Merge each task-specific row (not yet dropped) whose best cosine similarity to a kept
    general row is ``>= threshold`` into that row: a skill repeated for a category adds nothing
    to its prompts, which show the general skills too."""
    general = [i for i, r in enumerate(rows) if r["kind"] == "general" and i not in dropped]
    for i, r in enumerate(rows):
        if r["kind"] != "task_specific" or i in dropped or not general:
            continue
        sims = vecs[general] @ vecs[i]
        best = int(np.argmax(sims))
        if float(sims[best]) >= threshold:
            _absorb(rows[general[best]], r)
            merges.append(_merge_record(rows[general[best]], r, float(sims[best])))
            dropped.add(i)


def _absorb(target: dict[str, Any], other: dict[str, Any]) -> None:
    for key in ("source_memory_ids", "source_trajectory_ids"):
        target[key] = sorted(set(target[key]) | set(other[key]))


def _merge_record(kept: dict[str, Any], dropped: dict[str, Any], sim: float) -> dict[str, Any]:
    # an exact duplicate has the same content-derived id as the row it merged into
    return {"kept": kept["skill_id"], "dropped": dropped["skill_id"], "kind": kept["kind"],
            "category": kept["category"], "similarity": round(sim, 4),
            "exact_duplicate": kept["skill_id"] == dropped["skill_id"]}

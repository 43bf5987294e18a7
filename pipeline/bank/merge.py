"""Merge near-duplicate skills by sentence-embedding cosine similarity (skills stage).

The reference never deduplicates skills across calls; a general skill and a category skill, or
two mistakes, often say the same thing in other words. Near-duplicates are merged
by the cosine similarity of their sentence embeddings (:mod:`pipeline.encoder`, the MiniLM that
rule ``off_topic`` uses too).
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from pipeline.bank.rows import TEXT_FIELDS, skill_content
from pipeline.core import lineage
from pipeline.encoder import Encoder, encode
from pipeline.quality.actions import OBJECTS, singular


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

    First, a row that is an earlier one written for another object kind merges into it, which
    then says "object" (:func:`object_swap`, :func:`generalise`).

    Returns ``(kept_rows, merges)`` with one ``{kept, dropped, kind, category, similarity}`` dict
    per merge (similarity rounded to 4 decimals; an object-swap merge has similarity 1.0 and an
    ``object_swap`` key, ``"mug/egg"``). ``encoder`` defaults to :func:`encode`.
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
    unique = _merge_object_swaps(unique, merges)
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


_PIECES = re.compile(r"[A-Za-z]+|[^A-Za-z]+")


def object_swap(a: str, b: str) -> tuple[str, str] | None:
    """``(x, y)`` when texts ``a`` and ``b`` are the same words, case aside, except that ALFWorld
    object kind ``x`` (:data:`~pipeline.quality.actions.OBJECTS`; its plural too) stands in ``a``
    wherever ``y`` stands in ``b``; else ``None`` (also for equal texts). The 1.5B teacher wrote
    "Heat Mug with Microwave: When the goal asks for a hot mug, take it first ..." and the same
    item for an egg: one rule, which the similarity merge kept apart. A swap of receptacles
    ("with microwave" / "with stoveburner") is another rule and is not matched."""
    pa, pb = _PIECES.findall(a.lower()), _PIECES.findall(b.lower())
    if len(pa) != len(pb):
        return None
    pairs = {(singular(x), singular(y)) for x, y in zip(pa, pb) if x != y}
    if len(pairs) != 1:
        return None
    x, y = next(iter(pairs))
    return (x, y) if x in OBJECTS and y in OBJECTS else None


def generalise(text: str, kind: str) -> str:
    """``text`` with object kind ``kind`` (and its plural) written as "object"/"objects", in the
    case it had ("Mug" -> "Object"), and "a object" made "an object"."""
    def word(m: re.Match) -> str:
        new = "objects" if m.group(0).lower() != kind else "object"
        return new.capitalize() if m.group(0)[0].isupper() else new
    out = re.sub(rf"\b{re.escape(kind)}s?\b", word, text, flags=re.I)
    return re.sub(r"\b([Aa]) (?=[Oo]bjects?\b)", r"\1n ", out)


def _swap_of(kept: dict[str, Any], row: dict[str, Any]) -> tuple[str, str] | None:
    """The object swap that turns ``kept`` into ``row`` in every text field (fields may also be
    equal; the rule's own text must differ), else ``None``."""
    core = object_swap(core_text(kept), core_text(row))
    if core is None:
        return None
    for key in TEXT_FIELDS:
        a, b = (kept.get(key) or "").strip(), (row.get(key) or "").strip()
        if a != b and object_swap(a, b) != core:
            return None
    return core


def _merge_object_swaps(rows: list[dict[str, Any]], merges: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with each row that is an earlier row of its (kind, category) with another object
    kind (:func:`_swap_of`) merged into it; the kept row is generalised (:func:`generalise`) and
    gets the ``skill_id`` of its new text (merge records already naming it follow)."""
    out: list[dict[str, Any]] = []
    for r in rows:
        found = next(((k, swap) for k in out if (k["kind"], k["category"]) == (r["kind"], r["category"])
                      and (swap := _swap_of(k, r))), None)
        if found is None:
            out.append(r)
            continue
        target, (x, y) = found
        old = target["skill_id"]
        _absorb(target, r)
        for key in TEXT_FIELDS:
            if target.get(key):
                target[key] = generalise(target[key], x)
        target["skill_id"] = lineage.skill_id(target["kind"], target["category"], skill_content(target))
        for m in merges:
            m["kept"] = target["skill_id"] if m["kept"] == old else m["kept"]
        merges.append(dict(_merge_record(target, r, 1.0), object_swap=f"{x}/{y}"))
    return out

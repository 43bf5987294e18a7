"""The skill bank as SkillRL JSON: export our skill rows, import official banks.

SkillRL's bank (``memory_data/*/claude_style_skills*.json``) is one JSON object::

    general_skills        [{skill_id, title, principle, when_to_apply}]
    task_specific_skills  {category: [{skill_id, title, principle, when_to_apply}]}
    common_mistakes       [{mistake_id, description, why_it_happens, how_to_avoid}]
    metadata              {...}

The official Search bank names its category key ``query_type_skills``; SkillRL's online
retriever only reads ``task_specific_skills`` so Search never got category skills (D-K2). We
always WRITE ``task_specific_skills`` and READ both. Numbered ids (``gen_001``, ``pic_001``,
``err_001``) are assigned consecutively at export, after validation (D-M8); rows keep their
content-hash ``skill_id`` (``pipeline.core.lineage.skill_id``). Unlike the reference (D-M6), every
exported skill carries ``source_memory_ids`` and the metadata maps each numbered id to its row id
and source trajectories. SkillRL ignores the extra keys.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from pipeline.core import lineage
from pipeline.core.records import MISTAKE_FIELDS, SKILL_FIELDS

TEXT_FIELDS = SKILL_FIELDS + MISTAKE_FIELDS
CATEGORY_KEYS = ("task_specific_skills", "query_type_skills")


def skill_content(row: dict[str, Any]) -> dict[str, str]:
    """The text fields of a skill row that define it (its identity and bank version)."""
    return {k: (row.get(k) or "") for k in TEXT_FIELDS}


def bank_version(rows: Iterable[dict[str, Any]]) -> str:
    """``bank-<hash>`` of the sorted (kind, category, content) of all skills: order-independent."""
    items = sorted(lineage.content_hash(r["kind"], r.get("category") or "", skill_content(r), n=64) for r in rows)
    return "bank-" + lineage.content_hash(items)


def category_prefix(category: str) -> str:
    """First 3 letters of the category key after removing non-letters (as SkillRL numbers them): ``look_at..`` -> ``loo``."""
    letters = re.sub(r"[^a-z]", "", category.lower())
    return letters[:3] or "cat"


def make_row(kind: str, category: str, texts: dict[str, str], source_memory_ids=(), source_trajectory_ids=(),
             bank: str = "", model: str = "", prompt_sha: str = "", env: str = "") -> dict[str, Any]:
    """A ``records.SKILL_SCHEMA`` row; ``skill_id`` = ``lineage.skill_id(kind, category, content)``."""
    content = {k: (texts.get(k) or "").strip() for k in TEXT_FIELDS}
    category = category if kind == "task_specific" else ""
    return {"skill_id": lineage.skill_id(kind, category, content), "env": env, "kind": kind, "category": category,
            **content, "source_memory_ids": sorted(set(source_memory_ids)),
            "source_trajectory_ids": sorted(set(source_trajectory_ids)),
            "bank_version": bank, "model": model, "prompt_sha": prompt_sha, "usefulness": None}


def to_skillrl_json(skill_rows: list[dict[str, Any]], metadata: dict[str, Any] | None = None,
                    categories: Iterable[str] | None = None) -> dict[str, Any]:
    """The SkillRL bank JSON of ``skill_rows`` (``records.SKILL_SCHEMA`` rows, bank order kept).

    Args:
        skill_rows: rows with ``kind`` general | task_specific | mistake.
        metadata: extra metadata merged over ours (e.g. ``source``, ``task_distribution``).
        categories: category keys to emit, in order, each present even when empty (the official
            banks list every category); categories of the rows not in it are appended.

    Returns a dict with ``general_skills``, ``task_specific_skills``, ``common_mistakes`` and
    ``metadata`` = {bank_version, counts {general, task_specific {cat: n}, mistakes},
    lineage {numbered id: {skill_id, source_memory_ids, source_trajectory_ids}}, ...}. A scored
    item also carries ``usefulness`` ({score, n, lo, hi, method, scorer, version}), which
    SkillRL's loader ignores.
    Raises ``ValueError`` for an unknown ``kind``.
    """
    cats = list(categories or [])
    groups: dict[str, list[dict[str, Any]]] = {"general": [], "mistake": []}
    by_cat: dict[str, list[dict[str, Any]]] = {c: [] for c in cats}
    for r in skill_rows:
        if r["kind"] == "task_specific":
            by_cat.setdefault(r["category"], []).append(r)
        elif r["kind"] in groups:
            groups[r["kind"]].append(r)
        else:
            raise ValueError(f"skill {r.get('skill_id')} has unknown kind {r['kind']!r}")
    lineage_map: dict[str, dict[str, Any]] = {}

    def entry(r: dict[str, Any], num: str, id_key: str, fields: tuple[str, ...]) -> dict[str, Any]:
        lineage_map[num] = {"skill_id": r["skill_id"], "source_memory_ids": list(r["source_memory_ids"]),
                            "source_trajectory_ids": list(r["source_trajectory_ids"])}
        item = {id_key: num, **{k: r.get(k) or "" for k in fields}, "source_memory_ids": list(r["source_memory_ids"])}
        if r.get("usefulness"):  # measured usefulness: an extra key a SkillRL loader ignores
            item["usefulness"] = dict(r["usefulness"])
        return item

    general = [entry(r, f"gen_{i:03d}", "skill_id", SKILL_FIELDS) for i, r in enumerate(groups["general"], 1)]
    specific = {c: [entry(r, f"{category_prefix(c)}_{i:03d}", "skill_id", SKILL_FIELDS) for i, r in enumerate(rs, 1)]
                for c, rs in by_cat.items()}
    mistakes = [entry(r, f"err_{i:03d}", "mistake_id", MISTAKE_FIELDS) for i, r in enumerate(groups["mistake"], 1)]
    meta = {"bank_version": bank_version(skill_rows),
            "counts": {"general": len(general), "task_specific": {c: len(v) for c, v in specific.items()},
                       "mistakes": len(mistakes)},
            "lineage": lineage_map}
    meta.update(metadata or {})
    return {"general_skills": general, "task_specific_skills": specific, "common_mistakes": mistakes, "metadata": meta}


def _texts(item: Any, fields: tuple[str, ...], where: str) -> dict[str, str]:
    if not isinstance(item, dict):
        raise ValueError(f"{where}: expected an object, got {type(item).__name__}")
    bad = [k for k in fields if not isinstance(item.get(k, ""), str)]
    if bad:
        raise ValueError(f"{where}: fields {bad} must be strings")
    return {k: item.get(k, "") for k in fields}


def from_skillrl_json(data: dict[str, Any], env: str) -> list[dict[str, Any]]:
    """Skill rows (``records.SKILL_SCHEMA``) of a SkillRL bank, in bank order.

    Reads ``task_specific_skills`` and/or ``query_type_skills`` (official Search bank, D-K2).
    Source ids come from each entry's ``source_memory_ids`` or ``metadata.lineage`` (our banks);
    official banks have none, so they are empty. ``bank_version`` is recomputed from the content.

    Raises ``ValueError`` when ``data`` is not a bank (no ``general_skills`` list, a non-object
    entry, a non-string field) or when its ``metadata.env`` names another env than ``env``.
    """
    if not isinstance(data, dict) or not isinstance(data.get("general_skills"), list):
        raise ValueError("not a SkillRL skill bank: expected an object with a 'general_skills' list")
    meta = data.get("metadata") or {}
    if meta.get("env") and meta["env"] != env:
        raise ValueError(f"skill bank is for env {meta['env']!r}, not {env!r}")
    links = meta.get("lineage") or {}

    def row(kind: str, category: str, item: dict, fields: tuple[str, ...], where: str, id_key: str) -> dict:
        link = links.get(item.get(id_key, ""), {}) if isinstance(item, dict) else {}
        mem = item.get("source_memory_ids") if isinstance(item, dict) else None
        return make_row(kind, category, _texts(item, fields, where),
                        mem if mem is not None else link.get("source_memory_ids", ()),
                        link.get("source_trajectory_ids", ()), env=env)

    rows = [row("general", "", s, SKILL_FIELDS, f"general_skills[{i}]", "skill_id")
            for i, s in enumerate(data["general_skills"])]
    for key in CATEGORY_KEYS:
        cats = data.get(key) or {}
        if not isinstance(cats, dict):
            raise ValueError(f"{key}: expected an object of category -> skill list")
        for cat, skills in cats.items():
            if not isinstance(skills, list):
                raise ValueError(f"{key}.{cat}: expected a list")
            rows += [row("task_specific", cat, s, SKILL_FIELDS, f"{key}.{cat}[{i}]", "skill_id")
                     for i, s in enumerate(skills)]
    rows += [row("mistake", "", m, MISTAKE_FIELDS, f"common_mistakes[{i}]", "mistake_id")
             for i, m in enumerate(data.get("common_mistakes") or [])]
    version = bank_version(rows)
    for r in rows:
        r["bank_version"] = version
    return rows

"""Skill-bank facts for the report: composition, version history with diffs, per-skill usage.

The bank of the run is its ``skills`` artifact (``SKILL_SCHEMA`` rows); the history is the
shared bank store ``<root>/banks`` (:mod:`pipeline.bank.store`); usage is counted over the
run's SFT pairs (``export``, else ``build_pairs``).
"""
from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any

from pipeline.core.artifacts import ArtifactError, read_parquet_dir
from pipeline.bank.store import BankError, BankStore, diff, label

#: Word n-gram length for "the think uses the skill's language" (see :func:`skill_usage`).
NGRAM = 3
_WORD = re.compile(r"[a-z][a-z']+")
#: Skill fields whose wording a think may reuse (``records.SKILL_SCHEMA``).
SKILL_TEXT_FIELDS = ("title", "principle", "when_to_apply", "description", "why_it_happens", "how_to_avoid")


def read_rows(run_dir: str, stage: str, columns: list[str] | None = None, limit: int | None = None,
              where: tuple[str, set[str]] | None = None) -> list[dict[str, Any]]:
    """Rows of a stage artifact, or ``[]`` when it is absent or unreadable.

    ``columns``: only these; ``where=(column, values)``: only rows whose ``column`` is in
    ``values``; ``limit``: the first rows only (applied before converting to Python objects, so
    a large artifact costs Arrow memory, not millions of dicts).
    """
    folder = os.path.join(run_dir, stage)
    if not os.path.isdir(folder):
        return []
    try:
        t = read_parquet_dir(folder)
    except (ArtifactError, OSError, ValueError):
        return []
    if where is not None and where[0] in t.column_names:
        import pyarrow as pa
        import pyarrow.compute as pc
        t = t.filter(pc.is_in(t.column(where[0]), value_set=pa.array(sorted(where[1]), pa.string())))
    if columns:
        t = t.select([c for c in columns if c in t.column_names])
    if limit is not None:
        t = t.slice(0, limit)
    return t.to_pylist()


def composition(skills: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"by_kind": {kind: n}, "by_category": {category: n}, "by_env": {env: n}, "total": n}``;
    the category of general skills and mistakes is ``""``, shown as ``(none)``."""
    return {"by_kind": dict(Counter(s.get("kind") or "?" for s in skills)),
            "by_category": dict(Counter(s.get("category") or "(none)" for s in skills)),
            "by_env": dict(Counter(s.get("env") or "(any)" for s in skills)),
            "total": len(skills)}


def _diff_summary(store: BankStore, version: str, parent: str | None, limit: int = 8) -> dict[str, Any]:
    if not parent:
        return {"added": [], "removed": [], "n_added": None, "n_removed": None, "note": "first version (no parent)"}
    try:
        d = diff(store.get(parent), store.get(version))
    except BankError as e:
        return {"added": [], "removed": [], "n_added": None, "n_removed": None, "note": str(e)}
    show = lambda rows: [f"{r['kind']}{'/' + r['category'] if r.get('category') else ''}: {label(r)}"  # noqa: E731
                         for r in rows[:limit]]
    return {"added": show(d["added"]), "removed": show(d["removed"]), "n_added": len(d["added"]),
            "n_removed": len(d["removed"]), "note": ""}


def history(root: str, run_id: str, run_versions: list[str]) -> dict[str, Any]:
    """The bank versions of this run and their ancestors, oldest first, each with its diff to
    its parent: ``{"versions": [{version, parent, created_at, run_id, stage, counts, this_run,
    diff}], "head": str|None, "note": str}``.

    A version belongs to the run when its record names ``run_id`` or it is in ``run_versions``
    (e.g. the skills artifact's ``bank_version``); parents are followed to the root.
    """
    store = BankStore(root)
    try:
        events = store.history()
    except (OSError, ValueError) as e:
        return {"versions": [], "head": None, "note": f"bank history unreadable: {e}"}
    records = {e["version"]: e for e in events if e.get("event") == "create"}
    if not records:
        return {"versions": [], "head": None, "note": f"no bank store under {store.dir}"}
    wanted = [v for v, r in records.items() if r.get("run_id") == run_id] + [v for v in run_versions if v]
    chain: dict[str, None] = {}
    for v in wanted:
        while v and v in records and v not in chain:
            chain[v] = None
            v = records[v].get("parent")
    out = []
    for v in sorted(chain, key=lambda v: records[v].get("created_at") or ""):
        r = records[v]
        out.append({"version": v, "parent": r.get("parent"), "created_at": r.get("created_at"),
                    "run_id": r.get("run_id"), "stage": r.get("stage"), "counts": r.get("counts") or {},
                    "this_run": r.get("run_id") == run_id or v in run_versions,
                    "diff": _diff_summary(store, v, r.get("parent"))})
    note = "" if out else f"no bank version of run {run_id} in {store.dir}"
    return {"versions": out, "head": store.head(), "note": note}


def ngrams(text: str, n: int = NGRAM) -> set[tuple[str, ...]]:
    """Lower-cased word ``n``-grams of ``text`` (words: a letter then letters/apostrophes)."""
    words = _WORD.findall((text or "").lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _skill_grams(skills: list[dict[str, Any]]) -> dict[str, set[tuple[str, ...]]]:
    return {s["skill_id"]: ngrams(" ".join(str(s.get(f) or "") for f in SKILL_TEXT_FIELDS)) for s in skills}


def pairs_using_skills(skills: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> tuple[int, int]:
    """``(pairs shown at least one skill, pairs whose think reuses the language of one of them)``;
    "reuses" as in :func:`skill_usage`."""
    grams = _skill_grams(skills)
    shown = [p for p in pairs if p.get("skill_ids_used")]
    using = sum(1 for p in shown if any(ngrams(p.get("think") or "") & grams.get(s, set())
                                        for s in p["skill_ids_used"]))
    return len(shown), using


def skill_usage(skills: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per skill: how many SFT pairs showed it in their prompt (``skill_ids_used``) and in how
    many of those the think reuses its language.

    "Reuses its language" (after SkillNote's usage view): the think shares at least one word
    :data:`NGRAM`-gram with the skill's text fields (:data:`SKILL_TEXT_FIELDS`). A trigram is
    rare by chance and survives paraphrase of the rest of the sentence. Rows are sorted by
    ``shown`` (descending); ``used_rate`` = used / shown (``None`` when never shown).
    """
    grams = _skill_grams(skills)
    shown, used = Counter(), Counter()
    for p in pairs:
        think = ngrams(p.get("think") or "")
        for sid in p.get("skill_ids_used") or []:
            shown[sid] += 1
            if think & grams.get(sid, set()):
                used[sid] += 1
    rows = [{"skill_id": s["skill_id"], "label": label(s), "kind": s.get("kind"), "category": s.get("category") or "",
             "shown": shown[s["skill_id"]], "used": used[s["skill_id"]],
             "used_rate": used[s["skill_id"]] / shown[s["skill_id"]] if shown[s["skill_id"]] else None}
            for s in skills]
    return sorted(rows, key=lambda r: (-r["shown"], -r["used"], r["label"]))

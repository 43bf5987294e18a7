"""Exports of a stored bank version: SkillRL ``skill_bank.json`` and one ``SKILL.md`` folder per skill.

* :func:`export_skillrl` - :func:`pipeline.bank.rows.to_skillrl_json` per environment (general_skills
  / task_specific_skills / common_mistakes, numbered ids, ``source_memory_ids`` on every entry), one
  file ``skill_bank.json`` for a one-env bank, else ``skill_bank_<env>.json`` each.
* :func:`export_skill_md` - a folder ``<numbered id>-<slug>/SKILL.md`` per skill: YAML front matter
  (``name``, ``description``, ``when_to_apply``, ``source_memory_ids``, ``source_trajectory_ids``, plus
  ``skill_id``, ``kind``, ``category``, ``env``, ``bank_version``) and a short Markdown body. A common
  mistake becomes an "avoid" skill: name ``avoid-<slug>``, description = what goes wrong,
  when_to_apply = why it happens, body = how to avoid it.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

import yaml

from pipeline.bank import rows as skillbank
from pipeline.bank.store import BankVersion


def _by_env(bank: BankVersion) -> dict[str, list[dict[str, Any]]]:
    envs: dict[str, list[dict[str, Any]]] = {}
    for r in bank.rows:
        envs.setdefault(r.get("env") or "", []).append(r)
    return envs or {"": []}


def skillrl_banks(bank: BankVersion) -> dict[str, dict[str, Any]]:
    """``{file name: SkillRL bank dict}`` for ``bank`` (see the module docstring)."""
    envs = _by_env(bank)
    out = {}
    for env, rows in envs.items():
        meta = {"env": env, "bank_version": bank.version, "parent_version": bank.record.get("parent"),
                "created_at": bank.record.get("created_at"), "run_id": bank.record.get("run_id")}
        name = "skill_bank.json" if len(envs) == 1 else f"skill_bank_{env or 'any'}.json"
        out[name] = skillbank.to_skillrl_json(rows, metadata=meta)
        # the bank's content hash is over all envs; keep the version id, not the per-env hash
        out[name]["metadata"]["bank_version"] = bank.version
    return out


def export_skillrl(bank: BankVersion, out_dir: str) -> list[str]:
    """Write :func:`skillrl_banks` into ``out_dir``; returns the written paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, data in skillrl_banks(bank).items():
        path = os.path.join(out_dir, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=2)
            f.write("\n")
        paths.append(path)
    return paths


def slug(text: str, max_len: int = 48) -> str:
    """Lower-case ``a-z0-9`` words joined by ``-``, at most ``max_len`` characters: ``"Heat It, Then Place!"`` -> ``"heat-it-then-place"``."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    out = "-".join(words)[:max_len].rstrip("-")
    return out or "skill"


def skill_md(row: dict[str, Any], numbered_id: str, bank_version: str) -> str:
    """The ``SKILL.md`` text of one skill row (front matter + body)."""
    mistake = row["kind"] == "mistake"
    if mistake:
        name = "avoid-" + slug(row.get("description") or "")
        description, when = row.get("description") or "", row.get("why_it_happens") or ""
        body = [f"# Avoid: {description}", "", f"**Why it happens:** {when}", "",
                f"**How to avoid:** {row.get('how_to_avoid') or ''}"]
    else:
        name = slug(row.get("title") or "")
        description, when = row.get("principle") or "", row.get("when_to_apply") or ""
        body = [f"# {row.get('title') or name}", "", description, "", f"**When to apply:** {when}"]
    front = {"name": name, "description": description, "when_to_apply": when,
             "source_memory_ids": list(row.get("source_memory_ids") or []),
             "source_trajectory_ids": list(row.get("source_trajectory_ids") or []),
             "skill_id": row["skill_id"], "numbered_id": numbered_id, "kind": row["kind"],
             "category": row.get("category") or "", "env": row.get("env") or "", "bank_version": bank_version}
    if row.get("usefulness"):
        u = row["usefulness"]
        front["usefulness"] = dict(u)
        body += ["", f"**Measured usefulness:** {u['score']:+.3f} (95 % interval {u['lo']:+.3f} to {u['hi']:+.3f}, "
                     f"{u['n']} held-out expert steps, {u['method']})"]
    head = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=1000)
    return f"---\n{head}---\n\n" + "\n".join(body) + "\n"


def export_skill_md(bank: BankVersion, out_dir: str) -> list[str]:
    """One ``<out_dir>/[<env>/]<numbered id>-<slug>/SKILL.md`` per skill (env folder only when the
    bank spans several envs); numbered ids as in the SkillRL export. Returns the written paths."""
    envs = _by_env(bank)
    paths = []
    for env, rows in envs.items():
        data = skillbank.to_skillrl_json(rows)
        by_sid = {link["skill_id"]: num for num, link in data["metadata"]["lineage"].items()}
        base = os.path.join(out_dir, env or "any") if len(envs) > 1 else out_dir
        for r in rows:
            num = by_sid[r["skill_id"]]
            text = skill_md(r, num, bank.version)
            name = yaml.safe_load(text.split("---\n")[1])["name"]
            folder = os.path.join(base, f"{num}-{name}")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, "SKILL.md")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            paths.append(path)
    return paths

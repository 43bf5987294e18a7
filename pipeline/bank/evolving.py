"""A skill bank that grows while a policy trains: rows, evolved skill ids and lineage history.

:class:`SkillBank` holds skill rows (``records.SKILL_SCHEMA``, bank order), the ids of the skills
added by updates (oldest first) and a history of every update. It is persisted as SkillRL JSON
(:mod:`pipeline.bank.rows`) with ``metadata.dynamic_skills`` and ``metadata.history``, so SkillRL
loads it unchanged.

An update asks an LLM for new skills of one task category (:func:`update_request`, prompt in
``pipeline/templates/skill_update.txt``) and applies the answers (:func:`apply_updates`): every
update that changes the content is a NEW bank version (content hash) whose history entry names
its parent, the step, the skills added and evicted and the trajectories the failures came from.
Evolved skills are capped per category (oldest evicted first) and ranked after the static ones:
static skills keep their bank order and come first, evolved skills follow in the order they
were added, so they never push static skills out. A failed LLM call changes nothing; it is
returned as a quarantine record with the raw answer
(:func:`pipeline.stage.llmstage.failure_row`, as an LLM stage does). The caller (``sft.rl.evolution``) decides
which categories to update and which failures to show.
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from typing import Any

from pipeline.bank import rows as skillbank
from pipeline.core import lineage
from pipeline.core.fsutil import atomic_write_json
from pipeline.stage.llmstage import failure_row
from pipeline.llm import templates
from pipeline.llm.schemas import schema_path
from pipeline.llm.types import JSONRequest
from pipeline import quality
from pipeline.bank.judge import ItemJudge, blocking, field_bounds
from pipeline.core.config import QualityConfig
from pipeline.quality import echo

#: The updater prompt (``pipeline/templates/skill_update.txt``).
TEMPLATE = templates.load("skill_update", "")
SYSTEM = TEMPLATE.sections["system"].strip()
USER = TEMPLATE.sections["user"].strip()
PROMPT_SHA = lineage.content_hash(SYSTEM, USER, n=64)  # = the hash of the texts when they were inline
#: Content words of the updater prompt's fixed text (rule ``echo_prompt``).
PROMPT_WORDS = echo.prompt_words(TEMPLATE.sections.values())
SKILL_FIELDS = ("title", "principle", "when_to_apply")


@dataclass
class SkillBank:
    """Skill rows (``records.SKILL_SCHEMA``, bank order) + evolved skill ids (oldest first) + history."""
    rows: list[dict[str, Any]]
    env: str = "textworld"
    dynamic: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def version(self) -> str:
        """``bank-<hash>`` of the rows' content (:func:`pipeline.bank.rows.bank_version`)."""
        return skillbank.bank_version(self.rows)

    def to_json(self) -> dict[str, Any]:
        """SkillRL bank JSON with our metadata (loads unchanged in SkillRL; extra keys ignored)."""
        return skillbank.to_skillrl_json(self.rows, metadata={"env": self.env, "dynamic_skills": list(self.dynamic),
                                                              "history": self.history})

    def save(self, path: str) -> str:
        """Write :meth:`to_json` to ``path`` atomically; returns ``path``."""
        return atomic_write_json(path, self.to_json())

    def copy(self) -> "SkillBank":
        """An independent copy (rows deep-copied)."""
        return SkillBank(copy.deepcopy(self.rows), self.env, list(self.dynamic), list(self.history))

    @classmethod
    def from_json(cls, data: dict[str, Any], env: str, source_env: str = "") -> "SkillBank":
        """Bank of ``env`` from SkillRL JSON; ``source_env`` accepts a bank whose metadata names
        another env (``ValueError`` from ``skillbank.from_skillrl_json`` otherwise)."""
        rows = skillbank.from_skillrl_json(data, source_env or env)
        for r in rows:  # an explicitly reused bank of another env becomes this env's bank (else
            r["env"] = env  # prompts.select_skills would hide its rows from this env's prompts)
        meta = data.get("metadata") or {}
        return cls(rows, env, list(meta.get("dynamic_skills") or []), list(meta.get("history") or []))

    @classmethod
    def load(cls, path: str, env: str, source_env: str = "") -> "SkillBank":
        """Read a SkillRL bank file; ``""`` gives an empty bank. Raises ``ValueError`` for a non-bank."""
        if not path:
            return cls([], env)
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        bank = cls.from_json(data, env, source_env)
        if not bank.history:  # first use of an offline bank: record where it came from (lineage)
            meta = data.get("metadata") or {}
            bank.history.append({"event": "import", "file": os.path.abspath(path), "source_env": meta.get("env", ""),
                                 "source_bank_version": meta.get("bank_version", ""),
                                 "run_bank_version": meta.get("run_bank_version", ""), "version": bank.version})
        return bank


def answer_schema(max_new: int) -> dict[str, Any]:
    """``schemas/skills.schema.json`` as the file holds it (file-level keys too: the request the
    updater has always sent) with ``maxItems`` narrowed to ``max_new`` (at least 1)."""
    with open(schema_path("skills"), encoding="utf-8") as f:
        schema = json.load(f)
    schema["maxItems"] = max(1, min(max_new, schema.get("maxItems", max_new)))
    return schema


def item_judge(category: str, qcfg: QualityConfig | None = None, env: str = "") -> ItemJudge:
    """The content rules an evolved skill of ``category`` in ``env`` must pass: those of the
    skills stage (:class:`pipeline.bank.judge.ItemJudge`) against the updater prompt's fixed words
    and the answer schema's bounds (no memories, so no ``off_topic``; ``contradicts_success``
    judges an order against the game's order of an ALFWorld category only)."""
    return ItemJudge("task_specific", qcfg or QualityConfig(), PROMPT_WORDS, category=category,
                     bounds=field_bounds({"items": answer_schema(1)["items"]}), env=env)


def update_request(bank: SkillBank, category: str, rate: float, threshold: float, failures: str,
                   max_new: int, qcfg: QualityConfig | None = None) -> JSONRequest:
    """The LLM request for new skills of ``category`` (request key = the category).

    ``rate``/``threshold``: the category's success rate and the target (fractions);
    ``failures``: the failed episodes as text; ``max_new``: skills the answer may hold. The
    answer is checked against :func:`answer_schema` and rejected (then repaired by the client)
    when no skill of it is new and sound: every one repeats a title of the bank or of the answer
    before it (:func:`repeated_titles`), or breaks a content rule of the skills stage
    (:func:`item_judge`); the failed call is then quarantined with that reason.
    :func:`apply_updates` drops the skills of an accepted answer that repeat a title or break a
    rule, and keeps the rest (the 1.5B teacher answered three skills, one of them a bank title)."""
    titles = sorted({(r.get("title") or r.get("description") or "").strip() for r in bank.rows} - {""})
    judge = item_judge(category, qcfg, bank.env)

    def check(value: list[dict]) -> str | None:
        repeats = repeated_titles(bank, value)
        per_item = judge.judge(value)
        bad = [repeats[i] is not None or blocking(v, quality.Tally(judge.qcfg.flag_rules)) is not None
               for i, v in enumerate(per_item)]
        if value and all(bad):
            first = value[0]["title"]
            return f"the title {first!r} already exists: write a different skill" if repeats[0] is not None \
                else per_item[0][0].message()
        return None

    user = TEMPLATE.render("user", env=bank.env, category=category, rate=rate, threshold=threshold,
                           failures=failures, titles="\n".join(f"- {t}" for t in titles) or "(none)",
                           max_new=max_new)
    return JSONRequest(key=category, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
                       schema=answer_schema(max_new), schema_name="skills", check=check)


def repeated_titles(bank: SkillBank, answer: list[dict]) -> list[str | None]:
    """Per skill of ``answer``: the title it repeats (case-insensitive) of a bank row (title or
    mistake description) or of a skill before it in the answer, else ``None``."""
    seen = {(r.get("title") or r.get("description") or "").strip().lower() for r in bank.rows} - {""}
    out = []
    for s in answer:
        key = (s.get("title") or "").strip().lower()
        out.append(s.get("title") if key in seen else None)
        seen.add(key)
    return out


def insert_skills(bank: SkillBank, category: str, new_rows: list[dict], cap: int
                  ) -> tuple[list[dict], list[str], list[str]]:
    """Rows with ``new_rows`` added to ``category``: static skills first (bank order), then the
    evolved ones in the order they were added, at most ``cap`` of them (oldest evicted first).
    Returns ``(rows, dynamic ids oldest first, evicted ids)``."""
    by_id = {r["skill_id"]: r for r in bank.rows + new_rows}
    dyn = list(bank.dynamic) + [r["skill_id"] for r in new_rows]
    in_cat = [d for d in dyn if by_id[d].get("kind") == "task_specific" and by_id[d].get("category") == category]
    evicted = in_cat[:max(0, len(in_cat) - cap)]
    kept = [d for d in in_cat if d not in evicted]
    rows = [r for r in bank.rows if r["skill_id"] not in in_cat]
    # evolved skills go right after the category's last static skill (or before the mistakes)
    last = max((i for i, r in enumerate(rows) if r.get("kind") == "task_specific" and r.get("category") == category),
               default=None)
    if last is None:
        last = max((i for i, r in enumerate(rows) if r.get("kind") != "mistake"), default=-1)
    rows[last + 1:last + 1] = [by_id[d] for d in kept]
    return rows, [d for d in dyn if d not in evicted], evicted


@dataclass
class Update:
    """What :func:`apply_updates` did: the new bank (a copy; ``bank`` itself when nothing changed)
    and the record of each call."""
    bank: SkillBank
    changed: bool
    added: list[str]
    evicted: list[str]
    calls: list[dict[str, Any]]
    quarantine: list[dict[str, Any]]


def apply_updates(bank: SkillBank, results: list[Any], sources: dict[str, list[str]], model: str,
                  max_new: int, cap: int, step: int, qcfg: QualityConfig | None = None, gate=None) -> Update:
    """Apply the answers of :func:`update_request` calls to a copy of ``bank``.

    Args:
        results: ``pipeline.llm.types.JSONResult`` objects (``key`` = category, ``ok``,
            ``value``, ``error``, ``detail``, ``raw``).
        sources: category -> trajectory ids of the failures shown (``source_trajectory_ids``).
        model: the updater's model id (recorded on each new row); ``max_new``: skills kept per
            answer; ``cap``: evolved skills per category (:func:`insert_skills`); ``step``: the
            training step (in quarantine details); ``qcfg``: the content rules' thresholds and
            policy (:func:`item_judge`; default ``QualityConfig()``). A skill that breaks a rule
            is not added; it gets a quarantine record with its reason.
        gate: ``rows -> (kept rows, quarantine rows)``, the usefulness gate of new skills
            (:func:`pipeline.usefulness.gate.evolution_gate`); ``None`` = none.
    """
    new = bank.copy()
    out = Update(new, False, [], [], [], [])
    for res in results:
        c = res.key
        out.calls.append({"category": c, "ok": res.ok, "error": res.error, "detail": res.detail[:300]})
        if not res.ok:  # the bank is unchanged for c; the raw answer is kept
            out.quarantine.append(failure_row("skill_evolution", res, f"skill update for category {c} at step "
                                              f"{step} failed: {res.detail}", c).__dict__)
            continue
        answer = res.value[:max_new]
        judge = item_judge(c, qcfg, bank.env)
        kept = []
        for s, verdict, repeat in zip(answer, judge.judge(answer), repeated_titles(new, answer)):
            bad = blocking(verdict, quality.Tally(judge.qcfg.flag_rules))
            if repeat is None and bad is None:
                kept.append(s)
                continue
            # the rest of the answer is still used; this skill is kept aside with its reason
            reason, why = ("duplicate_title", f"the title {repeat!r} already exists") if repeat is not None \
                else (bad.reason, bad.message())
            out.quarantine.append({"stage": "skill_evolution", "reason": reason, "detail": f"skill update "
                                   f"for category {c} at step {step}: {why}", "item_id": c,
                                   "raw": json.dumps(s, ensure_ascii=False)})
        rows = [skillbank.make_row("task_specific", c, s, (), sources[c], model=model, prompt_sha=PROMPT_SHA,
                                   env=bank.env) for s in kept]
        rows = [r for r in rows if r["skill_id"] not in {x["skill_id"] for x in new.rows}]
        if gate is not None and rows:
            rows, dropped = gate(rows)
            out.quarantine += [{**q.__dict__, "detail": f"skill update for category {c} at step {step}: {q.detail}"}
                               for q in dropped]
        new.rows, new.dynamic, evicted = insert_skills(new, c, rows, cap)
        out.added += [r["skill_id"] for r in rows if r["skill_id"] not in evicted]
        out.evicted += evicted
    version = new.version
    for r in new.rows:
        r["bank_version"] = version
    out.changed = version != bank.version
    if not out.changed:
        out.bank = bank
    return out

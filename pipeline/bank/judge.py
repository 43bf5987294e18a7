"""The content rules of skill-bank items, judged one item at a time.

A skills answer holds several items (skills or common mistakes). Judging the answer as a whole
lost every good skill of a call to one bad one; here each item gets its own verdict, so the
skills stage keeps the good items of an answer and quarantines the others, each with its rule
(:mod:`pipeline.stages.skills`), and skill evolution during GRPO applies the same rules
(:mod:`pipeline.bank.evolving`). An answer whose every item breaks a rule is rejected as a whole,
so the client's repair round asks the model again.

Rules per item (reasons of :data:`pipeline.quality.REASONS`), in this order:

* degenerate text of each field (``no_words``, ``ngram_loop``), a title that is not a phrase,
  a loop across fields, ``cut_off`` (a field stopped at its schema bound);
* ``echo_prompt`` / ``not_actionable`` (:mod:`pipeline.quality.echo`), including a principle or
  fix that only replays a recorded action;
* ``restated_action`` (skills), ``contradicts_success`` (skills: order and tool; mistakes: the
  fix's order), ``duplicate_mistake`` (mistakes) and ``episode_specific`` (ALFWorld mistakes;
  :mod:`pipeline.quality.bankrules`);
* ``not_actionable`` and ``vague_instruction`` (a principle or fix that states a fact, or stops
  at a placeholder such as "the correct location": :mod:`pipeline.quality.vague`);
* ``self_target`` (a principle or fix), ``missing_control`` (WebShop: a principle or fix),
  ``not_portable`` (ALFWorld: a principle or fix),
  ``feeling_reason`` (principle, when-to-apply, fix), ``wrong_category`` (an ALFWorld
  task-specific principle), TextWorld ``false_game_fact`` (a look around or inventory to find
  something, an obstacle, a door, key or lock no source game shows) and ``episode_specific`` (a
  compass route; :mod:`pipeline.quality.gamefacts`);
* ``off_topic`` (:func:`pipeline.quality.topic.off_domain`), one encoder call per answer.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Sequence

from pipeline import quality
from pipeline.bank import rows as skillbank
from pipeline.core.config import QualityConfig
from pipeline.core.records import Trajectory
from pipeline.quality import Violation, bankrules, echo, gamefacts, text, topic, vague
from pipeline.quality import actions as act

SKILL_FIELDS = skillbank.SKILL_FIELDS
MISTAKE_FIELDS = skillbank.MISTAKE_FIELDS


def field_bounds(schema: dict[str, Any]) -> dict[str, int]:
    """``{field: maxLength}`` of the item schema inside an answer schema (``{"skills": {"items":
    ...}}`` or a bare array); ``{}`` when it has none."""
    node = schema
    if node.get("type") == "object":
        node = next(iter(node.get("properties", {}).values()), {})
    props = (node.get("items") or {}).get("properties", {})
    return {k: v["maxLength"] for k, v in props.items() if isinstance(v, dict) and "maxLength" in v}


@dataclass
class ItemJudge:
    """Verdicts on the items of one skills or mistakes answer.

    Attributes:
        kind: ``general`` | ``task_specific`` | ``mistake``.
        qcfg: thresholds and the policy (``quality`` config section).
        vocab: content words of the prompt's fixed text (``echo_prompt``).
        sources: what the items must be about (task and description of the memories fed; ``off_topic``).
        actions: the recorded actions of those memories (``not_actionable``, and the object kinds
            ``restated_action`` may name).
        successes: successful trajectories the prescribed orders are checked against
            (``contradicts_success``; empty: not checked).
        category: the task category of a task-specific call ("" otherwise).
        bounds: ``{field: maxLength}`` of the answer schema (``cut_off``).
        examples: the prompt's worked-example strings an item must not copy (``echo_prompt``).
        env: the environment of the items (``missing_control`` checks WebShop items only).
    """
    kind: str
    qcfg: QualityConfig
    vocab: frozenset[str] = frozenset()
    sources: Sequence[str] = ()
    actions: Sequence[str] = ()
    successes: Sequence[Trajectory] = ()
    category: str = ""
    bounds: dict[str, int] = field(default_factory=dict)
    examples: Sequence[str] = ()
    env: str = ""

    @functools.cached_property
    def seen_text(self) -> str:
        """Lower-cased observations and admissible actions of :attr:`successes`: what the source
        games show (TextWorld ``false_game_fact`` of a door, key or lock)."""
        return "\n".join(f"{s.observation or ''} {' '.join(s.admissible_actions or [])}".lower()
                         for t in self.successes for s in t.steps)

    @property
    def key(self) -> str:
        """The answer's array key: ``mistakes`` or ``skills``."""
        return "mistakes" if self.kind == "mistake" else "skills"

    @property
    def fields(self) -> tuple[str, ...]:
        """The text fields of one item."""
        return MISTAKE_FIELDS if self.kind == "mistake" else SKILL_FIELDS

    def form(self, item: dict[str, Any], name: str) -> list[Violation]:
        """Degenerate text, title, loop across fields, ``cut_off``, echo rules of one item."""
        out = []
        for f in self.fields:
            value = str(item.get(f) or "")
            out += text.field_violations(f"{name}.{f}", value, self.qcfg)
            out += text.cut_off(f"{name}.{f}", value, self.bounds.get(f), sentence=f != "title")
        if "title" in self.fields:
            out += text.title_violations(f"{name}.title", str(item.get("title") or ""), self.qcfg)
        whole = " ".join(str(item.get(f) or "") for f in self.fields)
        if (loop := text.ngram_loop(whole, self.qcfg.loop_ngram, self.qcfg.loop_min_repeats)) is not None:
            out.append(Violation("ngram_loop", f"{name} repeats {loop!r} {self.qcfg.loop_min_repeats}+ times "
                                               "across its fields; write it once"))
        out += echo.echo_violations(name, item, self.fields, self.vocab)
        out += echo.example_violations([(f"{name}.{f}", str(item.get(f) or "")) for f in self.fields], self.examples)
        return out + echo.action_field_violations(name, item, list(self.actions))

    def meaning(self, item: dict[str, Any], name: str) -> list[Violation]:
        """``restated_action``, ``contradicts_success``, ``wrong_category``, ``self_target``,
        ``not_actionable`` and ``vague_instruction`` (:mod:`pipeline.quality.vague`),
        ``missing_control`` (WebShop), ``not_portable``, ``false_game_fact`` and ``instance_number``
        (ALFWorld), ``episode_specific`` (ALFWorld mistakes), ``false_game_fact`` and
        ``episode_specific`` of TextWorld (:func:`pipeline.quality.gamefacts.textworld_violations`), ``feeling_reason``
        and ``narration``
        (a when-to-apply that tells an episode) of one item."""
        out = []
        nouns = act.nouns_of(self.actions)
        if self.kind != "mistake":
            out += bankrules.restated_violations(name, item, nouns)
            whole = " ".join(str(item.get(f) or "") for f in self.fields)
            out += bankrules.tool_violations(name, whole, str(item.get("principle") or ""), self.successes,
                                             self.category)
            if self.kind == "task_specific":
                out += gamefacts.category_violations(f"{name}.principle", str(item.get("principle") or ""),
                                                     self.category)
        title = str(item.get("title") or "")
        for f in ("principle", "how_to_avoid"):
            if f in self.fields:
                value = str(item.get(f) or "")
                out += bankrules.order_violations(f"{name}.{f}", value, self.successes, self.category)
                out += gamefacts.self_target_violations(f"{name}.{f}", value, title, nouns)
                out += vague.vague_violations(f"{name}.{f}", value)
                if self.env == "webshop":
                    out += gamefacts.control_violations(f"{name}.{f}", value)
                elif self.env == "alfworld":
                    out += gamefacts.fixed_violations(f"{name}.{f}", value)
        if self.env == "alfworld":
            # every field: "Heat Fridge" as a title, "instructed to heat the stoveburner" as a condition
            for f in self.fields:
                value = str(item.get(f) or "")
                out += gamefacts.false_fact_violations(f"{name}.{f}", value)
                out += gamefacts.instance_violations(f"{name}.{f}", value)
        for f in ("principle", "when_to_apply", "how_to_avoid"):
            if f in self.fields:
                out += gamefacts.feeling_violations(f"{name}.{f}", str(item.get(f) or ""))
        if self.env == "textworld":
            # the fields that tell the agent what to do or when; a mistake's description and cause
            # may tell the failed episode
            for f in self.fields:
                value = str(item.get(f) or "")
                if f in ("title", "principle", "when_to_apply", "how_to_avoid"):
                    out += gamefacts.textworld_violations(f"{name}.{f}", value)
                # every field: a door that no game has is false in a cause too
                out += gamefacts.unseen_violations(f"{name}.{f}", value, self.seen_text)
        if self.kind == "mistake" and self.env == "alfworld":
            out += bankrules.episode_violations(name, item, self.sources)
        if "when_to_apply" in self.fields:
            out += bankrules.condition_narration(f"{name}.when_to_apply", str(item.get("when_to_apply") or ""))
        return out

    def judge(self, items: Sequence[dict[str, Any]]) -> list[list[Violation]]:
        """Every rule's violations, per item (same order as ``items``). A mistake that repeats an
        earlier one (``duplicate_mistake``) is reported on the later item."""
        per = [self.form(it, f"{self.key}[{i}]") + self.meaning(it, f"{self.key}[{i}]") for i, it in enumerate(items)]
        if self.kind == "mistake":
            for v in bankrules.duplicate_mistakes(self.key, items):
                j = int(v.detail.split("[", 1)[1].split("]", 1)[0])
                per[j].append(v)
        if self.qcfg.off_topic_threshold > -1 and self.sources:
            named = [[(f"{self.key}[{i}].{f}", str(it.get(f) or "")) for f in self.fields] for i, it in enumerate(items)]
            for v in topic.off_domain(named, [list(self.sources)] * len(named)):
                j = int(v.detail.split("[", 1)[1].split("]", 1)[0])
                per[j].append(v)
        return per


def blocking(violations: Sequence[Violation], tally: quality.Tally) -> Violation | None:
    """The first violation whose rule quarantines under ``tally``'s policy (not counted)."""
    return next((v for v in violations if v.reason not in tally.flag_rules), None)

"""The checks of targets ``bank_item`` and ``bank_answer``, in the order the skills stage runs
them: the form of an item's text first (degenerate text, title, echo), then what it means
(restated commands, orders, game facts), then the rules that compare the items of one answer."""
from __future__ import annotations

from pipeline.quality import bankrules, echo, gamefacts, text, topic, vague
from pipeline.quality.registry import Check
from pipeline.quality.targets.bank import BankAnswer, BankItem
from pipeline.quality.violation import Violation

SKILLS = frozenset({"general", "task_specific"})
MISTAKES = frozenset({"mistake"})
#: The fields that tell the agent what to do: a skill's principle, a mistake's how-to-avoid.
INSTRUCTION = ("principle", "how_to_avoid")


def _degenerate(s: BankItem) -> list[Violation]:
    out = []
    for name, value in s.named(s.ctx.fields):
        out += text.field_violations(name, value, s.ctx.qcfg)
        f = name.rsplit(".", 1)[1]
        out += text.cut_off(name, value, s.ctx.bounds.get(f), sentence=f != "title")
    return out


def _title(s: BankItem) -> list[Violation]:
    return text.title_violations(f"{s.name}.title", s.value("title"), s.ctx.qcfg)


def _loop_across(s: BankItem) -> list[Violation]:
    q = s.ctx.qcfg
    whole = " ".join(s.value(f) for f in s.ctx.fields)
    if (loop := text.ngram_loop(whole, q.loop_ngram, q.loop_min_repeats)) is None:
        return []
    return [Violation("ngram_loop", f"{s.name} repeats {loop!r} {q.loop_min_repeats}+ times across its fields; "
                                    "write it once")]


def _echo(s: BankItem) -> list[Violation]:
    return echo.echo_violations(s.name, s.item, s.ctx.fields, s.ctx.vocab)


def _example_copy(s: BankItem) -> list[Violation]:
    return echo.example_violations(s.named(s.ctx.fields), s.ctx.examples)


def _replays_action(s: BankItem) -> list[Violation]:
    return echo.action_field_violations(s.name, s.item, list(s.ctx.actions))


def _restated(s: BankItem) -> list[Violation]:
    return bankrules.restated_violations(s.name, s.item, s.ctx.nouns)


def _tool(s: BankItem) -> list[Violation]:
    whole = " ".join(s.value(f) for f in s.ctx.fields)
    return bankrules.tool_violations(s.name, whole, s.value("principle"), s.ctx.successes, s.ctx.category)


def _category(s: BankItem) -> list[Violation]:
    return gamefacts.category_violations(f"{s.name}.principle", s.value("principle"), s.ctx.category)


def _order(s: BankItem) -> list[Violation]:
    return [v for name, value in s.named(INSTRUCTION)
            for v in bankrules.order_violations(name, value, s.ctx.successes, s.ctx.category)]


def _self_target(s: BankItem) -> list[Violation]:
    return [v for name, value in s.named(INSTRUCTION)
            for v in gamefacts.self_target_violations(name, value, s.value("title"), s.ctx.nouns)]


def _vague(s: BankItem) -> list[Violation]:
    return [v for name, value in s.named(INSTRUCTION) for v in vague.vague_violations(name, value)]


def _control(s: BankItem) -> list[Violation]:
    return [v for name, value in s.named(INSTRUCTION) for v in gamefacts.control_violations(name, value)]


def _portable(s: BankItem) -> list[Violation]:
    return [v for name, value in s.named(INSTRUCTION) for v in gamefacts.fixed_violations(name, value)]


def _alfworld_facts(s: BankItem) -> list[Violation]:
    # every field: "Heat Fridge" as a title, "instructed to heat the stoveburner" as a condition
    return [v for name, value in s.named(s.ctx.fields)
            for v in gamefacts.false_fact_violations(name, value) + gamefacts.instance_violations(name, value)]


def _feeling(s: BankItem) -> list[Violation]:
    return [v for name, value in s.named(("principle", "when_to_apply", "how_to_avoid"))
            for v in gamefacts.feeling_violations(name, value)]


def _textworld_facts(s: BankItem) -> list[Violation]:
    out = []
    for name, value in s.named(s.ctx.fields):
        # the fields that tell the agent what to do or when; a mistake's description and cause
        # may tell the failed episode
        if name.rsplit(".", 1)[1] in ("title", "principle", "when_to_apply", "how_to_avoid"):
            out += gamefacts.textworld_violations(name, value)
        # every field: a door that no game has is false in a cause too
        out += gamefacts.unseen_violations(name, value, s.ctx.seen_text)
    return out


def _episode(s: BankItem) -> list[Violation]:
    return bankrules.episode_violations(s.name, s.item, s.ctx.sources)


def _condition_narration(s: BankItem) -> list[Violation]:
    return [v for name, value in s.named(("when_to_apply",)) for v in bankrules.condition_narration(name, value)]


def _duplicates(s: BankAnswer) -> list[Violation]:
    return bankrules.duplicate_mistakes(s.ctx.key, s.items)


def _off_domain(s: BankAnswer) -> list[Violation]:
    if s.ctx.qcfg.off_topic_threshold <= -1 or not s.ctx.sources:
        return []
    named = [[(f"{s.ctx.key}[{i}].{f}", str(it.get(f) or "")) for f in s.ctx.fields] for i, it in enumerate(s.items)]
    return topic.off_domain(named, [list(s.ctx.sources)] * len(named))


_ALF, _WEB, _TW = frozenset({"alfworld"}), frozenset({"webshop"}), frozenset({"textworld"})
CHECKS = (
    Check("bank.degenerate", "bank_item", ("no_words", "ngram_loop", "cut_off"), _degenerate,
          reads="every field; schema bounds"),
    Check("bank.title", "bank_item", ("not_a_phrase",), _title, kinds=SKILLS, reads="title"),
    Check("bank.loop_across_fields", "bank_item", ("ngram_loop",), _loop_across, reads="all fields as one text"),
    Check("bank.prompt_echo", "bank_item", ("echo_prompt", "not_actionable"), _echo,
          reads="every field, the prompt's fixed text; title, principle, how-to-avoid"),
    Check("bank.example_copy", "bank_item", ("echo_prompt",), _example_copy,
          reads="every field, the prompt's worked examples"),
    Check("bank.replays_action", "bank_item", ("not_actionable",), _replays_action,
          reads="principle, why it happens, how to avoid; the memories' actions"),
    Check("bank.restated_action", "bank_item", ("restated_action",), _restated, kinds=SKILLS,
          reads="title, principle; the memories' actions"),
    Check("bank.tool", "bank_item", ("contradicts_success",), _tool, kinds=SKILLS,
          reads="principle (all fields for the transform); the successes' appliances"),
    Check("bank.category", "bank_item", ("wrong_category",), _category, kinds=frozenset({"task_specific"}),
          reads="principle; the call's category"),
    Check("bank.order", "bank_item", ("contradicts_success",), _order,
          reads="principle or how to avoid; the successes of its category"),
    Check("bank.self_target", "bank_item", ("self_target",), _self_target, reads="principle or how to avoid, title"),
    Check("bank.vague", "bank_item", ("not_actionable", "vague_instruction"), _vague,
          reads="principle or how to avoid"),
    Check("bank.missing_control", "bank_item", ("missing_control",), _control, envs=_WEB,
          reads="principle or how to avoid"),
    Check("bank.not_portable", "bank_item", ("not_portable",), _portable, envs=_ALF,
          reads="principle or how to avoid"),
    Check("bank.alfworld_facts", "bank_item", ("false_game_fact", "instance_number"), _alfworld_facts, envs=_ALF,
          reads="every field"),
    Check("bank.feeling_reason", "bank_item", ("feeling_reason",), _feeling,
          reads="principle, when to apply, how to avoid"),
    Check("bank.textworld_facts", "bank_item", ("false_game_fact", "episode_specific"), _textworld_facts, envs=_TW,
          reads="title, principle, when to apply, how to avoid; every field against the source games"),
    Check("bank.episode_specific", "bank_item", ("episode_specific",), _episode, envs=_ALF, kinds=MISTAKES,
          reads="description, how to avoid; the memories' tasks"),
    Check("bank.condition_narration", "bank_item", ("narration",), _condition_narration, kinds=SKILLS,
          reads="when to apply"),
    Check("bank.duplicate_mistake", "bank_answer", ("duplicate_mistake",), _duplicates, kinds=MISTAKES,
          reads="why it happens, how to avoid of every mistake"),
    Check("bank.off_topic", "bank_answer", ("off_topic",), _off_domain,
          reads="every field of every item; the memories' tasks and descriptions"),
)

"""The content-rule registry: which rules exist, where each is checked, and in which order.

Three kinds of small declarative objects, in the manner of datatrove's filters:

* a :class:`Rule` is one quarantine reason: its ``name`` (the ``reason`` of a quarantine row and
  the key ``quality.flag_rules`` names), a one-line ``definition``, its default ``policy``
  (``quarantine`` or ``flag``: only counted) and its :class:`Example` outputs, at least one it must
  reject and one it must pass, each with the least context its target needs;
* a :class:`Target` is what a stage hands the rules: one answer's thinks (distill), a memory
  answer (memory), one skill or mistake and a whole skills answer (skills, skill evolution), a
  pair's think (build_pairs), a skill row and its sources (skills). It names what it reads and
  builds its subject from an example;
* a :class:`Check` is one step a target's judge runs: a function of the subject that returns
  :class:`~pipeline.quality.violation.Violation` records, the reasons it may give, and the envs
  and item kinds it applies to.

One reason may be given by several checks (``false_game_fact`` of ALFWorld thinks, skills and
fixes, and of TextWorld skills), and one check may give several reasons where they are judged
field by field together (``no_words`` and ``ngram_loop`` of each field in turn): the order of the
violations decides which reason an answer is quarantined with (the first that quarantines), so a
target's checks run in the order they were added. :meth:`Registry.register` adds a rule with its
checks in one call; a rule's scope (targets, envs, kinds) is that of its checks
(:meth:`Registry.checks_of`). The default registry is :data:`pipeline.quality.rulebook.REGISTRY`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from pipeline.quality.violation import Violation

POLICIES = ("quarantine", "flag")


@dataclass(frozen=True)
class Example:
    """An output of ``target`` that its rule must reject (``reject``) or let pass.

    ``output``: what the model wrote, in the shape of the target (a think's text, a memory
    answer, a skill or mistake, a list of them, a skill row); ``env`` and ``kind`` select the
    checks; ``context``: what else the check reads (task, actions, observations, sources...: see
    each target's ``from_example``); ``seen``: where the output (or its kind) was seen."""
    target: str
    output: Any
    reject: bool
    env: str = "alfworld"
    kind: str = ""
    context: Mapping[str, Any] = field(default_factory=dict)
    seen: str = ""


def rejects(target: str, output: Any, env: str = "alfworld", kind: str = "", seen: str = "", **context: Any) -> Example:
    """An :class:`Example` the rule must reject (``context`` as keywords)."""
    return Example(target, output, True, env, kind, context, seen)


def passes(target: str, output: Any, env: str = "alfworld", kind: str = "", seen: str = "", **context: Any) -> Example:
    """An :class:`Example` the rule must let pass (``context`` as keywords)."""
    return Example(target, output, False, env, kind, context, seen)


@dataclass(frozen=True)
class Rule:
    """One quarantine reason (module docstring). Raises ``ValueError`` for a policy outside
    :data:`POLICIES` or without a rejected and a passed example."""
    name: str
    definition: str
    examples: tuple[Example, ...]
    policy: str = "quarantine"

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"rule {self.name}: policy {self.policy!r} is not one of {POLICIES}")
        if not any(e.reject for e in self.examples) or all(e.reject for e in self.examples):
            raise ValueError(f"rule {self.name}: needs an output it rejects and one it passes")


@dataclass(frozen=True)
class Target:
    """What a stage hands the rules: ``name``, ``reads`` (one line for the docs),
    ``from_example`` (an :class:`Example` -> the subject its checks take), ``stages``: the
    stages whose output it is (for the docs), and ``run_by``: the dotted names of the functions
    that judge it for them (``pipeline.stages.distill.think_violations``). A subject has ``env``
    and ``kind`` attributes, which select the checks."""
    name: str
    reads: str
    from_example: Callable[[Example], Any]
    stages: str = ""
    run_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    """One step of a target's judge: ``run(subject) -> [Violation]`` giving only ``reasons``.

    ``envs``/``kinds``: the envs and item kinds it applies to (empty: all); ``reads``: the
    fields it reads, for the docs; ``name``: unique in its registry."""
    name: str
    target: str
    reasons: tuple[str, ...]
    run: Callable[[Any], list[Violation]]
    envs: frozenset[str] = frozenset()
    kinds: frozenset[str] = frozenset()
    reads: str = ""

    def applies(self, env: str, kind: str) -> bool:
        """Whether the check runs for a subject of ``env`` and ``kind``."""
        return (not self.envs or env in self.envs) and (not self.kinds or kind in self.kinds)


class Registry:
    """Rules, targets and checks (module docstring). Add them with :meth:`add_rule`,
    :meth:`add_target`, :meth:`add_check` or :meth:`register`; each raises ``ValueError`` for a
    name already taken, a check of an unknown target or reason."""

    def __init__(self, rules: Iterable[Rule] = (), targets: Iterable[Target] = (), checks: Iterable[Check] = ()):
        self._rules: dict[str, Rule] = {}
        self._targets: dict[str, Target] = {}
        self._checks: list[Check] = []
        for r in rules:
            self.add_rule(r)
        for t in targets:
            self.add_target(t)
        for c in checks:
            self.add_check(c)

    def add_rule(self, rule: Rule) -> Rule:
        if rule.name in self._rules:
            raise ValueError(f"rule {rule.name} is registered already")
        self._rules[rule.name] = rule
        return rule

    def add_target(self, target: Target) -> Target:
        if target.name in self._targets:
            raise ValueError(f"target {target.name} is registered already")
        self._targets[target.name] = target
        return target

    def add_check(self, check: Check) -> Check:
        """Append ``check`` to its target's judge (it runs after the checks added before it)."""
        if check.target not in self._targets:
            raise ValueError(f"check {check.name}: unknown target {check.target!r}")
        if unknown := [r for r in check.reasons if r not in self._rules]:
            raise ValueError(f"check {check.name}: unregistered reasons {unknown}")
        if any(c.name == check.name for c in self._checks):
            raise ValueError(f"check {check.name} is registered already")
        self._checks.append(check)
        return check

    def register(self, rule: Rule, *checks: Check) -> Rule:
        """Add a new rule and the checks that give it, each at the end of its target's judge."""
        self.add_rule(rule)
        for c in checks:
            self.add_check(c)
        return rule

    def copy(self) -> "Registry":
        """A registry with the same rules, targets and checks, to add to without changing this one."""
        return Registry(self._rules.values(), self._targets.values(), self._checks)

    @property
    def rules(self) -> tuple[Rule, ...]:
        """Every rule, in the order added."""
        return tuple(self._rules.values())

    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(self._targets.values())

    @property
    def checks(self) -> tuple[Check, ...]:
        return tuple(self._checks)

    def reasons(self) -> tuple[str, ...]:
        """The rule names, in the order added (what ``quality.flag_rules`` may name)."""
        return tuple(self._rules)

    def rule(self, name: str) -> Rule:
        """The rule ``name``; ``KeyError`` when none is registered."""
        return self._rules[name]

    def target(self, name: str) -> Target:
        """The target ``name``; ``KeyError`` when none is registered."""
        return self._targets[name]

    def checks_of(self, reason: str) -> list[Check]:
        """The checks that may give ``reason``, in registry order: the rule's scope."""
        return [c for c in self._checks if reason in c.reasons]

    def rules_for(self, target: str, env: str = "", kind: str = "") -> list[Check]:
        """The checks of ``target`` that apply to ``env`` and ``kind``, in the order they run.
        Raises ``KeyError`` for an unknown target."""
        self.target(target)
        return [c for c in self._checks if c.target == target and c.applies(env, kind)]

    def run(self, target: str, subject: Any) -> list[Violation]:
        """Every violation of ``subject`` (of ``target``; its ``env`` and ``kind`` select the
        checks), in check order. Raises ``RuntimeError`` when a check gives a reason it does not
        declare (its declaration is what the docs and the reason list say)."""
        out: list[Violation] = []
        for check in self.rules_for(target, subject.env, subject.kind):
            found = check.run(subject)
            if stray := sorted({v.reason for v in found} - set(check.reasons)):
                raise RuntimeError(f"check {check.name} gave undeclared reasons {stray}")
            out += found
        return out

    def run_example(self, example: Example) -> list[Violation]:
        """The violations of one rule example, through its target's judge."""
        return self.run(example.target, self.target(example.target).from_example(example))


def with_item(violations: Iterable[Violation], item: int) -> list[Violation]:
    """``violations`` marked as about item ``item`` of their answer."""
    return [dataclasses.replace(v, item=item) for v in violations]

"""Every content rule: its reason, one-line definition, default policy and examples
(:class:`pipeline.quality.registry.Rule`), one module per concept. Plain data: the checks that
give each reason are declared by the targets (:mod:`pipeline.quality.targets`), and both are
assembled in :mod:`pipeline.quality.rulebook`. The order here is the order of the rule list in
the config help and in ``docs/content_rules.md``."""
from __future__ import annotations

from pipeline.quality.catalog import alignment, bank, degenerate, echo, gamefacts, grounding
from pipeline.quality.registry import Rule

RULES: tuple[Rule, ...] = (degenerate.RULES + grounding.RULES + echo.RULES + bank.RULES + gamefacts.RULES
                           + alignment.RULES)


def names() -> tuple[str, ...]:
    """The rule names, in :data:`RULES` order (what ``quality.flag_rules`` may name)."""
    return tuple(r.name for r in RULES)

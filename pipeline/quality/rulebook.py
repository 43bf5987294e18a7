"""The default content-rule registry: every rule of :mod:`pipeline.quality.catalog` and the
checks of every target (:mod:`pipeline.quality.targets`). The stages ask it for the rules of
their target (``REGISTRY.run(target, subject)``); a stage-level function takes another
:class:`~pipeline.quality.registry.Registry` (``REGISTRY.copy()`` with a rule added) in tests."""
from __future__ import annotations

from pipeline.quality.catalog import RULES
from pipeline.quality.registry import Registry
from pipeline.quality.targets import bank, bank_checks, memory, rows, thinks

REGISTRY = Registry(RULES, thinks.TARGETS + memory.TARGETS + bank.TARGETS + rows.TARGETS,
                    thinks.CHECKS + memory.CHECKS + bank_checks.CHECKS + rows.CHECKS)

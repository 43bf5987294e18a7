"""Environment rule checkers for the ``verify`` stage, and their registry.

One module per environment, each a :class:`~pipeline.verify.base.Checker` whose ``RULES`` name
and explain its rules (the docstrings cite the environment definitions they come from):

* :mod:`pipeline.verify.alfworld`: ALFWorld command grammar, names, state (location, open or
  closed, the one object held, heated/cooled/cleaned), the goal of the task type, "Nothing happens.";
* :mod:`pipeline.verify.webshop`: clicks on the page shown, searches where there is a search
  box, "Invalid action!", the purchase and its reward;
* :mod:`pipeline.verify.search`: action syntax, an answer, exact match/F1 against a gold answer;
* :mod:`pipeline.verify.admissible`: SkillRL rollout dumps, each action in its admissible list;
* :mod:`pipeline.verify.textworld`: replay in the TextWorld Express engine.

**Adding a checker for your own environment.** Subclass ``Checker`` (set ``name`` and ``RULES``,
implement ``applies`` and ``check``) and either call :func:`register` on the class before the
run (e.g. in a module your ``--config`` run imports), or expose it as an entry point of group
``skillpipe.verifiers`` in your package's ``pyproject.toml``::

    [project.entry-points."skillpipe.verifiers"]
    mygame = "mypackage.verify:MyGameChecker"

Checkers registered either way are asked before the built-in ones, in name order, so yours can
take over an environment; the first whose ``applies`` is true checks the trajectory. Their rules
can be switched off or made flags like the built-in ones (``verify.disabled_rules``,
``verify.flag_rules``).
"""
from __future__ import annotations

from pipeline.verify.admissible import AdmissibleChecker
from pipeline.verify.alfworld import AlfworldChecker
from pipeline.verify.base import KINDS, Checker, Finding, Verdict
from pipeline.verify.search import SearchChecker
from pipeline.verify.textworld import TextworldChecker
from pipeline.verify.webshop import WebshopChecker

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "KINDS", "AdmissibleChecker", "AlfworldChecker", "Checker", "Finding",
           "SearchChecker", "TextworldChecker", "Verdict", "WebshopChecker", "checker_classes", "checker_for",
           "register", "rule_names"]

ENTRY_POINT_GROUP = "skillpipe.verifiers"
#: The built-in checkers, in the order they are asked.
BUILTIN: tuple[type[Checker], ...] = (AdmissibleChecker, AlfworldChecker, WebshopChecker, SearchChecker,
                                      TextworldChecker)
_REGISTERED: dict[str, type[Checker]] = {}


def register(cls: type[Checker]) -> type[Checker]:
    """Register a checker class (usable as a decorator); a later class of the same ``name``
    replaces the earlier one. Raises ``TypeError`` for a class that is not a named ``Checker``."""
    if not (isinstance(cls, type) and issubclass(cls, Checker) and cls.name):
        raise TypeError(f"{cls!r} is not a Checker subclass with a name")
    _REGISTERED[cls.name] = cls
    return cls


def _entry_point_classes() -> list[type[Checker]]:
    from importlib.metadata import entry_points
    out = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Checker)):
            raise TypeError(f"entry point {ep.name} = {ep.value} of group {ENTRY_POINT_GROUP} is not a Checker class")
        out.append(cls)
    return out


def checker_classes() -> list[type[Checker]]:
    """Registered and entry-point checkers (name order), then :data:`BUILTIN`."""
    extra = {c.name: c for c in _entry_point_classes()} | _REGISTERED
    return [extra[k] for k in sorted(extra)] + [c for c in BUILTIN if c.name not in extra]


def checker_for(traj, checkers: list[Checker]) -> Checker | None:
    """The first of ``checkers`` that applies to ``traj``, or ``None``."""
    return next((c for c in checkers if c.applies(traj)), None)


def rule_names() -> dict[str, dict[str, str]]:
    """``{checker name: {rule: explanation}}`` of every known checker."""
    return {c.name: dict(c.RULES) for c in checker_classes()}

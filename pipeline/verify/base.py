"""What a checker returns: findings per step and a verdict per trajectory.

A *finding* says that step ``index`` of a trajectory breaks rule ``rule`` of its environment,
with a human sentence (``detail``) and the rule's *kind*, which decides what the ``verify``
stage does with it (:mod:`pipeline.stages.verify`):

* ``rejected``: the environment refused the action and the record shows the refusal
  ("Nothing happens.", "Invalid action!", an action outside the admissible list); the state did
  not change, so the step can be cut out together with its observation;
* ``impossible``: the record claims an effect the environment's rules do not allow (heating an
  object the agent does not hold, a receptacle the room does not have, an observation that
  contradicts the state): the record is not what the game would have produced;
* ``goal``: the episode does not reach its goal (no purchase, a wrong answer, the object not in
  place at the end).

A finding may carry a ``repair``: the action that the game would have accepted, when exactly one
exists (a name-format slip such as ``dining table 1`` for ``diningtable 1``); the stage applies
it only behind ``verify.repair_names``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from pipeline.core.records import Trajectory

KINDS = ("rejected", "impossible", "goal")


@dataclass(frozen=True)
class Finding:
    """Step ``index`` (a ``Trajectory.steps`` position) breaks ``rule`` (a key of the checker's
    ``RULES``); ``kind`` one of :data:`KINDS`; ``repair`` the accepted action, if one exists."""
    index: int
    rule: str
    kind: str
    detail: str
    repair: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``repair`` left out when ``None``)."""
        d = asdict(self)
        if d["repair"] is None:
            del d["repair"]
        return d


@dataclass
class Verdict:
    """A checker's answer for one trajectory.

    ``findings`` in step order; ``goal_reached`` ``True``/``False`` when the checker could decide
    the outcome, ``None`` when it cannot (then the recorded outcome stands); ``checked`` is
    ``False`` when the checker could not check at all (``note`` says why: no room description,
    no engine), which is counted, never silently passed as valid.
    """
    checker: str
    findings: list[Finding] = field(default_factory=list)
    goal_reached: bool | None = None
    checked: bool = True
    note: str = ""

    def add(self, index: int, rule: str, kind: str, detail: str, repair: str | None = None) -> None:
        """Append a finding."""
        self.findings.append(Finding(index, rule, kind, detail, repair))


class Checker:
    """Base of an environment's rule checker.

    Subclasses set ``name`` (the checker's key, e.g. ``"alfworld"``), ``RULES`` (rule name ->
    one-line explanation, shown by ``skillpipe config --show`` and in the README) and implement
    :meth:`applies` and :meth:`check`. A checker must not raise for a malformed trajectory it
    accepted: the stage quarantines the trajectory as ``verify_error`` when it does, and goes on.
    """
    name: ClassVar[str] = ""
    RULES: ClassVar[dict[str, str]] = {}

    def applies(self, traj: Trajectory) -> bool:
        """Whether this checker knows ``traj``'s environment and source form."""
        raise NotImplementedError

    def check(self, traj: Trajectory, options: dict[str, Any]) -> Verdict:
        """The verdict for ``traj``; ``options`` is the ``verify:`` config section as a dict."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the checker holds (an engine); called once per stage run."""

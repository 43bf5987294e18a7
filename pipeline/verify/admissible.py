"""SkillRL rollout dumps: every action must be in the admissible list the agent was shown.

SkillRL's rollout txt records, for each step, the environment's admissible actions (ALFWorld's
``admissible_commands``, WebShop's available actions) in the prompt of the next turn; the reader
puts them on ``steps[k-1].admissible_actions``. An action outside that list is one the
environment would not run (TextWorld answers "Nothing happens.", WebShop "Invalid action!",
TextWorld Express "Unknown action: I'm not sure what you mean."): it
is ``not_admissible``, of kind ``rejected`` when the recorded observation is that refusal (the
state did not change; the step can be cut) and ``impossible`` when the record shows the action
taking effect (the record is not what the environment produced; the shipped synthetic SkillRL
sample does this: its lists hold only ``go to`` actions, yet it takes and moves objects). WebShop's ``search[...]`` is listed as
``search[<your query>]``: any query matches it. Steps whose prompt listed nothing are not
judged. The reader's ``invalid_actions`` (the policy's output failed the projection) stay with
build_pairs' ``invalid_action_in_source`` rule, which drops those pairs.
"""
from __future__ import annotations

import re
from typing import Any

from pipeline.core.records import Trajectory
from pipeline.verify.base import Checker, Verdict

#: How each environment says it did not run a command: TextWorld/ALFWorld "Nothing happens.",
#: WebShop "Invalid action!", TextWorld Express "Unknown action: I'm not sure what you mean."
_REFUSALS = re.compile(r"nothing happens\.?$|invalid action|unknown action", re.I)
RULES = {"not_admissible": "the action is not in the admissible list of the state it was taken in"}


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def admitted(action: str, admissible: list[str]) -> bool:
    """Whether ``action`` is in ``admissible`` (case and whitespace ignored; a WebShop search
    matches the ``search[<...>]`` entry)."""
    a = _norm(action)
    shown = {_norm(x) for x in admissible}
    return a in shown or (a.startswith("search[") and any(s.startswith("search[") for s in shown))


class AdmissibleChecker(Checker):
    """Admissible-list membership for SkillRL rollout dumps (module docstring)."""
    name = "skillrl_admissible"
    RULES = RULES

    def applies(self, traj: Trajectory) -> bool:
        """SkillRL rollout txt of any environment."""
        return traj.source_format == "skillrl_txt"

    def check(self, traj: Trajectory, options: dict[str, Any]) -> Verdict:
        """One finding per action outside its step's admissible list."""
        verdict = Verdict(self.name)
        for prev, step in zip(traj.steps, traj.steps[1:]):
            if step.action is None or not prev.admissible_actions:
                continue
            if not admitted(step.action, prev.admissible_actions):
                refused = _REFUSALS.match((step.observation or "").strip()) is not None
                verdict.add(step.index, "not_admissible", "rejected" if refused else "impossible",
                            f"{step.action!r} is not among the {len(prev.admissible_actions)} admissible actions "
                            f"of step {prev.index}" + ("" if refused else ", yet the record shows it taking effect"))
        return verdict

"""YAML section ``usefulness:``: the usefulness score of thinks and skills and its gate.

The score itself is :mod:`pipeline.usefulness`; the ``usefulness`` stage gates thinks (SFT
pairs), the ``skills`` stage gates bank items. Read by both, so its own module keeps the import
light for either.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from pipeline.core.config_base import config_field as _f

#: What the gate does with an item whose score is at or below its threshold.
USEFULNESS_POLICIES = ("off", "flag", "quarantine")
#: Environment variable that sets the default of ``usefulness.policy`` when a config does not name
#: one (the test suite sets ``off``: a test about another stage should not load the scorer).
POLICY_ENV = "SKILLPIPE_USEFULNESS_POLICY"
POLICY_HELP = ("what the gate does with a think or bank item that does not help: quarantine (reasons no_gain "
               "for a think, no_measured_gain for a skill) | flag (keep it, count it, mark pairs with flag "
               "no_gain) | off (no scoring at all). Default flag, or $" + POLICY_ENV + " when set: on the labelled "
               "validation set the default scorer ranks thinks and bank items too weakly to drop rows by "
               "(docs/usefulness.md)")


def default_policy() -> str:
    """``$SKILLPIPE_USEFULNESS_POLICY`` when set, else ``flag`` (checked with the config).

    Flag, not quarantine: on the labelled set (``tests/data/usefulness/``,
    ``bench/usefulness_validate.py``) the base scorer's AUROC is 0.53 on thinks and 0.62 on bank
    items, so a quarantine would drop helpful rows about as often as harmful ones."""
    return os.environ.get(POLICY_ENV, "").strip() or "flag"


@dataclass
class UsefulnessConfig:
    """YAML section ``usefulness:`` (field help: ``skillpipe config --show``)."""
    policy: str = field(default_factory=default_policy, metadata={"help": POLICY_HELP,
                                                                  "choices": USEFULNESS_POLICIES})
    scorer: str = _f("", "causal LM that scores: '' = the student's base model (the embedded SmolLM2-135M, "
                         "converted once to a Hugging Face folder), or a local Hugging Face folder such as "
                         "an SFT checkpoint")
    think_threshold: float = _f(0.0, "a think helps when its gain (expert action's share among the step's "
                                     "candidates with the masked think, minus with an empty think) is above "
                                     "this", min=-1, max=1)
    skill_threshold: float = _f(0.0, "a bank item helps when its score (mean gain over held-out expert "
                                     "steps of its env and category) is above this", min=-1, max=1)
    max_candidates: int = _f(16, "candidate actions per step, the expert's included (a seeded draw when "
                                 "the admissible list is longer)", min=2)
    heldout_steps: int = _f(4, "held-out expert steps per env and category that score a bank item (4: "
                               "the validated setting, and the one that keeps scoring under a quarter of "
                               "the sample's data-stage time; 12 cost 0.42 of it)", min=1)
    max_prompt_tokens: int = _f(1024, "scorer prompt budget in tokens (a longer prompt keeps its first "
                                      "and last halves)", min=64)
    threads: int = _f(0, "torch CPU threads of the scorer (0 = torch's default)", min=0)

"""Content rules for LLM output: checks of *meaning*, not of form.

A schema only says that an answer has the right shape; the embedded 135M model writes
schema-valid thinks such as ``1.25``, skill titles such as ``**1**`` and memories that cite steps
that never happened. The rules here reject that. Each rule returns :class:`Violation` records
(``reason`` + ``detail``); the LLM stages run them inside their ``JSONRequest.check``, so a
violation is fed back to the model in the client's repair round exactly like a schema error, and
an answer that still violates a rule is quarantined with the rule's reason and the raw output.

Modules (one concept each):

* :mod:`.text` - degenerate text in any field: ``no_words``, ``not_a_phrase``, ``ngram_loop``,
  ``reused_think``, ``cut_off``;
* :mod:`.grounding` - facts checked against the recorded trajectory or the memory artifact:
  ``ungrounded_step``, ``ungrounded_observation``, ``future_leak``, ``ungrounded_think``,
  ``missing_key_step``, ``false_comparison``, ``unknown_source_memory``,
  ``category_mismatch``;
* :mod:`.topic` - ``off_topic``: sentence-embedding similarity to the source below a threshold;
* :mod:`.echo` - text that repeats its input: ``think_is_action``, ``echo_prompt``, ``not_actionable``,
  ``lists_observation``;
* :mod:`.bankrules` - skills and mistakes an agent cannot use: ``restated_action``,
  ``contradicts_success``, ``duplicate_mistake``, ``episode_specific`` (:mod:`.actions` reads commands and prose alike);
* :mod:`.gamefacts` - skills and mistakes that say what the game does not have: ``self_target``,
  ``missing_control``, ``feeling_reason``, ``wrong_category``, ``not_portable``,
  ``instance_number``; and ``false_game_fact`` (also thinks);
* :mod:`.vague` - skills and fixes that tell the agent nothing it can do: ``not_actionable`` (a
  statement), ``vague_instruction``;
* :mod:`.alignment` - thinks that speak of another step, explain nothing of their own, or narrate:
  ``think_misaligned``, ``think_unrelated``, ``narration``;
* :mod:`.metrics` - data-quality figures of an exported dataset (not a rule).

Policy: every rule quarantines unless it is listed in ``quality.flag_rules`` (config), in which
case the violation is only counted. :class:`Tally` counts what each rule rejected and builds the
manifest record of a stage (counts and rates per reason).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

#: Every content rule's reason, with its one-line definition (the manifest and README use these).
REASONS: dict[str, str] = {
    "no_words": "a field has no word of >= 2 letters, or letters are under quality.min_letter_share of its "
                "visible characters (numbers or bracket soup)",
    "not_a_phrase": "a skill title is not a short phrase (starts with a letter, <= quality.max_title_words "
                    "words, no brackets)",
    "ngram_loop": "a field repeats one word n-gram (quality.loop_ngram) at least quality.loop_min_repeats times",
    "reused_think": "two different steps of one trajectory get the same think, or thinks sharing a run of >= 6 "
                    "tokens that covers >= 60% of the later one (boilerplate with a number or tail changed; "
                    "a run of only the task's words and stop words does not count)",
    "ungrounded_step": "a refined step cites a step index without that recorded action",
    "ungrounded_observation": "a critical observation is not a (near-)span of that step's observation",
    "future_leak": "a think names an entity that first appears in an observation after its step",
    "ungrounded_think": "a think has no content word of the task, the observations so far, the action taken or "
                        "the admissible actions shown (it would fit any step)",
    "unknown_source_memory": "a skill cites a source memory that is not in the memory artifact",
    "category_mismatch": "a task-specific skill's category differs from its source memories' category",
    "off_topic": "embedding similarity to the source is below quality.off_topic_threshold",
    "think_is_action": "a think only restates an action string (the step's, an admissible one or one of the "
                       "trajectory: no content word of its own, at most one missing) or is a bare "
                       "action-shaped command",
    "echo_prompt": "a skill or mistake field, or a think, is >= 80% words of the prompt template's fixed text",
    "not_actionable": "a skill title of one word, or a principle or how-to-avoid with < 2 content words or that "
                      "states a fact instead of an instruction",
    "cut_off": "a field stops at its schema length bound mid-sentence (the grammar cut it)",
    "restated_action": "a skill's principle is one command in other words (one action verb, no order, "
                       "condition or reason)",
    "contradicts_success": "a skill or mistake prescribes an order of actions (or an appliance) that every "
                           "successful train episode of its kind contradicts, or, when none can tell, the order "
                           "ALFWorld's rules force (take before heat/cool/clean/use the lamp, transform before put)",
    "duplicate_mistake": "a common mistake whose cause or fix is near-identical to an earlier one's (verbs compared "
                         "as actions: select = click)",
    "missing_key_step": "a success memory's refined steps leave out the step the task cannot succeed without "
                        "(heat/cool/clean/use, a WebShop purchase) that the trajectory took",
    "think_misaligned": "a think speaks of another step: an action on an entity or object other than its own "
                        "action's and the goal's, another action done now (the previous one told in the present, "
                        "not as a recap), an event that has not happened yet, the agent placed where it does not "
                        "stand, the opposite transformation of the goal (cooling in a heat task) as its purpose, the "
                        "receptacle its open (close) calls already open (closed), a decision on another command "
                        "(\"so I close the fridge\" for a put), or a usual place it then does not go to; in TextWorld, a move, "
                        "look, take or inventory other than its own, or a room no observation so far has named",
    "think_unrelated": "a think names neither its command's verb nor any of its arguments (object, receptacle): "
                       "it does not explain the action (ALFWorld-grammar commands; a go may be a search instead)",
    "narration": "a think narrates in the third person (\"the agent saw ...\"), quotes the game's second-person "
                 "text (\"you see a cloth 1\", \"the product you selected\") or tells its own action as done; "
                 "talks to \"you\" (\"You are in the kitchen. You can explore ...\"); a skill's when-to-apply tells an "
                 "episode (\"When the agent did not select ...\")",
    "self_target": "a skill or a mistake's fix puts the goal object in or on an object of its own kind "
                   "(\"cool the vase ... before putting it in the vase\")",
    "missing_control": "a WebShop skill or fix tells the agent to use a page element WebShop does not have "
                       "(drop-down, filter, sort, slider, checkbox, cart, checkout, login, tabs)",
    "feeling_reason": "a skill or fix gives the agent's feelings (frustration, confusion, boredom) as the reason "
                      "for what it prescribes",
    "wrong_category": "an ALFWorld task-specific skill prescribes a step no successful episode of its category "
                      "takes (a transform in pick-and-place, a put in look-at-in-light, another category's "
                      "transform)",
    "not_portable": "an ALFWorld skill or fix has the agent pick up a lamp, appliance or receptacle, or use "
                    "something from its inventory (\"use the desklamp from your inventory\"): the game never allows it",
    "false_comparison": "a think says one price is above (or below) another and the numbers say the opposite "
                        "(\"$32.99, which exceeds ... 50.00 dollars\")",
    "false_game_fact": "an ALFWorld think, skill or fix keeps a lamp inside a container or on a drawer, has a "
                       "receptacle found somewhere (\"drawers are usually on the shelves\"), has a lamp show contents or "
                       "help a search, sends the agent to another room, or gives a lamp or appliance a transform it does not do (\"desklamps are "
                       "usually used to clean pens\"); a TextWorld skill or fix that prescribes look around to find or "
                       "check something (a room's description is shown whole on entering it)",
    "instance_number": "an ALFWorld skill or fix names a numbered instance (\"the cabinet 3\"), which differs in "
                       "every episode",
    "vague_instruction": "a skill's principle or a fix stops at a placeholder (\"the correct location\", \"the "
                         "tool\", \"more information\", \"a specific purpose\", \"realistic\", \"a location where\") instead of naming "
                         "the thing",
    "episode_specific": "an ALFWorld common mistake names the goal object and a receptacle of one of its source "
                        "tasks (\"The book is not moved from shelf to dining table\"): one episode retold; a TextWorld "
                        "skill or fix prescribes a compass direction (\"try moving east first\"): each game has its "
                        "own map",
    "lists_observation": "a think lists more than 3 things of the observations so far in one run (\"I see a stove, an "
                         "oven, a fridge, a counter, ...\"): an inventory, not a reason",
}


@dataclass(frozen=True)
class Violation:
    """One broken rule: ``reason`` (a key of :data:`REASONS`) and a human-readable ``detail``."""
    reason: str
    detail: str

    def message(self) -> str:
        """The check message fed back to the model: ``"<reason>: <detail>"`` (parsed by :func:`reason_of`)."""
        return f"{self.reason}: {self.detail}"


def reason_of(error: str, detail: str) -> str:
    """Quarantine reason of a failed LLM result: the content rule's reason when the client's
    ``check_failed`` detail starts with one (``"ungrounded_step: ..."``), else ``error``
    (``schema_invalid``, ``length``, ... or ``llm_failed`` when empty)."""
    if error == "check_failed":
        head = (detail or "").split(":", 1)[0].strip()
        if head in REASONS:
            return head
    return error or "llm_failed"


class Tally:
    """Counts of rule violations seen by one stage, and the policy gate.

    Args:
        flag_rules: reasons counted but not rejected (``quality.flag_rules``); every other
            reason rejects the answer (policy quarantine).

    ``rejected`` counts answers rejected per reason (first answers and repairs, so a violation
    that the repair round fixed still shows); ``flagged`` counts violations let through.
    """

    def __init__(self, flag_rules: Iterable[str] = ()):
        self.flag_rules = set(flag_rules)
        self.rejected: Counter = Counter()
        self.flagged: Counter = Counter()
        self.repaired: Counter = Counter()  # fields fixed from the record (grounding.reground_steps)

    def gate(self, violations: Iterable[Violation]) -> str | None:
        """Count ``violations``; return the message of the first one whose rule quarantines, else None."""
        first = None
        for v in violations:
            if v.reason in self.flag_rules:
                self.flagged[v.reason] += 1
            elif first is None:
                first = v
        if first is not None:
            self.rejected[first.reason] += 1
            return first.message()
        return None

    def record(self, items: int, quarantined: Counter) -> dict[str, Any]:
        """Manifest record: ``{items, quarantined: {reason: n}, rate: {reason: n / items},
        rejected_answers: {...}, flagged: {...}, repaired: {field: n}}`` over the stage's ``items`` (rates rounded to 4
        places; only content-rule reasons of ``quarantined`` are listed)."""
        q = {r: n for r, n in sorted(quarantined.items()) if r in REASONS}
        return {"items": items, "quarantined": q,
                "rate": {r: round(n / items, 4) if items else 0.0 for r, n in q.items()},
                "rejected_answers": dict(sorted(self.rejected.items())), "flagged": dict(sorted(self.flagged.items())),
                "repaired": dict(sorted(self.repaired.items()))}

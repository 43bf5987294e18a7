"""Skills and fixes that tell the agent nothing it can do.

Seen in the bank Qwen2.5-Coder-1.5B built from the shipped sample (every item below passed every
other rule, and none would change what an agent does):

* a statement instead of an instruction - "Use Desklamp Effectively: The desklamp illuminates the
  object and makes it easier to see its contents." (``not_actionable``, :func:`is_statement`), or
  an instruction about wording ("Use Correct Language: use clear and concise language to
  communicate their intentions", the GRPO skill updater; ``not_actionable``, :data:`_SPEECH`);
* an instruction whose target is a placeholder the agent cannot resolve
  (``vague_instruction``, :func:`placeholders`): "move it to the correct location for use or
  storage" (which location?), "Use the tool to complete a task, such as cooking or cleaning"
  (ALFWorld and WebShop have no tool: name the microwave, the fridge, the sinkbasin or the
  lamp), "Examine the object to get more information about it", "Look closely at the object's
  features and details to gain a better understanding of what it is", "Do not move objects without a
  specific purpose in mind", "Ensure that the price constraints you set are realistic", "move it
  to a location where it can be cooled", "Follow the instructions carefully"; and the GRPO skill
  updater's "place objects in their designated safe places", "use appropriate containers to
  store objects", "use it as a clue to determine its purpose or location", "checking if it can
  be used in its intended location" (TextWorld Express, put-away tasks). SkillRL's "If the first result page lacks
  suitable items" is a condition and passes: "suitable" and "right" count only after an article.

Only the instruction fields are read (a skill's principle, a mistake's how-to-avoid): a
when-to-apply may name "the correct object" as the condition it is ("When holding the correct
object and before any placement", a SkillRL skill). Measured in
``tests/pipeline/quality/test_vague.py``: neither rule fires on SkillRL's 162 released ALFWorld,
WebShop and Search items, nor on the 1.5B teacher's usable items.
"""
from __future__ import annotations

import re

from pipeline.quality import phrases
from pipeline.quality.violation import Violation

#: A sentence's leading condition ("When ..., ", "After ..., "): skipped before its main clause.
_LEAD = re.compile(r"^(?:(?:when|whenever|after|before|if|once|while|as soon as|upon|for|during|on|to|"
                   r"in order to|unless|until)\b[^,]*,\s*)+", re.I)
#: A main clause that opens with one of these words states something instead of telling the agent
#: to do it ("The desklamp illuminates ...", "It makes ...").
_STATING = frozenset("the a an this that these those it its they their there".split())
#: Words that make a stated sentence an instruction all the same ("The agent should open ...",
#: "It is best to ...").
_OBLIGES = re.compile(r"\b(?:should|must|needs? to|has to|have to|ought to|is (?:best|better|important|"
                      r"essential|necessary|wise|helpful|useful) to)\b", re.I)
_SENTENCE = re.compile(r"[^.!?;]+")

#: Placeholders an instruction may not stop at. Each names a thing the skill should have named;
#: each comes from an output (``data/vague.toml``, table ``placeholder``).
_PLACEHOLDER = re.compile(phrases.alternation("vague.toml", "placeholder"), re.I)


#: An instruction about wording or talking ("use clear and concise language to communicate their
#: intentions", the GRPO skill updater on TextWorld Express): the agent acts only through the
#: game's commands, so nothing of it can be done.
_SPEECH = re.compile(phrases.alternation("vague.toml", "speech"), re.I)  # data/vague.toml, table speech


def is_statement(text: str) -> bool:
    """True when no sentence of ``text`` instructs: each main clause (after a leading condition,
    :data:`_LEAD`) opens with an article, demonstrative or third-person pronoun
    (:data:`_STATING`) and no sentence has an obligation (:data:`_OBLIGES`). Empty text is not a
    statement (``no_words`` judges it)."""
    sentences = [s.strip() for s in _SENTENCE.findall(text or "") if s.strip()]
    if not sentences:
        return False
    for s in sentences:
        main = _LEAD.sub("", s).split()
        if not main or main[0].lower().strip("\"'(") not in _STATING or _OBLIGES.search(s):
            return False
    return True


def placeholders(text: str) -> list[str]:
    """The placeholders of :data:`_PLACEHOLDER` in ``text``, lower-cased, in order, each once."""
    return list(dict.fromkeys(m.group(0).lower() for m in _PLACEHOLDER.finditer(text or "")))


def vague_violations(name: str, text: str) -> list[Violation]:
    """``not_actionable`` for a statement (:func:`is_statement`) or an instruction about wording
    (:data:`_SPEECH`) and ``vague_instruction`` for a placeholder target (:func:`placeholders`) in one instruction field ``name`` (a principle or a
    how-to-avoid)."""
    out = []
    if is_statement(text):
        out.append(Violation("not_actionable", f"{name} {text[:60]!r} states a fact and tells the agent nothing "
                                               "to do; say what to do, when"))
    if speech := _SPEECH.search(text or ""):
        out.append(Violation("not_actionable", f"{name} asks for {speech.group(0)!r}: the agent acts only through "
                                               "the game's commands; say which command, when"))
    if found := placeholders(text):
        out.append(Violation("vague_instruction", f"{name} says {', '.join(repr(p) for p in found)} where it should "
                                                  "name the thing (which place, appliance, option or price)"))
    return out

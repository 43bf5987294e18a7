"""Search/QA rule checker: the action syntax, an answer at the end, and its score.

Sources of the rules: SkillRL's Search environment accepts ``<search>query</search>`` and
``<answer>text</answer>`` (the readers map ReAct's ``search[...]``/``finish[...]`` to those tags:
:func:`pipeline.envs.search.normalise_action`); ReAct's Wikipedia environment (``wikienv.py``)
also has ``lookup[keyword]``. An episode ends with an answer. The score is the one of HotpotQA's
official evaluation (``hotpot_evaluate_v1.py``): exact match and token F1 after SQuAD's
normalisation (lower case, punctuation and the articles a/an/the removed, whitespace collapsed),
computed against a gold answer when the source carries one (metadata ``gold_answer``). Without a
gold answer the environment's own verdict in the last observation decides when there is one
(ReAct/FireAct ``Episode finished, reward = True|False``, Reflexion ``Answer is CORRECT|INCORRECT``).
"""
from __future__ import annotations

import json
import re
import string
from collections import Counter
from typing import Any

from pipeline.core.records import Trajectory
from pipeline.rules import is_reasoning
from pipeline.verify.base import Checker, Verdict

RULES = {
    "not_in_grammar": "an action other than <search>...</search>, <answer>...</answer> or lookup[...]",
    "no_answer": "the episode ends without an answer",
    "wrong_answer": "the answer misses the gold answer (exact match false and token F1 below verify.qa_min_f1), "
                    "or the environment judged it wrong",
}

_ACTION = re.compile(r"<(search|answer)>(.+?)</\1>|lookup\[(.+)\]", re.S | re.I)
_VERDICT = re.compile(r"reward\s*=\s*(true|false)|answer is (correct|incorrect)", re.I)


def normalise_answer(text: str) -> str:
    """SQuAD/HotpotQA answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def exact_match(prediction: str, gold: str) -> bool:
    """Exact match after :func:`normalise_answer`."""
    return normalise_answer(prediction) == normalise_answer(gold)


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 (0..1) of the normalised answers; the yes/no/noanswer special case of HotpotQA's
    evaluation: such a gold (or prediction) scores 0 unless both are equal."""
    p, g = normalise_answer(prediction), normalise_answer(gold)
    if (p in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer")) and p != g:
        return 0.0
    common = Counter(p.split()) & Counter(g.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p.split()), same / len(g.split())
    return 2 * precision * recall / (precision + recall)


class SearchChecker(Checker):
    """The Search/QA rules (module docstring)."""
    name = "search"
    RULES = RULES

    def applies(self, traj: Trajectory) -> bool:
        """Search/QA trajectories of real episodes (not abstracted SkillRL memories)."""
        return traj.env == "search" and traj.source_format != "skillrl_memory_json" and len(traj.steps) > 1

    def check(self, traj: Trajectory, options: dict[str, Any]) -> Verdict:
        """Syntax per step, then the answer against the gold answer or the environment's verdict."""
        verdict = Verdict(self.name)
        answer = None
        for step in traj.steps[1:]:
            if step.action is None or is_reasoning(step):
                continue
            m = _ACTION.fullmatch(step.action.strip())
            if m is None:
                verdict.add(step.index, "not_in_grammar", "impossible", f"{step.action!r} is not a search, an "
                            "answer or a lookup")
            elif (m[1] or "").lower() == "answer":
                answer = m[2].strip()
        last = traj.steps[-1].index
        if answer is None:
            verdict.goal_reached = False
            verdict.add(last, "no_answer", "goal", "no <answer> step")
            return verdict
        verdict.goal_reached = _judge(traj, answer, float(options.get("qa_min_f1", 1.0)), verdict)
        if verdict.goal_reached is False and not any(f.rule == "wrong_answer" for f in verdict.findings):
            verdict.add(last, "wrong_answer", "goal", f"the environment judged {answer!r} wrong")
        return verdict


def _judge(traj: Trajectory, answer: str, min_f1: float, verdict: Verdict) -> bool | None:
    """Whether ``answer`` is right: by the gold answer when the source has one, else by the
    environment's verdict in the last observation, else ``None`` (undecided)."""
    try:
        gold = json.loads(traj.metadata or "{}").get("gold_answer")
    except (ValueError, AttributeError):
        gold = None
    if isinstance(gold, str) and gold.strip():
        em, f1 = exact_match(answer, gold), f1_score(answer, gold)
        verdict.note = f"exact_match={em} f1={f1:.2f} against gold {gold!r}"
        if not em and f1 < min_f1:
            verdict.add(traj.steps[-1].index, "wrong_answer", "goal", f"answer {answer!r} vs gold {gold!r}: "
                        f"exact match false, F1 {f1:.2f} < {min_f1:g}")
            return False
        return True
    m = _VERDICT.search(traj.steps[-1].observation or "")
    if m is None:
        return None
    return (m[1] or m[2]).lower() in ("true", "correct")

"""Best-of-n thinks for distill: sample more answers per call, keep the most useful think per step.

With ``distill.best_of = n > 1``, once distill's own rounds are done (the greedy chunk calls, the
one-step retries and their rejection sampling), every answered chunk is asked ``n - 1`` more times,
sampled (``distill.retry_temperature``, seeds ``BASE_SEED + 1 .. BASE_SEED + n - 1``). For each step
the candidates are the think distill kept and every sampled think that passes the content rules on
its own (the check a one-step answer gets); when they differ, the usefulness scorer
(:mod:`pipeline.usefulness`) scores each and the highest gain wins (ties keep distill's think).
Nothing here lowers a bar: every candidate passed the same rules, and the usefulness stage still
gates the winner.

The stage passes its own request builder and rule check in (:func:`run_best_of`), so this module
needs nothing from :mod:`pipeline.stages.distill`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

#: Seeds of the best-of-n samples start above those of distill's retry rounds (1..8).
BASE_SEED = 100


@dataclass
class Choice:
    """What best-of-n did to one step: the candidates scored and the gain of each."""
    step_index: int
    thinks: list[str]
    gains: list[float]

    @property
    def best(self) -> str:
        """The think with the highest gain; the first (distill's own) on a tie."""
        top = max(self.gains)
        return self.thinks[self.gains.index(top)]


def candidates(kept: list[dict[str, Any]], samples: list[Any], passes: Callable[[dict, dict], bool]
               ) -> dict[int, list[str]]:
    """``{step_index: [distill's think, then each distinct passing sampled think]}`` of one chunk:
    ``kept`` is distill's answer (``[{step_index, think}]``), ``samples`` the sampled results
    (``JSONResult``), ``passes(entry_think, answer)`` the content-rule check of one think."""
    out = {int(t["step_index"]): [" ".join(t["think"].split())] for t in kept}
    for res in samples:
        if not res.ok:
            continue
        for t in res.value.get("thinks") or []:
            i, text = int(t["step_index"]), " ".join(str(t.get("think") or "").split())
            if i in out and text and text not in out[i] and passes(t, res.value):
                out[i].append(text)
    return out


def run_best_of(jobs: list[Any], n: int, temperature: float, request_for: Callable, send: Callable,
                passes_for: Callable, score_step: Callable) -> dict[str, int]:
    """Best-of-``n`` over the ok chunk results of ``jobs`` (module docstring); results are replaced
    in place. ``request_for(job, k, sampling)`` builds chunk ``k``'s request with ``sampling``;
    ``send(sampled_jobs)`` answers them; ``passes_for(job, k)`` returns the chunk's one-think check;
    ``score_step(job, step_index, thinks)`` returns a gain per think. Returns the counters
    ``{samples, steps, chosen_sampled}``."""
    from pipeline.llm.types import JSONResult

    plans = [(job, k) for job in jobs if job.rejected is None and not job.failed
             for k, r in enumerate(job.results) if r.ok]
    asked = [[request_for(job, k, {"temperature": temperature, "seed": BASE_SEED + j}) for j in range(1, n)]
             for job, k in plans]
    answers = send(asked)
    stats = {"samples": sum(len(a) for a in asked), "steps": 0, "chosen_sampled": 0}
    for (job, k), got in zip(plans, answers):
        kept = job.results[k].value["thinks"]
        per_step = candidates(kept, got, passes_for(job, k))
        chosen = []
        for t in kept:
            i, options = int(t["step_index"]), per_step[int(t["step_index"])]
            best = options[0]
            if len(options) > 1:
                best = Choice(i, options, score_step(job, i, options)).best
                stats["steps"] += 1
                stats["chosen_sampled"] += best != options[0]
            chosen.append({"step_index": i, "think": best})
        old = job.results[k]
        job.results[k] = JSONResult(old.key, True, value={"thinks": chosen}, raw=old.raw, attempts=old.attempts,
                                    cached=old.cached, usage=old.usage)
    return stats

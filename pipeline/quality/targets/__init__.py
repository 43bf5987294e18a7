"""What the stages hand the content rules, one module per kind of output: the subject each
target's checks take, how an example becomes one, and the target's checks in the order they run
(:mod:`pipeline.quality.registry`). Assembled with the rules in :mod:`pipeline.quality.rulebook`."""
from __future__ import annotations

from pipeline.core.records import Step, Trajectory
from pipeline.quality.registry import Example


def example_trajectory(ex: Example) -> Trajectory:
    """The trajectory of an example's context: ``task``, ``actions``, ``observations`` (one more
    than the actions; missing ones blank), ``admissible`` (one list per step, optional),
    ``category`` and ``outcome`` (default ``success``)."""
    c = ex.context
    actions = list(c.get("actions") or [])
    obs = list(c.get("observations") or [])
    obs += [""] * (len(actions) + 1 - len(obs))
    adm = list(c.get("admissible") or [])
    adm += [[]] * (len(actions) + 1 - len(adm))
    steps = [Step(k, actions[k - 1] if k else None, obs[k], list(adm[k])) for k in range(len(actions) + 1)]
    return Trajectory("example", ex.env, "example", c.get("task", ""), c.get("category", "other"),
                      c.get("outcome", "success"), 1.0, steps, "example", "example", 0)

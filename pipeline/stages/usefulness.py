"""Stage ``usefulness``: score every SFT pair's think and gate the ones that do not help.

For each pair of ``build_pairs`` with a non-empty think, the scorer (:mod:`pipeline.usefulness`)
measures the think's gain: how much more of its belief, over the step's candidate actions, goes
to the expert action with the (masked) think than with an empty one. The score is stored in the
pair's ``usefulness`` column with the scorer's id and the score's version. Then the gate
(``usefulness.policy``):

* ``quarantine`` (default): a pair whose gain is at or below ``usefulness.think_threshold`` is
  quarantined with reason ``no_gain``;
* ``flag``: it is kept with flag ``no_gain``;
* ``off``: nothing is scored (every ``usefulness`` stays null) and nothing is gated.

A pair with an empty think (action-only SFT, ``distill.reasoning: none``) is not scored and
passes: there is nothing to measure. Units in = pairs in = pairs out + quarantined.

The scorer reads a lean prompt, not the pair's SFT prompt: the same system and user turns
rendered without the skills block (:func:`pipeline.prompts.render_step_messages`, the run's
``prompt`` history), so a step costs one prefill of the task and the recent steps. Candidates
come from :mod:`pipeline.usefulness.candidates`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from pipeline.core.records import SFT_PAIR_SCHEMA, Trajectory
from pipeline.progress import bar
from pipeline.prompts import render_step_messages, synthetic_done_admissible
from pipeline.stage.stage import Stage, StageContext, StageOutput, reject
from pipeline.usefulness import SCORE_VERSION
from pipeline.usefulness.candidates import step_candidates

NAME = "usefulness"
REASON = "no_gain"


def scoring_messages(traj: Trajectory, k: int, pair: dict[str, Any], ctx: StageContext) -> list[dict]:
    """The scorer's prompt for ``pair`` (action ``k`` of ``traj``): its SFT system and user turns
    rendered without the skills block (module docstring)."""
    pcfg = dataclasses.replace(ctx.config.prompt, skills=False)
    return render_step_messages(traj, k, "", pcfg, _admissible(traj, pair, ctx))


def _admissible(traj: Trajectory, pair: dict[str, Any], ctx: StageContext) -> list[str] | None:
    """The admissible list the pair's prompt showed: the synthetic ``done`` sample, else the step's own."""
    return synthetic_done_admissible(traj, ctx.config.distill.seed) if pair.get("synthetic") else None


class UsefulnessStage(Stage):
    """Score and gate the thinks of the SFT pairs (module docstring)."""
    name = NAME
    inputs = ("verify", "build_pairs")
    schema = SFT_PAIR_SCHEMA
    config_sections = ("usefulness", "prompt", "distill")
    sharded = True  # one pair at a time
    version = "1"

    def input_facts(self, ctx: StageContext) -> list[dict[str, Any]]:
        """The upstream content hashes and the scorer's identity (its weights' hash): another
        scorer model reruns the stage."""
        from pipeline.usefulness.load import scorer_id
        facts = super().input_facts(ctx)
        cfg = ctx.config.usefulness
        return facts + ([{"scorer": scorer_id(cfg.scorer)}] if cfg.policy != "off" else [])

    def run(self, ctx: StageContext) -> StageOutput:
        """Score every pair with a think; gate by ``usefulness.policy``."""
        cfg = ctx.config.usefulness
        pairs = ctx.upstream("build_pairs").read_rows()
        if cfg.policy == "off" or not any((p.get("think") or "").strip() for p in pairs):
            return StageOutput(rows=pairs, quarantine=[], rows_in=len(pairs), counters={"scored": 0})
        from pipeline.usefulness.load import open_scorer, scorer_id
        from pipeline.usefulness.score import score_thinks

        trajs = {r["trajectory_id"]: Trajectory.from_row(r) for r in ctx.upstream("verify").read_rows()}
        scorer, sid = open_scorer(cfg), scorer_id(cfg.scorer)
        rooms: dict[str, list] = {}
        rows, quarantine, gains = [], [], []
        tick = bar(len(pairs), desc="usefulness", unit="pair")
        for p in pairs:
            tick.update()
            think = (p.get("think") or "").strip()
            if not think:
                rows.append(p)
                continue
            traj, k = trajs[p["trajectory_id"]], int(p["step_index"])
            cands = step_candidates(traj, k, p["action"], _admissible(traj, p, ctx),
                                    _rooms(rooms, traj), cfg.max_candidates)
            s = score_thinks(scorer, scoring_messages(traj, k, p, ctx), [think], p["action"], traj.env, cands)[0]
            gains.append(s.gain)
            scored = {**p, "usefulness": {"gain": s.gain, "share": s.share_think, "share_empty": s.share_empty,
                                          "candidates": s.candidates, "scorer": sid, "version": SCORE_VERSION}}
            if s.gain > cfg.think_threshold:
                rows.append(scored)
            elif cfg.policy == "flag":
                rows.append({**scored, "flags": [*scored["flags"], REASON]})
            else:
                quarantine.append(reject(NAME, REASON, f"gain {s.gain:+.3f} <= usefulness.think_threshold "
                                                       f"{cfg.think_threshold:+.3f} over {s.candidates} candidates",
                                         p["pair_id"], p["output"], p["source_uri"], p["source_line"]))
        tick.close()
        return StageOutput(rows=rows, quarantine=quarantine, rows_in=len(pairs),
                           counters={"scored": len(gains), "scorer": sid, "threshold": cfg.think_threshold,
                                     "policy": cfg.policy, "gain": summary(gains)})


def _rooms(cache: dict[str, list], traj: Trajectory) -> list | None:
    """The ALFWorld replay of ``traj`` (the state each candidate list is built from), once per trajectory."""
    if traj.env != "alfworld":
        return None
    if traj.trajectory_id not in cache:
        from pipeline.verify.alfworld import replay
        cache[traj.trajectory_id] = replay(traj)
    return cache[traj.trajectory_id]


def summary(values: list[float]) -> dict[str, Any]:
    """``{n, mean, min, max, above_0}`` of a list of gains (rounded to 4 places); ``{n: 0}`` when empty."""
    if not values:
        return {"n": 0}
    return {"n": len(values), "mean": round(sum(values) / len(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "above_0": sum(v > 0 for v in values)}


STAGE = UsefulnessStage()

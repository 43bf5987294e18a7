"""Pilot of the outcome experiment: which TextWorld Express setting discriminates?

    .venv/bin/python bench/outcome_pilot.py                       # the built-in candidates
    .venv/bin/python bench/outcome_pilot.py --candidates "coin:numLocations=3,includeDoors=0:6"

The four-arm experiment (``bench/outcome.py``) only says something when its task is neither
solved by the untrained model nor by plain behaviour cloning: two-room ``coin`` was at the
ceiling (action-only SFT won 30 of 30 held-out games). This pilot measures, per candidate
setting, the **action-only arm alone**: gold/noisy rollouts on the train fold, the data
pipeline with ``distill.reasoning: none`` (no LLM is needed for that arm; the memory and skills
stages run against a loopback OpenAI-protocol stub whose schema-valid answers the content rules
quarantine, so the bank stays empty), LoRA SFT with ``bench/outcome.py``'s budget, then greedy
evaluation on held-out dev-fold seeds. A setting is a good pick when that success is clearly
below 1 (and well above 0: then the thinks and the bank have room to add).

Each candidate is ``game:params:eval_max_steps`` (params as TextWorld Express takes them, comma
separated). Prints one line per candidate with the success, its 95 % Wilson interval, valid-action
rate and mean steps; writes ``<root>/pilot.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench import outcome  # noqa: E402
from bench.outcome_arms import arm, arm_config  # noqa: E402
from pipeline.core import layout  # noqa: E402

#: Settings tried by default: (game, params, actions per evaluation game).
CANDIDATES = (
    "coin:numLocations=2,numDistractorItems=0,includeDoors=0,limitInventorySize=0:4",
    "coin:numLocations=4,numDistractorItems=0,includeDoors=0,limitInventorySize=0:8",
    "twc:numLocations=1,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0:8",
)


def parse_candidate(text: str) -> tuple[str, str, int]:
    """``game:params:steps`` -> (game, params, steps); ``ValueError`` for another shape."""
    parts = text.strip().split(":")
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
        raise ValueError(f"candidate {text!r} is not game:params:eval_max_steps")
    return parts[0], parts[1], int(parts[2])


def pilot(game: str, params: str, steps: int, args: argparse.Namespace, base_url: str) -> dict:
    """The action-only arm of one candidate; returns its eval summary with the pairs and wall time."""
    from pipeline.engine.runner import run_pipeline
    tag = re.sub(r"[^A-Za-z0-9]+", "-", f"{game}-{params}-{steps}").strip("-")
    a = outcome.parse_args(["--root", os.path.join(args.root, tag), "--run-id", "pilot", "--game", game,
                            "--game-params", params, "--train-tasks", str(args.train_tasks),
                            "--sft-steps", str(args.sft_steps), "--eval-episodes", str(args.eval_episodes),
                            "--eval-max-steps", str(steps), "--rollout-max-steps", str(max(12, 2 * steps))])
    t0 = time.monotonic()
    outcome.rollouts(a)
    cfg = arm_config(arm("actions"), outcome.base_config(a))
    cfg.llm.base_url, cfg.llm.model = base_url, "stub"
    results = run_pipeline(a.root, a.run_id, os.path.join(a.root, "traces", a.run_id), cfg, env="textworld",
                           log=lambda m: None)
    pairs = outcome.exported_pairs(results)
    if not pairs:
        return {"game": game, "params": params, "eval_max_steps": steps, "pairs": 0, "wall_s": time.monotonic() - t0}
    outcome.sft(a)
    s = outcome.evaluate(a, layout.SFT_STEP)
    return {"game": game, "params": params, "eval_max_steps": steps, "pairs": pairs,
            "wall_s": round(time.monotonic() - t0), **{k: s[k] for k in (
                "episodes", "wins", "success_rate", "success_ci95", "valid_action_rate", "mean_steps")}}


def main(argv: list[str] | None = None) -> int:
    """Run every candidate; print one line each and write ``<root>/pilot.json``."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.join(ROOT, "runs", "outcome_pilot"), help="folder for the pilot runs")
    p.add_argument("--candidates", default=";".join(CANDIDATES),
                   help="';'-separated game:params:eval_max_steps settings")
    p.add_argument("--train-tasks", type=int, default=20, help="training games per candidate (bench/outcome.py's default)")
    p.add_argument("--sft-steps", type=int, default=40, help="SFT optimizer steps")
    p.add_argument("--eval-episodes", type=int, default=30, help="held-out games per candidate")
    args = p.parse_args(argv)
    try:
        cands = [parse_candidate(c) for c in args.candidates.split(";") if c.strip()]
    except ValueError as e:
        p.error(str(e))
    import torch
    torch.set_num_threads(1)
    from bench.stub_endpoint import StubEndpoint
    out = []
    with StubEndpoint() as stub:
        for game, params, steps in cands:
            r = pilot(game, params, steps, args, stub.base_url)
            out.append(r)
            if "success_rate" in r:
                lo, hi = r["success_ci95"]
                print(f"pilot: {game} {params} <= {steps} actions: action-only SFT {r['wins']}/{r['episodes']} = "
                      f"{r['success_rate']:.3f} [{lo:.3f}, {hi:.3f}], valid {r['valid_action_rate']:.3f}, "
                      f"mean steps {r['mean_steps']:.2f}, {r['pairs']} pairs, {r['wall_s']} s", flush=True)
            else:
                print(f"pilot: {game} {params}: no SFT pair", flush=True)
    os.makedirs(args.root, exist_ok=True)
    with open(os.path.join(args.root, "pilot.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2)
    from bench.results import write_result  # the result file (bench/results.py)
    write_result("outcome_pilot", {"candidates": out}, {k: v for k, v in vars(args).items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

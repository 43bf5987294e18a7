"""What the usefulness gate costs: its share of a run's data-stage wall time.

    .venv/bin/python bench/usefulness_overhead.py --run-dir runs/sample

Reads the run's stage manifests: the ``usefulness`` stage's wall time (thinks: scorer loading and
scoring) plus the skills stage's scoring time (``counters.usefulness.<env>.wall_s``, held-out steps
of the bank items), against the data stages' wall time without them. Prints
``usefulness_overhead=<ratio>`` (target: at most 0.25 on the shipped sample) and writes a result
file (bench/results.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def overhead(run_dir: str) -> dict:
    """``{scoring_s, data_stages_s, ratio, thinks_s, bank_s}`` of a finished run (module docstring).
    Raises ``FileNotFoundError`` when a data stage has no manifest."""
    from pipeline.core.layout import ARTIFACT_MANIFEST, STAGES
    walls, manifests = {}, {}
    for stage in STAGES:
        path = os.path.join(run_dir, stage, ARTIFACT_MANIFEST)
        with open(path, encoding="utf-8") as f:
            manifests[stage] = json.load(f)
        walls[stage] = float(manifests[stage].get("wall_s") or 0.0)
    per_env = (manifests["skills"].get("counters") or {}).get("usefulness") or {}
    bank_s = sum(float(rec.get("wall_s") or 0.0) for rec in per_env.values())
    thinks_s = walls["usefulness"]
    scoring = bank_s + thinks_s
    rest = sum(walls.values()) - scoring
    return {"scoring_s": round(scoring, 1), "thinks_s": round(thinks_s, 1), "bank_s": round(bank_s, 1),
            "data_stages_s": round(rest, 1), "ratio": round(scoring / rest, 4) if rest else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", default=os.path.join(ROOT, "runs", "sample"))
    a = p.parse_args(argv)
    fig = overhead(a.run_dir)
    print(f"scoring {fig['scoring_s']} s (thinks {fig['thinks_s']} s, bank {fig['bank_s']} s) against "
          f"{fig['data_stages_s']} s of the other data stages")
    print(f"usefulness_overhead={fig['ratio']}")
    from bench.results import write_result
    write_result("usefulness_overhead", fig, {"run_dir": os.path.basename(os.path.normpath(a.run_dir))})
    return 0


if __name__ == "__main__":
    sys.exit(main())

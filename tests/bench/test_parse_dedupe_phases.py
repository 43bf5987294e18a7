"""bench/parse_dedupe.py --phases: the per-phase CPU breakdown that README's 0.5x discussion
cites. Run on a generated 5-env tree (20 files) in a fresh process, as a user would."""
import os
import subprocess
import sys

from tests.helpers.paths import FIXTURES, REPO

BENCH = os.path.join(REPO, "bench", "parse_dedupe.py")
TOOL = os.path.join(FIXTURES, "tools", "make_skillrl_rollouts.py")
PHASES = ["list", "read_hash_decode", "reader", "content_digest", "arrow_parquet", "remove_loops"]


def test_phases_prints_every_phase_and_a_bound_below_the_sum(tmp_path):
    tree = str(tmp_path / "tree")
    subprocess.run([sys.executable, TOOL, tree, "--envs", "5", "--seed", "1"], check=True)
    out = subprocess.run([sys.executable, BENCH, "--tree", tree, "--phases"], check=True,
                         capture_output=True, text=True).stdout
    values = {}
    for tok in out.split():
        key, eq, val = tok.partition("=")
        if eq:
            values[key] = float(val)
    assert [k[len("phase_"):-len("_cpu_s")] for k in values if k.startswith("phase_")] == PHASES
    assert values["trajectories"] == 20  # every file reads as one trajectory (no selection in this mode)
    total = sum(values[f"phase_{p}_cpu_s"] for p in PHASES)
    assert abs(values["phases_cpu_s"] - total) < 0.02  # the printed sum is the sum of the printed phases
    assert 0 <= values["reader_ids_cpu_s"] <= values["phase_reader_cpu_s"] + 0.01
    bound = total - values["phase_reader_cpu_s"] + values["reader_ids_cpu_s"]  # the reader's own work set to zero
    assert abs(values["bound_without_reader_cpu_s"] - bound) < 0.03

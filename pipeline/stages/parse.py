"""Stage ``parse``: read every input file into normalised trajectories, then select.

Reading goes through :func:`pipeline.formats.discover.read_file` (format sniffed per file unless
``parse.format`` names one; ``ctx.env`` is the env hint). Every record read is one unit in:
a trajectory, or a quarantine row for what could not be read (an unreadable file is one unit).

Selection (spec §3.2, with D-P5 and D-P6 fixed), per (env, env_instance) and outcome:

* successes: the ``max_per_instance`` shortest (fewest actions), ties by source file name, then
  source URI, then record index (the reference broke ties by filesystem order);
* failures: the first ``max_per_instance`` by source file name, then URI, then record index;
* mixed-outcome instances keep both outcomes (the reference dropped them: D-P5);
* optional caps on instances with a success / failure-only instances (in (env, instance) order)
  and a global cap on trajectories.

Everything not selected is quarantined with reason ``not_selected`` and the full trajectory row
as JSON in ``raw``, so nothing disappears silently.
"""
from __future__ import annotations

import json
import os
from collections import Counter, defaultdict

from tqdm import tqdm

from ..config import ParseConfig
from ..formats.common import bad, rebase
from ..formats.discover import list_input_files, read_file
from ..records import TRAJECTORY_SCHEMA, QuarantineRow, Trajectory
from ..runner import StageContext, StageOutput

NAME = "parse"
INPUTS: tuple[str, ...] = ()
SCHEMA = TRAJECTORY_SCHEMA
USES_LLM = False


def prompt_files(ctx: StageContext) -> list[str]:
    return []


def _file_key(t: Trajectory) -> tuple:
    return (os.path.basename(t.source_uri), t.source_uri, t.record_index)


def select(trajs: list[Trajectory], cfg: ParseConfig) -> tuple[list[Trajectory], dict[str, str]]:
    """Split ``trajs`` into (kept, {trajectory_id: why not selected}); kept keeps input order.

    Deterministic: depends only on trajectory fields, never on read order.
    """
    groups: dict[tuple[str, str], dict[str, list[Trajectory]]] = defaultdict(lambda: {"success": [], "failure": []})
    for t in trajs:
        groups[(t.env, t.env_instance)]["success" if t.success else "failure"].append(t)
    dropped: dict[str, str] = {}
    ranked: list[tuple[tuple, Trajectory]] = []  # (global order key, trajectory)
    n_success_inst = n_failure_inst = 0
    for key in sorted(groups):
        succ = sorted(groups[key]["success"], key=lambda t: (len(t.steps) - 1, *_file_key(t)))
        fail = sorted(groups[key]["failure"], key=_file_key)
        if succ:
            n_success_inst += 1
            over = cfg.max_success_instances and n_success_inst > cfg.max_success_instances
            cap_rule = "max_success_instances"
        else:
            n_failure_inst += 1
            over = cfg.max_failure_instances and n_failure_inst > cfg.max_failure_instances
            cap_rule = "max_failure_instances"
        for outcome, items in (("success", succ), ("failure", fail)):
            for rank, t in enumerate(items):
                if over:
                    dropped[t.trajectory_id] = f"{cap_rule}={getattr(cfg, cap_rule)} instances reached"
                elif cfg.max_per_instance and rank >= cfg.max_per_instance:
                    dropped[t.trajectory_id] = (f"{outcome} #{rank + 1} of instance {key[1]!r}: "
                                                f"max_per_instance={cfg.max_per_instance}")
                else:
                    ranked.append(((key, outcome != "success", rank), t))
    if cfg.max_trajectories:
        for _, t in sorted(ranked, key=lambda x: x[0])[cfg.max_trajectories:]:
            dropped[t.trajectory_id] = f"max_trajectories={cfg.max_trajectories} reached"
    return [t for t in trajs if t.trajectory_id not in dropped], dropped


def run(ctx: StageContext) -> StageOutput:
    """Read ``ctx.input_path``; see the module docstring. Counts: in = kept + quarantined."""
    cfg = ctx.config.parse
    files = list_input_files(ctx.input_path)
    trajs: list[Trajectory] = []
    quarantine: list[QuarantineRow] = []
    read_by_format: Counter = Counter()
    root = ctx.input_path if os.path.isdir(ctx.input_path) else os.path.dirname(ctx.input_path)
    for path in tqdm(files, desc="parse", unit="file", disable=None):
        rel = os.path.relpath(path, root)  # URIs relative to the input root: ids independent of location
        for item in read_file(path, cfg.format, ctx.env, cfg.success_threshold):
            if isinstance(item, QuarantineRow):
                item.source_uri = rel
                quarantine.append(item)
            else:  # ids hash (source URI, record index, content): unique per record
                trajs.append(rebase(item, rel))
                read_by_format[item.source_format] += 1
    rows_in = len(trajs) + len(quarantine)
    kept, dropped = select(trajs, cfg)
    for t in trajs:
        if t.trajectory_id in dropped:
            quarantine.append(bad("not_selected", dropped[t.trajectory_id], t.source_uri, t.source_line,
                                  json.dumps(t.to_row(), ensure_ascii=False), item_id=t.trajectory_id, limit=None))
    counters = {
        "files": len(files),
        "read_by_source_format": dict(sorted(read_by_format.items())),
        "kept_by_source_format": dict(sorted(Counter(t.source_format for t in kept).items())),
        "kept_by_env_category_outcome": dict(sorted(
            Counter(f"{t.env}/{t.category}/{t.outcome}" for t in kept).items())),
        "kept_instances": len({(t.env, t.env_instance) for t in kept}),
    }
    return StageOutput(rows=[t.to_row() for t in kept], quarantine=quarantine, rows_in=rows_in, counters=counters)

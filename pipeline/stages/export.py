"""Stage ``export``: train/val split by environment instance, SFT files for LLaMA-Factory and TRL.

Reads the validated SFT pairs and the skill bank; writes the same pairs as Parquet with ``split``
set, one file set per split in the Hugging Face Hub's layout (:data:`SPLIT_FILES`:
``data/train-00000-of-00001.parquet``, ``data/validation-00000-of-00001.parquet``), so that
``datasets.load_dataset(EXPORT)`` and ``load_dataset("parquet", data_dir=EXPORT)`` give the
``train`` and ``validation`` splits (that naming is matched before any other file name, so the
files below are not mistaken for splits), plus these files in the stage folder:

* ``sft_train.jsonl`` / ``sft_val.jsonl``: one pair per line, alpaca ``instruction``/``input``
  (always "")/``output`` plus ``messages`` (system, user, assistant) and ``pair_id`` for lineage;
* ``dataset_info.json``: LLaMA-Factory registration of both files, once as alpaca and once as
  OpenAI-style ``messages`` (sharegpt formatting with role/content tags);
* ``skill_bank.json``: the bank in SkillRL's JSON layout (``pipeline.bank.rows.to_skillrl_json``);
* ``DATASET_CARD.md``: counts by split/env/category, sources, bank versions, models, flags, the
  data-quality figures and the verify stage's counts by source and rule.

The split is per ``env_instance`` (the reference split nothing and merged sibling
trajectories), so every pair of one task instance lands in the same split. It is the ``split`` artifact
(:mod:`pipeline.core.split`), decided before the skill bank was built and read by ``skills`` too,
so val is exactly the set of instances whose memories the bank never saw. A pair whose instance
the artifact lacks is an error (``ArtifactError``): the runner's freshness check makes it
impossible short of a bug. Nothing is quarantined here: units in = pairs in = pairs out.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pipeline import envs
from pipeline.prompts import prompt_template_files
from pipeline.quality import metrics as qmetrics
from pipeline.core.records import SFT_PAIR_SCHEMA, Trajectory
from pipeline.stage.stage import Stage, StageContext, StageOutput
from pipeline.core.artifacts import ArtifactError
from pipeline.verify import summary as verify_summary
from pipeline.usefulness.card import usefulness_card

TRAIN_FILE, VAL_FILE = "sft_train.jsonl", "sft_val.jsonl"
#: Rows laid out per ``split`` value: (column, {value: split file name}); see ArtifactStore.write.
SPLIT_FILES = ("split", {"train": "train", "val": "validation"})


def jsonl_line(row: dict[str, Any]) -> str:
    """One LLaMA-Factory record: alpaca fields + ``messages`` + ``pair_id`` (extra keys are ignored)."""
    return json.dumps({"instruction": row["instruction"], "input": "", "output": row["output"],
                       "messages": [{"role": m["role"], "content": m["content"]} for m in row["messages"]],
                       "pair_id": row["pair_id"]}, ensure_ascii=False)


def dataset_info() -> dict[str, Any]:
    """LLaMA-Factory ``dataset_info.json`` entries for the two files (alpaca and messages views)."""
    info: dict[str, Any] = {}
    for split, name in (("train", TRAIN_FILE), ("val", VAL_FILE)):
        info[f"skillpipe_{split}"] = {"file_name": name, "formatting": "alpaca",
                                      "columns": {"prompt": "instruction", "query": "input", "response": "output"}}
        info[f"skillpipe_{split}_messages"] = {
            "file_name": name, "formatting": "sharegpt", "columns": {"messages": "messages"},
            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                     "assistant_tag": "assistant", "system_tag": "system"}}
    return info


def _table(title: str, counts: Counter, header: str) -> list[str]:
    lines = [f"### {title}", "", f"| {header} | pairs |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
    return lines + [""]


def dataset_card(rows: list[dict[str, Any]], bank_rows: list[dict[str, Any]], run_id: str,
                 val_fraction: float, seed: int, split: dict[str, Any] | None = None) -> str:
    """Markdown card: what the dataset holds and where it came from (deterministic text).

    ``split``: ``{"val_instances": [names], "held_out_memories": n}`` (the ``split`` artifact's val
    instances and the memories ``skills`` held out); without it the card says that the bank may
    have seen val instances.
    """
    by = lambda *keys: Counter(" / ".join(str(r[k]) for k in keys) for r in rows)  # noqa: E731
    instances = {s: len({r["env_instance"] for r in rows if r["split"] == s}) for s in ("train", "val")}
    lines = [f"# skillpipe SFT dataset (run `{run_id}`)", "",
             f"{len(rows)} SFT pairs from {len({r['trajectory_id'] for r in rows})} trajectories; "
             f"split by environment instance (val_fraction={val_fraction}, seed={seed}): "
             f"{instances['train']} train / {instances['val']} val instances.", "",
             "Files: `sft_train.jsonl`, `sft_val.jsonl` (alpaca instruction/input/output + messages), "
             "`dataset_info.json` (LLaMA-Factory), `skill_bank_<env>.json` per environment (SkillRL layout: "
             "SkillRL banks are per env) and `skill_bank.json` = the bank of the env with the most pairs.", "",
             "## Counts", ""]
    lines += _table("By split", by("split"), "split")
    lines += _table("By split and env", by("split", "env"), "split / env")
    lines += _table("By env and category", by("env", "category"), "env / category")
    lines += _table("Synthetic done turns", by("synthetic"), "synthetic")
    lines += _table("Validation flags", Counter(f for r in rows for f in r["flags"]), "flag")
    lines += ["## Provenance", ""]
    lines += _table("Sources", by("source_uri"), "source")
    lines += _table("Distillation models", by("model"), "model")
    lines += _table("Skill bank versions used", by("bank_version"), "bank_version")
    kinds = Counter(r["kind"] for r in bank_rows)
    lines += [f"Skill bank: {len(bank_rows)} skills ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}).", ""]
    if split:
        lines += [f"The skill bank was built from train instances only: the memories of the "
                  f"{len(split.get('val_instances', []))} val instances ({split.get('held_out_memories', 0)} "
                  f"memories) were held out of it (skills quarantine reason `held_out_val`).", ""]
    else:
        lines += ["The skill bank records no train/val split: it may have been built from val instances too.", ""]
    return "\n".join(lines)


def quality_metrics(ctx: StageContext, rows: list[dict[str, Any]], bank_rows: list[dict[str, Any]]
                    ) -> dict[str, Any]:
    """``pipeline.quality.metrics.all_metrics`` of the exported pairs. The trajectories come from
    the run's ``verify`` artifact when it exists (an ancestor of build_pairs, so its changes already
    reach this stage's fingerprint); without it the trajectory-based figures see no trajectory."""
    from pipeline.bank.merge import skill_text
    verified = ctx.store.load("verify")
    wanted = {r["trajectory_id"] for r in rows}
    trajs = {r["trajectory_id"]: Trajectory.from_row(r) for r in (verified.read_rows() if verified else [])
             if r["trajectory_id"] in wanted}
    skills = {r["skill_id"]: skill_text(r) for r in bank_rows}
    return qmetrics.all_metrics(rows, skills, trajs, ctx.config.quality.skill_use_min_shared)


def _verify_counters(ctx: StageContext) -> dict[str, Any] | None:
    """The verify stage's counters (an ancestor of build_pairs, so already in the fingerprint)."""
    art = ctx.store.load("verify")
    return art.manifest.get("counters") if art else None


def _counts(ctx: StageContext, stage: str) -> dict[str, Any]:
    art = ctx.store.load(stage)
    return (art.manifest.get("counts") or {}) if art else {}


def quality_card(m: dict[str, Any], pair_counts: dict[str, Any], distill_counts: dict[str, Any]) -> str:
    """The card's "Data quality" section: surviving pairs with the quarantine reasons of distill
    (trajectories) and build_pairs (candidate pairs), then the figures of :func:`quality_metrics`."""
    reasons = lambda c: ", ".join(f"{k} {v}" for k, v in sorted((c.get("quarantine_reasons") or {}).items())) or "none"  # noqa: E731
    su, comp, tl = m["skill_use"], m["trajectory_completeness"], m["think_length"]
    lines = ["## Data quality", "",
             f"{m['pairs']} pairs survive. Distill: {distill_counts.get('out', '?')} of {distill_counts.get('in', '?')} "
             f"trajectories distilled (quarantined: {reasons(distill_counts)}). Pair building: {pair_counts.get('out', '?')} "
             f"of {pair_counts.get('units_in', '?')} candidate pairs kept (quarantined: {reasons(pair_counts)}).", "",
             "| metric | value | definition |", "|---|---|---|",
             f"| skill-use rate | {su['rate']} ({su['using']} of {su['pairs_with_skills']}) | thinks sharing >= "
             f"{su['min_shared']} content words with a skill in their prompt, beyond task/observation/action |",
             f"| skill blocks | {m['skill_block_diversity']['blocks']} for {m['skill_block_diversity']['tasks']} tasks "
             f"({m['skill_block_diversity']['blocks_per_task']} per task) | distinct skill sets shown |",
             f"| trajectory completeness | {comp['rate']} ({comp['complete_pairs']} of {comp['pairs']}) | pairs of "
             "trajectories that reached the goal with their final action exported |",
             f"| think length (words) | mean {tl['mean']}, median {tl['median']}, min {tl['min']}, max {tl['max']} | |",
             f"| duplicate-pair rate | {m['duplicate_pair_rate']} | 1 - distinct (instruction, output) / pairs |"]
    lines += [f"| skill blocks, {k} | {v} | distinct skill sets in this category |"
              for k, v in m["skill_block_diversity"]["per_category"].items()]
    lines += [f"| terminal-action coverage, {env} | {v['rate']} ({v['with_terminal']} of {v['trajectories']}) | "
              "trajectories with their terminal action exported |" for env, v in m["terminal_action_coverage"].items()]
    lines += [f"| action entropy, {env} | {v['bits']} bits over {v['types']} action types | |"
              for env, v in m["action_entropy"].items()]
    return "\n".join(lines + [""])


def skill_bank_files(bank_rows: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, str]:
    """SkillRL bank JSON files: ``skill_bank_<env>.json`` per env with skills or pairs, and
    ``skill_bank.json`` = the bank of the env with the most SFT pairs (SkillRL banks are per env;
    ties broken by env name). Each file lists all of its env's categories, as official banks do.
    """
    from pipeline.bank.rows import to_skillrl_json
    pair_counts = Counter(r["env"] for r in rows)
    env_names = sorted({r.get("env") or "" for r in bank_rows} | set(pair_counts)) or [""]
    files = {}
    for env in env_names:
        env_rows = [r for r in bank_rows if (r.get("env") or "") in ("", env)]
        cats = envs.get(env).CATEGORIES if env in envs.REGISTRY else None
        # the run's whole bank version (what SFT pairs record) links this per-env file to them
        meta = {"env": env, "run_bank_version": next((r["bank_version"] for r in bank_rows), "")}
        bank = to_skillrl_json(env_rows, categories=cats, metadata=meta if env else None)
        files[f"skill_bank_{env or 'all'}.json"] = json.dumps(bank, ensure_ascii=False, indent=2)
    main = max(env_names, key=lambda e: (pair_counts.get(e, 0), -env_names.index(e)))
    files["skill_bank.json"] = files[f"skill_bank_{main or 'all'}.json"]
    return files


class Export(Stage):
    """Split the pairs by instance and write the SFT files (module docstring)."""
    name = "export"
    inputs = ("usefulness", "skills", "split")
    schema = SFT_PAIR_SCHEMA
    config_sections = ("export", "quality", "usefulness")
    split_files = SPLIT_FILES

    def prompt_files(self, ctx: StageContext) -> list[str]:
        """See :meth:`Stage.prompt_files`: none (:func:`pipeline.prompts.prompt_template_files`;
        the prompt templates are code, covered by the code version)."""
        return prompt_template_files()

    def run(self, ctx: StageContext) -> StageOutput:
        """The pairs with ``split`` set, and the files of the module docstring as extra files."""
        pairs = ctx.upstream("usefulness").read_rows()
        skills = ctx.upstream("skills")
        bank_rows = skills.read_rows()
        split = ctx.upstream("split").read_rows()
        assignment = {r["env_instance"]: r["split"] for r in split}
        if missing := sorted({r["env_instance"] for r in pairs} - set(assignment)):
            raise ArtifactError(f"instances {missing[:5]} of the SFT pairs are not in the split artifact")
        rows = [dict(r, split=assignment[r["env_instance"]]) for r in pairs]
        # the draw's parameters as recorded (the config's only when the run has no instance)
        ecfg = ctx.config.export
        val_fraction, seed = (split[0]["val_fraction"], split[0]["seed"]) if split else (ecfg.val_fraction, ecfg.seed)
        record = {"val_instances": [n for n, side in assignment.items() if side == "val"],
                  "held_out_memories": ((skills.manifest.get("counts") or {}).get("quarantine_reasons") or {})
                  .get("held_out_val", 0)}
        metrics = quality_metrics(ctx, rows, bank_rows)
        files = {
            TRAIN_FILE: "".join(jsonl_line(r) + "\n" for r in rows if r["split"] == "train"),
            VAL_FILE: "".join(jsonl_line(r) + "\n" for r in rows if r["split"] == "val"),
            "dataset_info.json": json.dumps(dataset_info(), indent=2) + "\n",
            **skill_bank_files(bank_rows, rows),
            "DATASET_CARD.md": dataset_card(rows, bank_rows, ctx.store.run_id, val_fraction, seed, record)
            + "\n" + quality_card(metrics, _counts(ctx, "build_pairs"), _counts(ctx, "distill"))
            + "\n" + usefulness_card(rows, bank_rows, _counts(ctx, "usefulness"), ctx.config.usefulness)
            + "\n" + verify_summary.card_section(_verify_counters(ctx)),
        }
        split_counts = Counter(r["split"] for r in rows)
        return StageOutput(rows=rows, quarantine=[], rows_in=len(pairs), units_in=len(pairs),
                           counters={"train": split_counts["train"], "val": split_counts["val"],
                                     "instances": len({r["env_instance"] for r in pairs}),
                                     "split_from": "split", "quality_metrics": metrics},
                           extra_files=files)


STAGE = Export()

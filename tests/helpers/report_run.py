"""A small, schema-correct run for the report tests, written straight into a tmp root.

Two hand-written ALFWorld trajectories (``tests/helpers/llm_stage_data.py``) flow through every stage:
parse quarantines one unreadable file, memory quarantines one failed LLM call (``http_error``,
``llm.failures = 1``), aggregate registers a bank, GRPO evolves it into a second version (one
skill added), export holds four SFT pairs with data-quality metrics; the SFT fit manifest, the
GRPO log and the eval summary are in the formats ``sft/train.py``, ``sft/rl/grpo.py`` and
``sft/eval.py`` write. Rows are built against the declared Arrow
schemas (fields this file does not name get an empty value of their type), so a schema change
elsewhere keeps this run valid.
"""
from __future__ import annotations

import json
import os

import pyarrow as pa

from tests.helpers.llm_stage_data import cool_apple, heat_mug
from pipeline.bank import rows as skillbank
from pipeline.core.artifacts import ArtifactStore
from pipeline.bank.store import BankStore
from pipeline.core.records import (DISTILLED_SCHEMA, MEMORY_SCHEMA, SFT_PAIR_SCHEMA, SKILL_SCHEMA, TRAJECTORY_SCHEMA,
                              QuarantineRow, to_table)

RUN_ID = "rep"


def _empty(t: pa.DataType):
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return []
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ""
    return None


def row(schema: pa.Schema, **values) -> dict:
    """A row of ``schema``: ``values`` plus an empty value for every other field."""
    unknown = set(values) - set(schema.names)
    assert not unknown, f"not in schema: {unknown}"
    return {f.name: values.get(f.name, _empty(f.type)) for f in schema}


def _manifest(stage: str, n_in: int, n_out: int, reasons: dict, llm: dict | None = None, **extra) -> dict:
    q = sum(reasons.values())
    return {"stage": stage, "run_id": RUN_ID, "fingerprint": f"fp-{stage}", "model": "smollm2-135m" if llm else "",
            "counts": {"in": n_in, "units_in": n_in, "units_out": n_out, "out": n_out, "quarantined": q,
                       "quarantine_reasons": reasons}, "llm": llm or {}, "wall_s": 1.5, **extra}


def _llm(calls: int, hits: int, failures: int = 0) -> dict:
    return {"calls": calls, "cache_hits": hits, "prompt_tokens": 1000 * calls, "completion_tokens": 200 * calls,
            "retries": failures * 3, "repairs": 1, "failures": failures}


def _skills(mem_id: str) -> list[dict]:
    texts = [("general", "", {"title": "Check the receptacle before you move",
                              "principle": "look inside the receptacle before you take anything",
                              "when_to_apply": "at the start of a task"}),
             ("task_specific", "cool", {"title": "Cool with the fridge",
                                        "principle": "cool the object with the fridge then place it",
                                        "when_to_apply": "cool tasks"}),
             ("mistake", "", {"description": "Going to the microwave for a cool task",
                              "why_it_happens": "heat and cool look alike", "how_to_avoid": "use the fridge"})]
    return [skillbank.make_row(k, c, t, [mem_id], ["traj-cool-1"], env="alfworld", model="smollm2-135m")
            for k, c, t in texts]


def _pairs(trajs, skills: list[dict], bank: str) -> list[dict]:
    pairs = []
    for t in trajs:
        for k in (1, 2):
            think = ("I should cool the object with the fridge then place it." if t.category == "cool"
                     else "Find the mug first.")
            out = f"<think>{think}</think><action>{t.steps[k].action}</action>"
            pairs.append(row(SFT_PAIR_SCHEMA, pair_id=f"pair-{t.trajectory_id[-6:]}-{k}",
                             trajectory_id=t.trajectory_id, step_id=f"{t.trajectory_id}/s{k}", step_index=k,
                             env="alfworld", env_instance=t.env_instance, category=t.category,
                             messages=[{"role": "user", "content": f"Task: {t.task}"}, {"role": "assistant", "content": out}],
                             instruction=f"Task: {t.task}\nSkills: ...", output=out, action=t.steps[k].action,
                             think=think, memory_ids=["mem-cool"] if t.category == "cool" else [],
                             skill_ids_used=[s["skill_id"] for s in skills[:2]], bank_version=bank,
                             source_uri=t.source_uri, source_line=t.steps[k].line or 1, model="smollm2-135m",
                             prompt_sha="abc", split="train" if t.category == "cool" else "val"))
    return pairs


def _write_data_stages(root: str, store: ArtifactStore) -> list[dict]:
    trajs = [cool_apple(), heat_mug()]
    traj_rows = [row(TRAJECTORY_SCHEMA, **t.to_row()) for t in trajs]
    bad = QuarantineRow("parse", "unreadable_file", "not UTF-8", "", "rollouts/env009/test1.txt", 1, "\\xff\\xfe")
    store.write("parse", to_table(traj_rows, TRAJECTORY_SCHEMA), [bad],
                _manifest("parse", 3, 2, {"unreadable_file": 1}, input_path=os.path.join(root, "input")))
    store.write("remove_loops", to_table(traj_rows, TRAJECTORY_SCHEMA), [], _manifest("remove_loops", 2, 2, {}))
    store.write("verify", to_table(traj_rows, TRAJECTORY_SCHEMA), [], _manifest("verify", 2, 2, {}, counters={
        "valid": 1, "demoted": 1, "by_source": {"alfworld/skillrl_txt": {"trajectories": 2, "valid": 1, "demoted": 1,
                                                                      "rules": {"not_admissible": 2}}},
        "by_rule": {"skillrl_admissible.not_admissible": {"steps": 2, "trajectories": 1}}}))
    mem = row(MEMORY_SCHEMA, memory_id="mem-cool", trajectory_id="traj-cool-1", env="alfworld", category="cool",
              outcome="success", task=trajs[0].task, contextual_description="Cooling an apple with the fridge.")
    failed = QuarantineRow("memory", "http_error", "HTTP 503 after 3 retries", "traj-heat-1",
                           "rollouts/env002/test1.txt", 1, "")
    store.write("memory", to_table([mem], MEMORY_SCHEMA), [failed],
                _manifest("memory", 2, 1, {"http_error": 1}, _llm(2, 0, failures=1),
                          failed_requests={"total": 1, "by_reason": {"http_error": 1}, "keys": ["k1"], "final": 0},
                          fingerprint_complete="fp-memory-complete"))  # a transport failure: retried
    skills = _skills("mem-cool")
    bank = skillbank.bank_version(skills)
    skills = [dict(s, bank_version=bank) for s in skills]
    store.write("skills", to_table([row(SKILL_SCHEMA, **s) for s in skills], SKILL_SCHEMA), [],
                _manifest("skills", 1, len(skills), {}, _llm(1, 1), counters={"bank_version": bank}))
    BankStore(root).register(skills, run_id=RUN_ID, stage="skills", fingerprint="fp-aggregate")
    distilled = [row(DISTILLED_SCHEMA, trajectory_id=t.trajectory_id, env="alfworld", category=t.category,
                     bank_version=bank) for t in trajs]
    store.write("distill", to_table(distilled, DISTILLED_SCHEMA), [], _manifest("distill", 2, 2, {}, _llm(2, 0)))
    pairs = _pairs(trajs, skills, bank)
    store.write("build_pairs", to_table(pairs, SFT_PAIR_SCHEMA), [], _manifest("build_pairs", 2, 4, {}))
    quality = {"pairs": 4, "skill_use": {"rate": 0.5, "pairs_with_skills": 4, "using": 2},
               "think_length": {"mean": 7.5, "median": 7.5, "min": 4, "max": 11}, "duplicate_pair_rate": 0.0}
    store.write("export", to_table(pairs, SFT_PAIR_SCHEMA), [], _manifest("export", 4, 4, {}, counters={
        "train": 2, "val": 2, "quality_metrics": quality}))
    return skills


def _write_training(root: str, run_dir: str, skills: list[dict]) -> None:
    os.makedirs(os.path.join(run_dir, "sft_fit"), exist_ok=True)
    with open(os.path.join(run_dir, "sft_fit", "skillpipe_sft_manifest.json"), "w") as f:
        json.dump({"global_step": 4, "final_loss": 1.25, "losses": [2.5, 2.0, 1.5, 1.25],
                   "config": {"logging_steps": 1}, "export": {"fingerprint": "fp-export"}}, f)
    os.makedirs(os.path.join(run_dir, "grpo"), exist_ok=True)
    groups = [[{"group_id": "s1:a", "task": "a", "rewards": [10.0, 0.0], "advantages": [0.7, -0.7], "no_signal": False},
               {"group_id": "s1:b", "task": "b", "rewards": [0.0, 0.0], "advantages": [0.0, 0.0], "no_signal": True}],
              [{"group_id": "s2:a", "task": "a", "rewards": [10.0, 10.0], "advantages": [0.0, 0.0], "no_signal": True},
               {"group_id": "s2:c", "task": "c", "rewards": [10.0, 0.0], "advantages": [0.7, -0.7], "no_signal": False}]]
    with open(os.path.join(run_dir, "grpo", "grpo_log.jsonl"), "w") as f:
        for step, g in enumerate(groups, 1):
            f.write(json.dumps({"kind": "train", "step": step, "loss": 0.5 / step, "kl": 0.001 * step, "groups": g,
                                "no_signal_groups": sum(x["no_signal"] for x in g), "success_rate": 0.5,
                                "wall_s": 3.0}) + "\n")
        f.write(json.dumps({"kind": "validation", "step": 2, "success_rate": 0.25, "episodes": 4,
                            "evolution": {"version": "bank-evolved"}}) + "\n")
    os.makedirs(os.path.join(run_dir, "eval_sft_fit"), exist_ok=True)
    with open(os.path.join(run_dir, "eval_sft_fit", "summary.json"), "w") as f:  # sft/eval.py's summary
        json.dump({"label": "sft_fit", "policy": "sft_fit", "episodes": 8, "wins": 3, "success_rate": 0.375,
                   "success_ci95": [0.1368, 0.6943], "valid_action_rate": 0.8, "mean_steps": 4.5,
                   "per_game": {"twc": {"episodes": 8, "success_rate": 0.375, "success_ci95": [0.1368, 0.6943]}}}, f)
    evolved = skills + [skillbank.make_row("task_specific", "cool", {
        "title": "Close the fridge after cooling", "principle": "close the fridge", "when_to_apply": "cool tasks"},
        env="alfworld")]
    BankStore(root).register(evolved, run_id=RUN_ID, stage="grpo")


def build_run(root: str) -> str:
    """Write the run ``rep`` under ``root`` (stages, banks, SFT and GRPO outputs); returns its folder."""
    store = ArtifactStore(root, RUN_ID)
    skills = _write_data_stages(root, store)
    _write_training(root, store.run_dir, skills)
    return store.run_dir

"""Stage export through runner.run_stage: instance-level split and the LLaMA-Factory files."""
import json
import os

from pipeline.artifacts import ArtifactStore
from pipeline.config import PipelineConfig
from pipeline.records import SFT_PAIR_SCHEMA, SKILL_SCHEMA, to_table
from pipeline.runner import StageContext, run_stage
from pipeline.stages.export import split_instances
from test_validate import SKILL


def pair(i, instance, env="alfworld", category="clean"):
    msgs = [{"role": "system", "content": f"S{i}"}, {"role": "user", "content": f"U{i}"},
            {"role": "assistant", "content": f"<think>t</think>\n<action>a{i}</action>"}]
    return {"pair_id": f"pair-{i}", "trajectory_id": f"traj-{instance}", "step_id": f"traj-{instance}/s1",
            "step_index": 1, "env": env, "env_instance": instance, "category": category, "messages": msgs,
            "instruction": f"S{i}\n\nU{i}", "output": msgs[2]["content"], "action": f"a{i}", "think": "t",
            "synthetic": False, "memory_ids": ["mem-1"], "skill_ids_used": ["gen-1"], "bank_version": "bank-1",
            "source_uri": "rollouts/test0.txt", "source_line": 4, "model": "stub-model", "prompt_sha": "sha-1",
            "flags": [], "split": ""}


def run_export(tmp_path, pairs, val_fraction=0.25):
    store = ArtifactStore(str(tmp_path), "r1")
    store.write("validate", to_table(pairs, SFT_PAIR_SCHEMA), [], {"fingerprint": "v-fp"})
    store.write("aggregate", to_table([SKILL], SKILL_SCHEMA), [], {"fingerprint": "a-fp"})
    cfg = PipelineConfig()
    cfg.export.val_fraction = val_fraction
    res = run_stage("export", StageContext(store, cfg), log=lambda s: None)
    return store.require("export"), res.manifest


def test_split_keeps_each_instance_in_one_split(tmp_path):
    # 3 pairs per instance, 12 instances: the split must never cut an instance.
    pairs = [pair(10 * n + j, f"env{n:03d}") for n in range(12) for j in range(3)]
    art, manifest = run_export(tmp_path, pairs)
    rows = art.read_rows()
    splits = {}
    for r in rows:
        splits.setdefault(r["env_instance"], set()).add(r["split"])
    assert all(len(s) == 1 for s in splits.values())
    assert {r["split"] for r in rows} == {"train", "val"}
    assert manifest["counts"]["units_in"] == 36 and manifest["counts"]["out"] == 36
    lines = {s: open(os.path.join(art.path, f"sft_{s}.jsonl"), encoding="utf-8").read().splitlines()
             for s in ("train", "val")}
    assert len(lines["train"]) == manifest["counters"]["train"] and len(lines["val"]) == manifest["counters"]["val"]
    first = json.loads(lines["train"][0])
    by_id = {r["pair_id"]: r for r in rows}
    assert first["input"] == "" and first["instruction"] == by_id[first["pair_id"]]["instruction"]
    assert [m["role"] for m in first["messages"]] == ["system", "user", "assistant"]


def test_export_files(tmp_path):
    art, _ = run_export(tmp_path, [pair(1, "env000"), pair(2, "env001", "webshop", "apparel")])
    info = json.load(open(os.path.join(art.path, "dataset_info.json")))
    assert info["skillpipe_train"] == {"file_name": "sft_train.jsonl", "formatting": "alpaca",
                                       "columns": {"prompt": "instruction", "query": "input", "response": "output"}}
    assert info["skillpipe_val_messages"]["columns"] == {"messages": "messages"}
    bank = json.load(open(os.path.join(art.path, "skill_bank.json")))
    assert [s["title"] for s in bank["general_skills"]] == ["Check Twice"]
    card = open(os.path.join(art.path, "DATASET_CARD.md")).read()
    assert "2 SFT pairs from 2 trajectories" in card and "| alfworld / clean | 1 |" in card
    assert "| stub-model | 2 |" in card and "| bank-1 | 2 |" in card


def test_split_instances_rules():
    assert split_instances(["only"], 0.5, 0) == {"only": "train"}
    assert set(split_instances(["a", "b", "c"], 0.0, 0).values()) == {"train"}
    names = [f"e{i}" for i in range(200)]
    got = split_instances(names, 0.1, 0)
    assert got == split_instances(reversed(names), 0.1, 0)      # order-independent
    assert 5 <= sum(v == "val" for v in got.values()) <= 40     # ~10% of 200
    assert split_instances(names, 0.1, 1) != got                 # the seed matters
    both = split_instances(["a", "b"], 0.999999, 0)
    assert sorted(both.values()) == ["train", "val"]            # never an empty train split

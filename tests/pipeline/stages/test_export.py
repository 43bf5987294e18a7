"""Stage export through runner.run_stage: instance-level split and the LLaMA-Factory files."""
import json
import os

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
import pytest

from pipeline.core.artifacts import ArtifactError
from pipeline.core.records import SFT_PAIR_SCHEMA, SKILL_SCHEMA, SPLIT_SCHEMA, to_table
from pipeline.engine.runner import run_stage
from pipeline.stage.stage import StageContext
from pipeline.core.split import split_instances, split_rows
from tests.helpers.build_pairs_data import SKILL, pair


def write_split(store, instances, val_fraction=0.25):
    """The split artifact of ``instances`` (all with a success), as the split stage writes it."""
    rows = split_rows(instances, set(instances), val_fraction, 0)
    store.write("split", to_table(rows, SPLIT_SCHEMA), [], {"fingerprint": "s-fp"})


def run_export(tmp_path, pairs, val_fraction=0.25):
    store = ArtifactStore(str(tmp_path), "r1")
    store.write("usefulness", to_table(pairs, SFT_PAIR_SCHEMA), [], {"fingerprint": "v-fp"})
    store.write("skills", to_table([SKILL], SKILL_SCHEMA), [], {"fingerprint": "a-fp"})
    write_split(store, [p["env_instance"] for p in pairs], val_fraction)
    res = run_stage("export", StageContext(store, PipelineConfig()), log=lambda s: None)
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


def test_val_is_exactly_the_instances_skills_held_out(tmp_path):
    """Leak guard, end to end: export's val split is the set of instances whose memories skills
    kept out of the bank (both read the split artifact), not a fresh draw over the pairs' instances."""
    from tests.helpers.skills_data import aggregate_with_val_instance
    store, agg, _ = aggregate_with_val_instance(tmp_path)
    held = [q["item_id"] for q in store.require("skills").read_rows(quarantine=True) if q["reason"] == "held_out_val"]
    assert held == ["mem-2"]  # mem-2 is of kitchen-4
    recorded = ["kitchen-4"]
    pairs = [pair(i, inst) for i, inst in enumerate(["kitchen-1", "kitchen-2", "kitchen-3", "kitchen-4", "kitchen-4"])]
    store.write("usefulness", to_table(pairs, SFT_PAIR_SCHEMA), [], {"fingerprint": "v-fp"})
    # export.val_fraction changed after skills ran: a fresh draw at 0.5 would also send
    # kitchen-3 (.339) to val, an instance the bank has seen; the split artifact must win
    cfg = PipelineConfig()
    cfg.export.val_fraction = 0.5
    assert [n for n, s in split_instances({p["env_instance"] for p in pairs}, 0.5, 0).items() if s == "val"] == \
        ["kitchen-3", "kitchen-4"]
    res = run_stage("export", StageContext(store, cfg), log=lambda s: None)
    rows = store.require("export").read_rows()
    assert sorted({r["env_instance"] for r in rows if r["split"] == "val"}) == recorded
    assert [r["pair_id"] for r in rows if r["split"] == "val"] == ["pair-3", "pair-4"]
    counters = dict(res.manifest["counters"])
    assert counters.pop("quality_metrics")["pairs"] == 5  # pinned in test_quality_metrics / test_export_quality
    assert counters == {"train": 3, "val": 2, "instances": 4, "split_from": "split"}
    card = open(os.path.join(res.uri, "DATASET_CARD.md"), encoding="utf-8").read()
    assert "(val_fraction=0.3, seed=0): 3 train / 1 val instances" in card
    assert ("The skill bank was built from train instances only: the memories of the 1 val instances "
            "(1 memories) were held out of it") in card


def test_an_instance_missing_from_the_split_is_an_error(tmp_path):
    """No fallback rule: a pair whose instance the split artifact lacks stops the stage."""
    store = ArtifactStore(str(tmp_path), "r1")
    store.write("usefulness", to_table([pair(n, f"env{n:03d}") for n in range(4)], SFT_PAIR_SCHEMA), [],
                {"fingerprint": "v-fp"})
    store.write("skills", to_table([SKILL], SKILL_SCHEMA), [], {"fingerprint": "a-fp"})
    write_split(store, ["env000", "env001", "env002"])
    with pytest.raises(ArtifactError, match=r"instances \['env003'\] of the SFT pairs are not in the split"):
        run_stage("export", StageContext(store, PipelineConfig()), log=lambda s: None)
    assert store.load("export") is None


def test_hugging_face_datasets_loads_the_train_and_validation_splits(tmp_path, monkeypatch):
    """load_dataset once picked sft_train.jsonl / sft_val.jsonl as Parquet splits.
    The export lays its Parquet rows out as data/<split>-NNNNN-of-NNNNN.parquet (the Hub's
    naming, matched first), so both calls give the splits; offline, cache in tmp_path."""
    import pandas as pd
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    from datasets import load_dataset
    pairs = [pair(10 * n + j, f"env{n:03d}") for n in range(12) for j in range(3)]
    art, manifest = run_export(tmp_path / "run", pairs)
    want = {s: sorted(r["pair_id"] for r in art.read_rows() if r["split"] == s) for s in ("train", "val")}
    assert len(want["train"]) == manifest["counters"]["train"] > 0 and len(want["val"]) == manifest["counters"]["val"] > 0
    for kwargs in ({"path": art.path}, {"path": "parquet", "data_dir": art.path}):
        dd = load_dataset(**kwargs, cache_dir=str(tmp_path / f"hf-{len(kwargs)}"))
        assert sorted(dd) == ["train", "validation"]
        assert sorted(dd["train"]["pair_id"]) == want["train"] and sorted(dd["validation"]["pair_id"]) == want["val"]
        assert set(dd["validation"]["split"]) == {"val"} and dd["train"].column_names == SFT_PAIR_SCHEMA.names
    # the Parquet folder holds the pairs and nothing else; the stage folder's other files stay put
    assert len(pd.read_parquet(os.path.join(art.path, "data"))) == len(pairs)
    assert {"sft_train.jsonl", "sft_val.jsonl", "dataset_info.json", "skill_bank.json"} <= set(os.listdir(art.path))

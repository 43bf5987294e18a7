"""Token lengths of SFT pairs: build_pairs counts with the tokenizer of the model
to be trained, exactly as ``sft fit`` does, and ``sft fit`` quarantines a row that does not fit
``max_length`` instead of aborting the job."""
from __future__ import annotations

import math
import os

import pyarrow.parquet as pq
import pytest

from pipeline import tokens
from sft.base_model import ensure_base_model
from sft.config import SFTFitConfig
from sft.demo import demo_rows, write_demo_export
from sft.train import drop_too_long, fit
from tests.helpers.paths import REPO
from tests.helpers.build_pairs_data import distilled, run_validate
from tests.helpers.prompt_data import tv6


@pytest.fixture(scope="module")
def sft_tokenizer():
    """The tokenizer ``sft fit`` trains with (the converted base model's, cached)."""
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(ensure_base_model()))


def chat_len(tok, messages) -> int:
    return len(tok.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])


def test_embedded_counter_is_the_sft_tokenizer_and_exceeds_chars_over_4(sft_tokenizer):
    counter = tokens.counter_for("embedded")
    assert counter.name.startswith("hf:smollm2-135m-instruct-") and counter.name.endswith("-tokenizer")
    for row in demo_rows():
        msgs = [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
        n = counter.count(msgs)
        assert n == chat_len(sft_tokenizer, msgs)  # the same number sft fit will see
        assert n > math.ceil(len(row["instruction"] + row["output"]) / 4)  # chars/4 undercounts
    approx = tokens.counter_for("approx")
    assert approx.name == "approx-chars/4x1.3"
    assert approx.count([{"role": "user", "content": "x" * 40}]) == 13 + 5
    with pytest.raises(ValueError, match="build_pairs.tokenizer must be 'embedded', 'approx' or a local"):
        tokens.counter_for("no/such/folder")


def test_validate_never_keeps_a_pair_longer_than_max_tokens(tmp_path, sft_tokenizer):
    traj = tv6()
    drow = [distilled(traj, {0: "T1", 1: "T2", 2: "T3", 3: "T4"}, True)]
    rows, _, manifest = run_validate(tmp_path / "all", [traj], drow, max_tokens=100_000)
    assert manifest["counters"]["tokenizer"] == tokens.counter_for("embedded").name
    real = {r["step_index"]: chat_len(sft_tokenizer, r["messages"]) for r in rows}
    approx = {r["step_index"]: math.ceil(len(r["instruction"] + r["output"]) / 4) for r in rows}
    # a limit that chars/4 says pair 1 fits, but the real tokenizer does not
    limit = approx[1] + 1
    assert real[1] > limit
    kept, q, _ = run_validate(tmp_path / "cut", [traj], drow, max_tokens=limit)
    assert 1 not in [r["step_index"] for r in kept]
    assert "truncated_no_target" in [x["reason"] for x in q]
    for r in kept:  # everything kept fits, counted as sft fit counts
        assert chat_len(sft_tokenizer, r["messages"]) <= limit


def test_drop_too_long_quarantines_with_the_token_count(sft_tokenizer):
    rows = [{"pair_id": r["pair_id"], "prompt": r["messages"][:-1], "completion": r["messages"][-1:]}
            for r in demo_rows()]
    n = [chat_len(sft_tokenizer, r["prompt"] + r["completion"]) for r in rows]
    limit = max(n) - 1
    kept, q = drop_too_long(rows, sft_tokenizer, limit)
    assert [r["pair_id"] for r in kept] == [r["pair_id"] for r, k in zip(rows, n) if k <= limit]
    assert [(x.stage, x.reason, x.item_id, x.detail) for x in q] == [
        ("sft_fit", "too_long", r["pair_id"], f"{k} tokens > max_length={limit}") for r, k in zip(rows, n) if k > limit]
    assert 0 < len(q) < len(rows)


@pytest.mark.slow  # a real (1-step) LoRA fit: ~20 s alone, minutes on busy shared cores
def test_fit_quarantines_a_row_longer_than_max_length_instead_of_failing(tmp_path, sft_tokenizer):
    export = write_demo_export(str(tmp_path))
    train = [r for r in demo_rows() if r["split"] == "train"]
    n = [chat_len(sft_tokenizer, r["messages"]) for r in train]
    # the first k rows, of which some fit and the longest lose 2+ tokens: their end of turn
    # (<|im_end|>) would be cut, which the pre-flight refuses (a 1-token cut only drops the "\n")
    k = next(i for i in range(2, len(n) + 1) if min(n[:i]) <= max(n[:i]) - 2)
    limit = max(n[:k]) - 2
    too_long = [f"{r['pair_id']}-0" for r, x in zip(train[:k], n) if x > limit]  # ids as write_demo_export writes them
    cfg = SFTFitConfig(max_rows=k, per_device_train_batch_size=1, max_steps=1, max_length=limit)
    out = str(tmp_path / "out")
    m = fit(export.path, out, cfg)  # before the fix: PreflightError for the long row(s)
    assert m["global_step"] == 1 and m["quarantined_rows"] == len(too_long)
    assert m["export"]["rows"]["used"] == k - len(too_long)
    q = pq.read_table(os.path.join(out, "quarantine.parquet")).to_pylist()
    assert [(x["reason"], x["item_id"]) for x in q] == [("too_long", p) for p in too_long]


def test_pipeline_never_imports_sft():
    """``sft`` builds on ``pipeline``, never the reverse (the embedded model's cache folder lives in
    ``pipeline.llm.server``): no module of the pipeline package imports ``sft``."""
    import ast
    import pathlib
    offenders = []
    for path in sorted(pathlib.Path(REPO, "pipeline").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n == "sft" or n.startswith("sft.")]
    assert offenders == []

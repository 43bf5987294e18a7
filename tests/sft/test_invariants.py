"""Pre-flight label invariants on the real SmolLM2 tokenizer and TRL's own collator.

Exact values measured on the embedded SmolLM2-135M-Instruct tokenizer (pad == eos == <|im_end|>,
id 2): demo row 0 renders to 155 tokens of which the first 128 are the prompt (system + user +
"<|im_start|>assistant\\n"); demo row 4 to 156 tokens, same prompt length.
"""
import pytest
import torch

from sft import invariants as inv
from sft.base_model import ensure_base_model
from sft.config import SFTFitConfig
from sft.demo import demo_rows
from sft.train import make_trainer, preflight

EOS = 2


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    rows = [{"pair_id": r["pair_id"], "prompt": r["messages"][:-1], "completion": r["messages"][-1:]}
            for r in demo_rows()]
    cfg = SFTFitConfig(output_dir=str(tmp_path_factory.mktemp("sft-invariants")), max_steps=1)
    return make_trainer(cfg, [rows[0], rows[4]], str(ensure_base_model())), [rows[0], rows[4]]


def _batch(trainer):
    tr, rows = trainer
    return tr.data_collator([tr.train_dataset[0], tr.train_dataset[1]])


def test_prompt_length_and_eos_ids_on_real_tokenizer(trainer):
    tr, rows = trainer
    tok = tr.processing_class
    assert (tok.eos_token_id, tok.pad_token_id) == (EOS, EOS)
    assert [inv.prompt_length(tok, r["prompt"]) for r in rows] == [128, 128]


def test_collated_labels_supervise_exactly_the_completion_and_eos(trainer):
    tr, rows = trainer
    b = _batch(trainer)
    assert tuple(b["input_ids"].shape) == (2, 156)
    assert inv.supervised_positions(b["labels"][0].tolist()) == list(range(128, 155))
    assert inv.supervised_positions(b["labels"][1].tolist()) == list(range(128, 156))
    # row 0 is padded with pad == eos at 155; its real <|im_end|> at 153 stays supervised
    assert b["input_ids"][0, 155].item() == EOS and b["labels"][0, 155].item() == -100
    assert b["labels"][0, 153].item() == EOS and b["labels"][1, 154].item() == EOS
    text = tr.processing_class.decode(b["input_ids"][0, 128:155])
    assert text == "<think>Mugs are often on shelves.</think>\n<action>go to shelf 1</action><|im_end|>\n"
    assert inv.check_batch(b, [128, 128], EOS, ["a", "b"]) == []


def test_invariants_fail_when_eos_is_masked_like_a_pad_token(trainer):
    b = _batch(trainer)
    b["labels"][b["input_ids"] == EOS] = -100  # the classic pad == eos collator bug
    assert inv.check_batch(b, [128, 128], EOS, ["a", "b"]) == [
        ("a", "completion_token_not_supervised at [153]"), ("a", "eos_not_supervised at 153"),
        ("b", "completion_token_not_supervised at [154]"), ("b", "eos_not_supervised at 154")]


def test_invariants_fail_when_prompt_is_supervised_or_nothing_is(trainer):
    b = _batch(trainer)
    b["labels"] = torch.where(b["attention_mask"] == 1, b["input_ids"], -100)  # no prompt masking
    assert inv.check_batch(b, [128, 128], EOS, ["a", "b"]) == [
        ("a", "prompt_token_supervised at [0, 1, 2, 3, 4, 5, 6, 7]"),
        ("b", "prompt_token_supervised at [0, 1, 2, 3, 4, 5, 6, 7]")]
    b["labels"][:] = -100
    assert inv.check_row(b["input_ids"][1].tolist(), b["labels"][1].tolist(), b["attention_mask"][1].tolist(),
                         128, EOS) == ["no_supervised_tokens", "completion_token_not_supervised at "
                                       "[128, 129, 130, 131, 132, 133, 134, 135]", "eos_not_supervised at 154"]


def test_eos_missing_after_truncation_is_reported():
    assert inv.eos_supervised([5, 6, 7], [-100, 6, 7], [1, 1, 1], EOS) == \
        "no_eos_in_row (truncated before the end of turn?)"


def test_preflight_on_trainer_passes_then_fails_with_broken_collator(trainer):
    tr, rows = trainer
    assert preflight(tr, rows, 2) == {"rows_checked": 2, "supervised_tokens": 27 + 28}
    good = tr.data_collator

    def broken(examples):  # deliberately mask every eos id, as a pad-by-id collator would
        out = good(examples)
        out["labels"][out["input_ids"] == EOS] = -100
        return out
    tr.data_collator = broken
    try:
        with pytest.raises(inv.PreflightError, match="eos_not_supervised at 153"):
            preflight(tr, rows, 2)
    finally:
        tr.data_collator = good


def test_template_check_on_real_tokenizer_and_a_think_stripping_template(trainer):
    tr, rows = trainer
    tok = tr.processing_class
    msgs = rows[0]["prompt"] + rows[0]["completion"]
    assert inv.check_template(tok, msgs) == []
    stripping = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}"
                 "{{ m['content'].split('</think>')[-1] | trim }}{% else %}{{ m['content'] }}{% endif %}"
                 "<|im_end|>\n{% endfor %}")
    rendered = tok.apply_chat_template(msgs, tokenize=False, chat_template=stripping)
    assert inv.template_keeps_messages(rendered, msgs) == \
        "message 2 (assistant) not rendered verbatim by the chat template"

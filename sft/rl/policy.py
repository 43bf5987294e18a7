"""A Hugging Face causal LM as a rollout policy that also returns token ids (for GRPO).

Prompt tokens are exactly the SFT job's: ``tokenizer.apply_chat_template(messages,
tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]`` (the same call as
``sft.invariants.prompt_length``), so a prompt rendered online tokenizes to the ids the model
was fine-tuned on. Generation is batched with left padding; each completion is cut after its
first end-of-turn token (kept, so the policy gradient also trains stopping).
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


class HFPolicy:
    """Batched sampling from ``model`` (see module docstring).

    Args:
        model, tokenizer: a causal LM and its tokenizer (chat template required).
        max_new_tokens: completion budget per step (SkillRL's ``max_response_length``).
        temperature, top_p: sampling settings; ``temperature == 0`` means greedy.
        model_id: identity recorded in trajectories.
    """

    def __init__(self, model: Any, tokenizer: Any, max_new_tokens: int = 64, temperature: float = 1.0,
                 top_p: float = 1.0, model_id: str = "hf-policy"):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.model_id = model_id
        self.eos_ids = {tokenizer.eos_token_id}

    def generate(self, prompts: list[list[dict[str, str]]]) -> list[Completion]:
        """See :meth:`sft.rl.rollout.Policy.generate`: one left-padded batch, sampled (greedy at
        ``temperature == 0``) without gradients in eval mode (the training mode is restored);
        each completion is cut after its first EOS token (kept) and carries its prompt and
        completion token ids."""
        import torch

        ids = [prompt_ids(self.tokenizer, m) for m in prompts]
        width = max(len(x) for x in ids)
        pad = self.tokenizer.pad_token_id
        device = next(self.model.parameters()).device  # a model moved to a GPU gets its inputs there
        input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids], device=device)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids], device=device)
        sample = self.temperature > 0
        kwargs = dict(do_sample=sample, max_new_tokens=self.max_new_tokens, pad_token_id=pad,
                      eos_token_id=self.tokenizer.eos_token_id)
        if sample:
            kwargs.update(temperature=self.temperature, top_p=self.top_p, top_k=0)
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad():
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

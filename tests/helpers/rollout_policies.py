"""Scripted rollout policies for tests: no model, exact and repeatable outputs."""
from __future__ import annotations

from sft.rl.rollout import Completion


class ScriptedPolicy:
    """Answers the n-th call with ``script[n]`` (then repeats the last action), for ONE slot.

    Every prompt of a call gets the same action, so with several slots use a one-action script.
    ``tokenizer`` (optional) fills ``Completion.prompt_ids`` with sft.rl.policy's tokenization.
    """
    model_id = "scripted"

    def __init__(self, script: list[str], think: str = "I follow the plan.", tokenizer=None):
        self.script, self.think, self.tokenizer = script, think, tokenizer
        self.n = 0
        self.prompts: list[list[dict]] = []

    def generate(self, prompts):
        action = self.script[min(self.n, len(self.script) - 1)]
        self.n += 1
        out = []
        for msgs in prompts:
            ids = []
            if self.tokenizer is not None:
                from sft.rl.policy import prompt_ids
                ids = prompt_ids(self.tokenizer, msgs)
            out.append(Completion(f"<think>{self.think}</think>\n<action>{action}</action>", ids, []))
            self.prompts.append(msgs)
        return out

"""Prompt layout for reuse: what is the same across the requests of a stage comes first.

Two requests of one stage (same env; for memory the same outcome) must share a long token prefix:
the system message (instructions, env guidance, worked examples) and the fixed head of the user
message. A llama.cpp server then evaluates only the rest (its KV cache keeps the prefix: the
embedded server's log shows "prefix-match hit" for ~500-800 of ~1,100 memory prompt tokens), and
hosted APIs bill the prefix as cached tokens. Measured with the SmolLM2 tokenizer on the shipped
sample and the test memories: memory 783 (ALFWorld successes), 495 (ALFWorld failures), 376
(WebShop failures); skills 385; distill 487. The bounds below leave room for small edits."""
from __future__ import annotations

import dataclasses

import pytest

from pipeline.core.config import PipelineConfig, SkillsConfig
from pipeline.core.llmstage import Job, send
from pipeline.llm.types import JSONResult
from pipeline.stages import distill, memory, skills
from tests.helpers.llm_stage_data import cool_apple
from tests.helpers.skills_data import MEMORIES

#: Minimum shared prefix, in tokens of the SmolLM2 tokenizer, per stage.
MIN_SHARED = {"memory": 350, "skills": 350, "distill": 400}


@pytest.fixture(scope="module")
def tokens():
    from transformers import AutoTokenizer
    from pipeline.tokens import embedded_tokenizer_dir
    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir())
    return lambda req: tok.apply_chat_template(req.messages, tokenize=True, return_dict=True)["input_ids"]


def shared(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_memory_requests_share_their_instructions_and_examples(tokens):
    cfg = PipelineConfig()
    apple = cool_apple(tid="a")
    tomato = dataclasses.replace(cool_apple(tid="b"), task="cool some tomato and put it in countertop.")
    a, b = (memory.build_request(t, cfg.memory) for t in (apple, tomato))
    assert a.messages[0] == b.messages[0]  # one system message per env and outcome
    assert shared(tokens(a), tokens(b)) >= MIN_SHARED["memory"]


def test_skills_calls_of_one_env_share_their_system_message(tokens):
    calls = skills.plan_calls(MEMORIES, "alfworld", SkillsConfig())
    ids = [tokens(c.request) for c in calls]
    assert len(ids) == 4 and all(shared(ids[0], x) >= MIN_SHARED["skills"] for x in ids[1:])


def test_distill_requests_put_the_skills_block_before_the_task(tokens):
    apple = cool_apple(tid="a")
    tomato = dataclasses.replace(cool_apple(tid="b"), task="cool some tomato and put it in countertop.")
    reqs = [distill.build_requests(t, distill.step_entries(t, None), "- Cool Before Placing: ...", 8, 300)[0]
            for t in (apple, tomato)]
    user = reqs[0].messages[1]["content"]
    assert user.index("Retrieved skills:") < user.index("Task:")
    assert shared(tokens(reqs[0]), tokens(reqs[1])) >= MIN_SHARED["distill"]


class _Recorder:
    """A client that answers in the order it is asked and records that order."""
    model_id = "m"

    def __init__(self):
        self.order = []

    def complete_json_many(self, requests, desc=""):
        self.order += [r.key for r in requests]
        return [JSONResult(r.key, True, {"k": r.key}) for r in requests]


def test_requests_are_sent_grouped_by_system_message_and_answered_in_job_order():
    cfg = PipelineConfig()
    apple, tomato = cool_apple(tid="a"), dataclasses.replace(cool_apple(tid="c"), task="cool some tomato.")
    fail = dataclasses.replace(cool_apple(tid="b"), outcome="failure")
    reqs = [memory.build_request(t, cfg.memory) for t in (apple, fail, tomato)]
    jobs = [Job(t, t.trajectory_id, [r]) for t, r in zip((apple, fail, tomato), reqs)]
    client = _Recorder()
    send(client, jobs, "memory")
    assert client.order == [reqs[0].key, reqs[2].key, reqs[1].key]  # the two successes together
    assert [j.results[0].value["k"] for j in jobs] == [r.key for r in reqs]

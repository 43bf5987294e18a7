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
from pipeline.stage.llmstage import Job, send
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


def _hosted_format(req):
    """The ``response_format`` a hosted (``json_schema``) endpoint receives for ``req``."""
    from pipeline.core.config import LLMConfig
    from pipeline.llm.client import LLMClient
    client = LLMClient(LLMConfig(base_url="http://127.0.0.1:9/v1", model="m", structured_output="json_schema",
                                 api_key_env="", stable_schema=True))
    return client.request_body(req, req.messages)["response_format"]


def test_hosted_endpoints_get_one_schema_per_stage_variant_and_answers_are_checked_against_the_tight_one():
    """OpenAI's prompt cache reads the structured-output schema as a prefix of the system
    message: a schema naming this trajectory's step numbers would leave no shared prefix."""
    import jsonschema
    cfg = PipelineConfig()
    long_ = cool_apple(tid="a")
    short = dataclasses.replace(cool_apple(tid="b"), steps=cool_apple(tid="b").steps[:4])
    a, b = (memory.build_request(t, cfg.memory) for t in (long_, short))
    assert a.schema != b.schema  # step_index enums 0..5 and 0..3
    assert _hosted_format(a) == _hosted_format(b)
    answer = {"contextual_description": "Cool an apple in the fridge.", "planning_pattern": "find -> cool -> put",
              "refined_trajectory": [{"step_index": 5, "action": "put apple 1 in/on countertop 1",
                                      "critical_observation": "You put the apple 1", "reasoning": "the goal"}]}
    jsonschema.validate(answer, b.shared_schema)  # the looser stage-wide form would take step 5 ...
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(answer, b.schema)      # ... the schema the client validates with does not
    d1, d2 = (distill.build_requests(cool_apple(tid="a"), distill.step_entries(cool_apple(tid="a"), None), "-", n, 300)
              for n in (2, 3))
    assert d1[0].schema != d2[0].schema and _hosted_format(d1[0]) == _hosted_format(d2[-1])
    calls = skills.plan_calls(MEMORIES, "alfworld", SkillsConfig())
    by_kind = {}
    for c in calls:
        by_kind.setdefault(c.kind, []).append(_hosted_format(c.request))
    assert all(len({str(f) for f in forms}) == 1 for forms in by_kind.values())
    from pipeline.core.config import LLMConfig
    from pipeline.llm.client import LLMClient
    tight = LLMClient(LLMConfig(base_url="http://127.0.0.1:9/v1", model="m", structured_output="json_schema",
                                api_key_env=""))  # llm.stable_schema off (the default): each call's own schema
    assert tight.request_body(a, a.messages)["response_format"]["json_schema"]["schema"] == a.schema

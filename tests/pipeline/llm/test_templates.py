"""Prompt templates are files hashed into the stage fingerprint: editing one (here the ALFWorld
memory template, in a copy of the template folder) reruns that stage and changes the fingerprint
of everything downstream. Through ``runner.run_stage`` with the LLM on the scripted stub."""
from __future__ import annotations

import json
import shutil

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import PipelineConfig
from pipeline.engine.runner import fingerprint, run_stage
from pipeline.llm import templates as _templates
from tests.helpers.llm_stage_data import cool_apple, write_trajectories
from tests.helpers.llm_faults import FAILURE, stage_ctx, stub_llm_config
from bench.chat_stub import ChatStub


@pytest.fixture
def template_copy(tmp_path, monkeypatch):
    folder = tmp_path / "templates"
    shutil.copytree(_templates.TEMPLATE_DIR, folder)
    monkeypatch.setattr(_templates, "TEMPLATE_DIR", str(folder))
    _templates.load.cache_clear()
    yield folder
    _templates.load.cache_clear()


def test_template_edit_reruns_stage_and_downstream(tmp_path, template_copy):
    store = ArtifactStore(str(tmp_path / "art"), "r1")
    write_trajectories(store, [cool_apple("failure", "traj-B")])
    answer = {"content": json.dumps(FAILURE)}
    with ChatStub([answer, answer]) as stub:
        ctx = stage_ctx(store, PipelineConfig(llm=stub_llm_config(stub)))
        first = run_stage("memory", ctx, model_id="stub-model", log=lambda s: None)
        agg_before, _ = fingerprint(ctx, "skills", "stub-model")
        assert run_stage("memory", ctx, model_id="stub-model", log=lambda s: None).skipped
        env_file = template_copy / "memory.alfworld.txt"
        env_file.write_text(env_file.read_text() + "Prefer the fridge for cooling.\n")
        _templates.load.cache_clear()
        second = run_stage("memory", ctx, model_id="stub-model", log=lambda s: None)
        agg_after, _ = fingerprint(ctx, "skills", "stub-model")
    assert not second.skipped and second.fingerprint != first.fingerprint
    assert by_name(second, "memory.alfworld.txt") != by_name(first, "memory.alfworld.txt")
    assert by_name(second, "memory.webshop.txt") == by_name(first, "memory.webshop.txt")
    # the edit reached the model and the row records the new template hash
    assert "Prefer the fridge for cooling." in stub.requests[1]["messages"][0]["content"]
    assert "Prefer the fridge for cooling." not in stub.requests[0]["messages"][0]["content"]
    assert store.require("memory").read_rows()[0]["prompt_sha"] == _templates.load("memory", "alfworld").sha
    assert agg_after != agg_before  # downstream (skills, then distill...) reruns too
    assert len(stub.requests) == 2


def by_name(result, name):
    """The fingerprinted hash of the template file called ``name`` (keys are project paths)."""
    (sha,) = [v for k, v in result.manifest["prompts"].items() if k.endswith("/" + name)]
    return sha


def test_schema_file_is_part_of_the_fingerprint(tmp_path):
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [])
    _, facts = fingerprint(stage_ctx(store, PipelineConfig()), "memory")
    assert sorted(facts["prompts"]) == ["pipeline/templates/memory.alfworld.txt", "pipeline/templates/memory.default.txt",
                                        "pipeline/templates/memory.search.txt", "pipeline/templates/memory.textworld.txt",
                                        "pipeline/templates/memory.txt", "pipeline/templates/memory.webshop.txt",
                                        "schemas/memory.schema.json"]


def test_clip_middle_keeps_the_exits_at_the_end_of_a_long_room():
    from pipeline.llm.templates import clip, clip_middle
    room = ("You are in the kitchen. " + "In one part of the room you see a cutlery drawer that is closed. " * 8
            + "To the North you see the pantry. To the West you see the corridor.")
    assert len(room) > 500
    assert "To the North" not in clip(room, 500)
    short = clip_middle(room, 500)
    assert len(short) <= 500
    assert short.startswith("You are in the kitchen. In one part")
    assert short.endswith("To the North you see the pantry. To the West you see the corridor.")
    head, tail = short.split(" ... ")
    assert room.startswith(head) and room.endswith(tail)
    assert clip_middle("a short text ", 500) == "a short text"
    assert clip_middle(None, 10) == ""

"""Endpoint presets (docs/llm_endpoints.md): Azure OpenAI detection and protocol, and the API key
never reaching logs, manifests, artifacts, the cache or exception text."""
from __future__ import annotations

import json
import os

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.config import LLMConfig, PipelineConfig
from pipeline.llm.client import LLMClient, azure_settings
from pipeline.llm.types import JSONRequest
from pipeline.engine.runner import run_stage
from tests.helpers.llm_stage_data import cool_apple, write_trajectories
from bench.chat_stub import ChatStub
from tests.helpers.llm_faults import FAILURE, GOOD_B, stage_ctx, stub_llm_config
from tests.helpers.paths import REPO

SECRET = "sk-live-SECRET-0123456789abcdef"
SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}


def test_azure_is_detected_from_the_url(monkeypatch):
    monkeypatch.delenv("AZURE_OPENAI_DEPLOYMENT", raising=False)
    monkeypatch.setenv("OPENAI_API_VERSION", "2024-10-21")
    assert azure_settings("https://myres.openai.azure.com", "gpt-4o-mini") == \
        {"api_version": "2024-10-21", "deployment": "gpt-4o-mini"}
    monkeypatch.setenv("AZURE_OPENAI_DEPLOYMENT", "prod-4o")
    assert azure_settings("https://myres.cognitiveservices.azure.com/", "gpt-4o-mini")["deployment"] == "prod-4o"
    # the v1 API and every non-Azure host speak the plain OpenAI protocol
    assert azure_settings("https://myres.openai.azure.com/openai/v1/", "gpt-4o-mini") is None
    assert azure_settings("https://api.deepseek.com", "deepseek-chat") is None
    monkeypatch.delenv("OPENAI_API_VERSION")
    with pytest.raises(ValueError, match=r"set \$OPENAI_API_VERSION"):
        azure_settings("https://myres.openai.azure.com", "gpt-4o-mini")


def test_azure_protocol_against_the_stub(monkeypatch):
    monkeypatch.setenv("SKILLPIPE_TEST_AZURE_KEY", SECRET)
    with ChatStub([{"content": '{"ok": true}'}]) as stub:
        cfg = LLMConfig(base_url=stub.base_url.removesuffix("/v1"), model="gpt-4o-mini",
                        api_key_env="SKILLPIPE_TEST_AZURE_KEY", structured_output="json_schema")
        client = LLMClient(cfg, azure={"api_version": "2024-10-21", "deployment": "prod-4o"})
        [res] = client.complete_json_many([JSONRequest("k", [{"role": "user", "content": "ok?"}], SCHEMA)])
    assert (res.ok, res.value) == (True, {"ok": True})
    # Azure routes by deployment and API version and sends the key as `api-key`, not as a bearer token
    assert stub.paths == ["/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21"]
    assert stub.headers[0].get("api-key") == SECRET and stub.auth == [""]


def test_key_never_in_logs_manifest_artifacts_cache_or_errors(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("SKILLPIPE_TEST_KEY", SECRET)
    store = ArtifactStore(str(tmp_path), "r1")
    write_trajectories(store, [cool_apple("success", "traj-A"), cool_apple("failure", "traj-B")])
    logs: list[str] = []
    # A careless proxy answers 401 with the credentials in the error body (not retried).
    with ChatStub([{"status": 401, "echo_auth": True}, GOOD_B]) as stub:
        cfg = PipelineConfig(llm=stub_llm_config(stub, api_key_env="SKILLPIPE_TEST_KEY", max_endpoint_failure_rate=1.0))
        res = run_stage("memory", stage_ctx(store, cfg), model_id="stub-model", log=logs.append)
    assert stub.auth == [f"Bearer {SECRET}"] * 2  # the key was used...
    [q] = store.require("memory").read_rows(quarantine=True)
    assert q["reason"] == "http_error" and "invalid credentials: Bearer ***" in q["detail"]
    assert store.require("memory").read_rows()[0]["contextual_description"] == FAILURE["contextual_description"]
    # ...and is nowhere: not in the log lines, the manifest, any file under the root (Parquet,
    # quarantine, manifest, SQLite cache), stdout/stderr, or an error's text
    assert SECRET not in "\n".join(logs) and SECRET not in json.dumps(res.manifest)
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    assert any(f.endswith("llm_cache.sqlite") for f in files)
    for f in files:
        with open(f, "rb") as fh:
            assert SECRET.encode() not in fh.read(), f
    out, err = capfd.readouterr()
    assert SECRET not in out + err
    monkeypatch.setenv("OPENAI_API_VERSION", "")
    with pytest.raises(ValueError) as exc:
        LLMClient(LLMConfig(base_url="https://x.openai.azure.com", model="m", api_key_env="SKILLPIPE_TEST_KEY"))
    assert SECRET not in str(exc.value) and SECRET not in repr(exc.value)


def test_documented_presets_are_valid_configs():
    # every ```yaml block of docs/llm_endpoints.md loads as a config (unknown keys would raise)
    import re

    import yaml

    from pipeline.core.config import from_dict
    doc = open(os.path.join(REPO, "docs", "llm_endpoints.md"), encoding="utf-8").read()
    blocks = [from_dict(yaml.safe_load(b)).llm for b in re.findall(r"```yaml\n(.*?)```", doc, re.DOTALL)]
    assert [(c.base_url, c.structured_output, c.api_key_env) for c in blocks] == [
        ("", "auto", ""), ("https://api.openai.com/v1", "json_schema", "OPENAI_API_KEY"),
        ("https://my-resource.openai.azure.com", "json_schema", "AZURE_OPENAI_API_KEY"),
        ("https://api.deepseek.com", "none", "DEEPSEEK_API_KEY"),
        ("http://gpu-node-1:8000/v1", "json_schema", "VLLM_API_KEY"), ("", "auto", "")]
    assert (blocks[-1].rpm, blocks[-1].tpm, blocks[-1].concurrency) == (5000, 2_000_000, 32)  # the limits example


def test_model_identity_of_the_embedded_server_does_not_depend_on_how_it_is_reached():
    """The DAG reaches the embedded server through a base URL and its alias; the CLI starts it
    itself: both must record the GGUF identity (same fingerprints, same cached answers)."""
    from pipeline.core.config import LLMConfig
    from pipeline.llm.provider import model_id_for
    from pipeline.llm.server import EMBEDDED_MODEL_ALIAS, embedded_model_id
    via_dag = model_id_for(LLMConfig(base_url="http://127.0.0.1:9/v1", model=EMBEDDED_MODEL_ALIAS))
    assert via_dag == model_id_for(LLMConfig()) == embedded_model_id() and "@" in via_dag
    assert model_id_for(LLMConfig(base_url="http://h/v1", model="gpt-x")) == "gpt-x"

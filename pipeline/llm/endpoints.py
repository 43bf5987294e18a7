"""Endpoint specifics of the LLM client (docs/llm_endpoints.md): Azure OpenAI settings, and the
schema hint for endpoints without structured output (``structured_output: none``, e.g. DeepSeek)."""
from __future__ import annotations

import json
import os
from typing import Any

AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")
AZURE_API_VERSION_ENV = "OPENAI_API_VERSION"          # the openai SDK's own variable for Azure
AZURE_DEPLOYMENT_ENV = "AZURE_OPENAI_DEPLOYMENT"      # optional; default: llm.model


def azure_settings(base_url: str, model: str) -> dict[str, str] | None:
    """Azure OpenAI settings for ``base_url``, or ``None`` when it is not a classic Azure endpoint.

    ``LLMConfig`` has no ``api_version`` field, so (docs/llm_endpoints.md) the API version comes
    from ``$OPENAI_API_VERSION`` and the deployment from ``$AZURE_OPENAI_DEPLOYMENT``, else
    ``model``. An Azure URL whose path holds ``/openai/v1`` is the v1 API, which speaks the plain
    OpenAI protocol: ``None``. Raises ``ValueError`` when an Azure endpoint has no API version.
    """
    from urllib.parse import urlparse
    url = urlparse(base_url)
    if not (url.hostname or "").endswith(AZURE_HOSTS) or "/openai/v1" in url.path:
        return None
    version = os.environ.get(AZURE_API_VERSION_ENV, "")
    if not version:
        raise ValueError(f"Azure OpenAI endpoint {base_url}: set ${AZURE_API_VERSION_ENV} (e.g. 2024-10-21)")
    return {"api_version": version, "deployment": os.environ.get(AZURE_DEPLOYMENT_ENV, "") or model}


def schema_hint(messages: list[dict[str, str]], schema: dict[str, Any]) -> list[dict[str, str]]:
    """``messages`` with the JSON Schema appended to the first user message (``none`` dialect:
    endpoints without structured output, e.g. DeepSeek; the answer is still validated locally)."""
    hint = ("\n\nAnswer with only one JSON value, no prose and no code fence, that matches this JSON Schema:\n"
            + json.dumps(schema, ensure_ascii=False, separators=(",", ":")))
    out, done = [], False
    for m in messages:
        if not done and m.get("role") == "user":
            m, done = {**m, "content": m["content"] + hint}, True
        out.append(m)
    return out

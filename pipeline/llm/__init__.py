"""LLM layer: client (openai + tenacity + jsonschema), response cache, embedded server.

Names are re-exported lazily so ``import pipeline.llm.types`` stays light (no openai import).
"""
from __future__ import annotations

_EXPORTS = {
    "LLMClient": "client", "ResponseCache": "cache", "cache_key": "cache",
    "extract_json": "jsonparse", "JSONExtractError": "jsonparse",
    "EmbeddedServer": "server", "embedded_model_id": "server", "start_detached": "server",
    "stop_detached": "server", "ServerDied": "server", "check_embedded": "server", "detached_watch": "server",
    "JSONRequest": "types", "JSONResult": "types",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Request/response types shared by the LLM client and the LLM stages.

The client contract (implemented by :class:`pipeline.llm.client.LLMClient`)::

    client.model_id -> str                       # recorded in rows and fingerprints
    client.complete_json_many(requests, desc="memory") -> list[JSONResult]   # same order
    client.stats_snapshot() -> dict              # cumulative counters
    client.stats_delta(snapshot) -> dict         # counters since a snapshot

Counters: calls (HTTP requests sent), cache_hits, prompt_tokens, completion_tokens, retries
(transport retries), repairs (schema-repair calls), failures (requests that ended quarantined).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class JSONRequest:
    """One structured-output call.

    Args:
        key: caller's id for the item (trajectory id, category...), echoed in the result.
        messages: OpenAI chat messages ``[{"role": ..., "content": ...}]``.
        schema: JSON Schema the answer must satisfy (sent to the endpoint and checked locally).
        schema_name: short name for the schema (``response_format.json_schema.name``).
        check: optional extra semantic check; returns an error message or ``None``. Its error is
            fed back to the model like a schema error (bounded by ``LLMConfig.max_repairs``).
        shared_schema: a looser form of ``schema`` that is the same for every request of the
            stage (per variant, e.g. per outcome), sent instead of ``schema`` to endpoints that
            take ``response_format.json_schema`` (hosted APIs) when ``llm.stable_schema`` is on.
            OpenAI's prompt cache treats the structured-output schema as a prefix of the system
            message, so a schema that names this item's step numbers or item count would make
            every request's prefix unique and nothing would be billed as cached. The answer is still validated here against
            ``schema`` (and ``check``), so nothing looser is accepted. ``None``: send ``schema``.
        sampling: this request's own ``temperature`` and ``seed`` over the ``llm:`` settings (a
            sampled retry of a step that greedy decoding got wrong); part of the cache key.
            ``None``: the ``llm:`` settings.
    """
    key: str
    messages: list[dict[str, str]]
    schema: dict[str, Any]
    schema_name: str = "answer"
    check: Callable[[Any], str | None] | None = None
    shared_schema: dict[str, Any] | None = None
    sampling: dict[str, Any] | None = None


@dataclass
class JSONResult:
    """The outcome of a :class:`JSONRequest`: ``ok`` with a validated ``value``, or an error."""
    key: str
    ok: bool
    value: Any = None
    raw: str = ""               # last raw completion text (kept for quarantine)
    error: str = ""             # short reason when not ok: schema_invalid | length | http_error | ...
    detail: str = ""            # longer explanation
    attempts: int = 0
    cached: bool = False
    usage: dict[str, int] = field(default_factory=dict)

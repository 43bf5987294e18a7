"""An OpenAI chat-completions stub that answers every structured request with a valid instance of
the request's own JSON Schema: lets the reliability suite run every LLM stage end to end in
seconds, without a model.

The pipeline must talk to it with ``llm.structured_output = json_schema`` (the schema travels in
``response_format.json_schema.schema``). Answers are deterministic functions of the request body
(the same request gets the same answer, so a rerun can be compared byte for byte with a
reference run). Strings are short English phrases that vary with their position, so that the
form checks of the stages pass; the content rules are the suite's business to turn into flags
(``quality.flag_rules``), not this stub's.

``SchemaStub(latency_s)``: a context manager; ``base_url`` ends in ``/v1``; ``requests`` holds the
decoded request bodies (for counting calls and repeated calls).
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WORDS = ("check", "the", "next", "place", "where", "target", "object", "may", "be", "found", "then", "carry",
         "it", "to", "goal", "location", "before", "finishing", "task", "carefully")


def phrase(name: str, seed: int, max_len: int | None, min_len: int = 1) -> str:
    """A short English phrase for field ``name`` (``seed`` varies the words), cut to ``max_len``
    characters and padded to ``min_len``."""
    words = [WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(8)]
    text = f"{name.replace('_', ' ')} {seed}: " + " ".join(words) + "."
    text = text[: max_len] if max_len else text
    return text.ljust(min_len, "x")


def instance(schema: dict[str, Any], name: str = "value", seed: int = 0) -> Any:
    """A value valid under ``schema`` (the subset of JSON Schema the stages use: ``const``,
    ``enum``, ``type`` (a list picks its first non-null type), object ``properties``, array
    ``prefixItems``/``items``/``minItems``/``maxItems``, string and number bounds). Raises
    ``ValueError`` for a type it cannot build."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][seed % len(schema["enum"])]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return {k: instance(v, k, seed) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        if "prefixItems" in schema:
            return [instance(s, name, seed + i) for i, s in enumerate(schema["prefixItems"])]
        n = max(schema.get("minItems", 1), 1)
        n = min(n, schema.get("maxItems", n))
        return [instance(schema.get("items") or {"type": "string"}, name, seed + i) for i in range(n)]
    if kind == "string":
        return phrase(name, seed, schema.get("maxLength"), schema.get("minLength", 1))
    if kind in ("integer", "number"):
        return schema.get("minimum", 0) + seed if "maximum" not in schema else min(
            schema.get("minimum", 0) + seed, schema["maximum"])
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    raise ValueError(f"cannot build a value of type {kind!r}")


def answer_for(body: dict[str, Any]) -> str:
    """The stub's answer text (compact JSON) to a chat-completions request ``body``: an instance
    of ``response_format.json_schema.schema``, seeded by a hash of the messages; ``{}`` when the
    request has no schema."""
    fmt = (body.get("response_format") or {}).get("json_schema") or {}
    seed = int(hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()[:4], 16)
    return json.dumps(instance(fmt.get("schema") or {"type": "object"}, seed=seed % 97), separators=(",", ":"))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, *args) -> None:
        pass

    def _send(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send({"object": "list", "data": [{"id": "stub-model", "object": "model", "owned_by": "stub"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        with self.server.lock:
            self.server.requests.append(body)
        if self.server.latency_s:
            time.sleep(self.server.latency_s)
        self._send({"id": "chatcmpl-stub", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "stub-model"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": answer_for(body)}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request, client_address) -> None:
        pass  # a client killed mid-request leaves a broken pipe: expected in the kill matrix


class SchemaStub:
    """``with SchemaStub(latency_s=0.02) as stub: stub.base_url``; ``stub.requests`` lists the
    request bodies received (thread-safe append; read it after the run)."""

    def __init__(self, latency_s: float = 0.0):
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.latency_s, self._server.lock, self._server.requests = latency_s, threading.Lock(), []
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._server.requests

    def __enter__(self) -> "SchemaStub":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

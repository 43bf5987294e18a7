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
ECHO_PAD = 270


def phrase(name: str, seed: int, max_len: int | None, min_len: int = 1) -> str:
    """A short English phrase for field ``name`` (``seed`` and the name vary the words, so the
    fields of one item do not repeat each other), cut at a word to end well inside ``max_len``
    characters (a complete sentence, as a real model writes, not one the grammar cut: content
    rule ``cut_off``) and padded to ``min_len``."""
    shift = seed * 7 + 6 * sum(map(ord, name))  # fields of one item start 6 words apart: no shared run
    words = [WORDS[(shift + i * 3) % len(WORDS)] for i in range(6)]
    text = f"{name.replace('_', ' ')} {seed}: " + " ".join(words) + "."
    while max_len and len(text) > max_len - 3 and " " in text:
        text = text.rsplit(" ", 1)[0].rstrip(":") + "."
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


def answer_for(body: dict[str, Any], echo_key: str = "") -> str:
    """The stub's answer text (compact JSON) to a chat-completions request ``body``: an instance
    of ``response_format.json_schema.schema``, seeded by a hash of the messages; ``{}`` when the
    request has no schema. ``echo_key`` is put in front of the first string of the answer with
    a string longer than the key (a careless endpoint repeating the caller's key)."""
    fmt = (body.get("response_format") or {}).get("json_schema") or {}
    seed = int(hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()[:4], 16)
    value = instance(fmt.get("schema") or {"type": "object"}, seed=seed % 97)
    if echo_key:
        _prefix_first_string(value, echo_key)
    return json.dumps(value, separators=(",", ":"))


def _prefix_first_string(value: Any, key: str) -> bool:
    """Replace the head of the first string leaf of ``value`` longer than ``key`` (in place)
    with ``key``, keeping its length; True once done."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for k, v in items:
        if isinstance(v, str) and len(v) > len(key) + 1:
            value[k] = key + " " + v[len(key) + 1:]
            return True
        if isinstance(v, (dict, list)) and _prefix_first_string(v, key):
            return True
    return False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, *args) -> None:
        pass

    def _send(self, payload: dict[str, Any], status: int = 200) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send({"object": "list", "data": [{"id": "stub-model", "object": "model", "owned_by": "stub"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        with self.server.lock:
            self.server.requests.append(body)
            self.server.digests.append(digest)
            self.server.keys.add(key)
            first = digest not in self.server.seen
            self.server.seen.add(digest)
            self.server.doomed = self.server.doomed or digest  # the first request ever
        if self.server.latency_s:
            time.sleep(self.server.latency_s)
        if self.server.echo == "error" and (first or digest == self.server.doomed):
            return self._send({"error": {"message": "x" * ECHO_PAD + f"invalid credentials: {key}"}}, 500)
        content, finish = answer_for(body, key if self.server.echo == "answer" else ""), "stop"
        if self.server.echo == "answer" and int(digest[:8], 16) % 4 == 0:  # kept raw in the quarantine
            content, finish = content[: len(content) // 2], "length"
        self._send({"id": "chatcmpl-stub", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "stub-model"),
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
        with self.server.lock:
            self.server.answered.append((digest, time.monotonic()))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request, client_address) -> None:
        pass  # a client killed mid-request leaves a broken pipe: expected in the kill matrix


class SchemaStub:
    """``with SchemaStub(latency_s=0.02) as stub: stub.base_url``; ``stub.requests`` lists the
    request bodies received (thread-safe append; read it after the run).

    ``echo`` makes it a careless endpoint that repeats the request's API key (the
    ``Authorization`` bearer value): ``"answer"`` puts it at the head of the first long enough
    string of every answer, and cuts one answer in 4 in half with ``finish_reason: length``
    (quarantined with the raw text); ``"error"`` answers HTTP 500 whose message is
    :data:`ECHO_PAD` filler characters and then the key (so a message cut at 300 characters
    before redaction would keep the key's first characters) to the first attempt of every
    request, and to every attempt of the first request received (which ends quarantined)."""

    def __init__(self, latency_s: float = 0.0, echo: str = ""):
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.latency_s, self._server.lock, self._server.requests = latency_s, threading.Lock(), []
        self._server.echo, self._server.seen, self._server.keys, self._server.doomed = echo, set(), set(), ""
        self._server.digests, self._server.answered = [], []
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def latency_s(self) -> float:
        """Seconds each chat-completions request waits before its answer; may be changed while
        the stub serves (a test slows one stage down, then speeds the rest up)."""
        return self._server.latency_s

    @latency_s.setter
    def latency_s(self, value: float) -> None:
        self._server.latency_s = value

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The request bodies received, in arrival order."""
        return self._server.requests

    @property
    def digests(self) -> list[str]:
        """SHA-256 of each request body (sorted keys), parallel to :attr:`requests`."""
        return self._server.digests

    @property
    def answered(self) -> list[tuple[str, float]]:
        """``(digest, time.monotonic())`` of each request whose answer was written out in full,
        in that order."""
        return self._server.answered

    @property
    def keys(self) -> set[str]:
        """The distinct bearer tokens the requests carried."""
        return self._server.keys

    def __enter__(self) -> "SchemaStub":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

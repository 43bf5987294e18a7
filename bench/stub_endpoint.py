"""A loopback OpenAI-protocol endpoint that counts and bills like a hosted one, for the LLM cost
benchmark (``bench/llm_cost.py``) and the batch-mode and rate-limit tests.

It speaks the real protocol over HTTP on 127.0.0.1: ``POST /v1/chat/completions`` (online, under
the RPM/TPM limits of :class:`stub_limits.RateLimits`, answered after ``latency_s``), and the
Files + Batches API (``POST /v1/files`` multipart upload, ``GET /v1/files/{id}[/content]``,
``POST /v1/batches``, ``GET /v1/batches/{id}``, ``GET /v1/batches?limit=N``,
``POST /v1/batches/{id}/cancel``; jobs run by :class:`stub_batches.BatchStore`). Online calls and
batch lines get the same answer for the same body (``answer(body) -> (content, finish_reason)``;
default: :func:`reliability_stub.answer_for`, a valid instance of the request's JSON Schema) and
are billed the same way: prompt tokens, cached prompt tokens (:class:`stub_limits.PrefixCache`,
reported as ``usage.prompt_tokens_details.cached_tokens``) and completion tokens, each in
:attr:`StubEndpoint.bills` with its mode (``online`` | ``batch``). ``GET /v1/_stats`` returns the
counts and bills as JSON, for a stub in another process (:func:`serve_child`).
"""
from __future__ import annotations

import email.parser
import email.policy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from bench.reliability_stub import answer_for
from bench.stub_batches import BatchStore
from bench.stub_limits import PrefixCache, RateLimits, pieces, prompt_text_pieces, tpm_cost



def schema_answer(body: dict[str, Any]) -> tuple[str, str]:
    """The default answer: a valid instance of the request's schema, finish ``stop``."""
    return answer_for(body), "stop"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # see bench/chat_stub.py: Nagle + delayed ACK add ~40 ms
    server: "_Server"

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None,
              raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _missing(self) -> None:
        self._send(404, {"error": {"message": f"no such object: {self.path}", "type": "invalid_request_error"}})

    def do_GET(self) -> None:
        stub, url = self.server.stub, urlparse(self.path)
        parts = url.path.rstrip("/").split("/")[2:]  # after /v1
        if parts == ["_stats"]:
            return self._send(200, stub.stats())
        if parts == ["batches"]:
            limit = int((parse_qs(url.query).get("limit") or ["20"])[0])
            data = stub.batches.list(limit)
            return self._send(200, {"object": "list", "data": data, "has_more": False,
                                    "first_id": data[0]["id"] if data else None,
                                    "last_id": data[-1]["id"] if data else None})
        if len(parts) == 2 and parts[0] == "batches":
            job = stub.batches.retrieve(parts[1])
            return self._send(200, job) if job else self._missing()
        if len(parts) in (2, 3) and parts[0] == "files":
            f = stub.batches.files.get(parts[1])
            if f is None:
                return self._missing()
            return self._send(200, None, raw=f["data"]) if len(parts) == 3 else self._send(200, f["meta"])
        self._send(200, {"object": "list", "data": [{"id": "stub-model", "object": "model", "owned_by": "stub"}]})

    def do_POST(self) -> None:
        stub, path = self.server.stub, urlparse(self.path).path.rstrip("/")
        data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if path.endswith("/chat/completions"):
            return self._chat(json.loads(data or b"{}"))
        if path.endswith("/files"):
            form = _multipart(self.headers.get("Content-Type", ""), data)
            meta = stub.batches.add_file(form.get("filename", "upload.jsonl"), form.get("purpose", ""),
                                         form.get("file", b""))
            return self._send(200, meta)
        if path.endswith("/batches"):
            req = json.loads(data or b"{}")
            job = stub.batches.create(req.get("input_file_id", ""), req.get("endpoint", ""),
                                      req.get("completion_window", ""), req.get("metadata"))
            return self._send(200, job) if job else self._missing()
        if path.endswith("/cancel"):
            job = stub.batches.cancel(path.split("/")[-2])
            return self._send(200, job) if job else self._missing()
        self._missing()

    def _chat(self, body: dict[str, Any]) -> None:
        stub = self.server.stub
        admitted, headers = stub.limits.admit(tpm_cost(body)) if stub.limits else (True, {})
        if not admitted:
            stub.count(rate_limited=1)
            return self._send(429, {"error": {"message": "Rate limit reached (stub)", "type": "requests",
                                              "code": "rate_limit_exceeded"}}, headers)
        stub.admitted_at(tpm_cost(body))
        if stub.latency_s:
            time.sleep(stub.latency_s)
        self._send(200, stub.complete(body, "online"), headers)


def _multipart(content_type: str, data: bytes) -> dict[str, Any]:
    """The fields of a multipart/form-data body: text fields as str, the ``file`` part as bytes
    (its file name under ``filename``)."""
    msg = email.parser.BytesParser(policy=email.policy.default).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode("latin-1") + data)
    out: dict[str, Any] = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if name == "file":
            out["file"], out["filename"] = payload, part.get_filename() or "upload.jsonl"
        elif name:
            out[name] = payload.decode("utf-8")
    return out


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    stub: "StubEndpoint"

    def handle_error(self, request, client_address) -> None:
        pass  # a client killed mid-request leaves a broken pipe: expected in the kill tests


class StubEndpoint:
    """``with StubEndpoint(...) as stub: stub.base_url`` (ends in ``/v1``).

    Args:
        answer: ``body -> (content, finish_reason)`` for online calls and batch lines alike.
        latency_s: seconds each admitted online call waits before its answer.
        rpm, tpm, burst_s: the limits of :class:`stub_limits.RateLimits` (0 = off).
        prefix_cache: bill leading prompt blocks seen before as cached (:class:`stub_limits.PrefixCache`).
        batch: keyword arguments of :class:`stub_batches.BatchStore` (line_s, validating_s,
            expire_after, line_error).
    """

    def __init__(self, answer: Callable[[dict[str, Any]], tuple[str, str]] = schema_answer, latency_s: float = 0.0,
                 rpm: int = 0, tpm: int = 0, burst_s: float = 60.0, prefix_cache: bool = False,
                 batch: dict[str, Any] | None = None):
        self.answer, self.latency_s = answer, latency_s
        self.limits = RateLimits(rpm, tpm, burst_s) if (rpm or tpm) else None
        self.prefix = PrefixCache() if prefix_cache else None
        self.batches = BatchStore(lambda body: self.complete(body, "batch"), **(batch or {}))
        self.bills: list[dict[str, Any]] = []
        self.admitted: list[tuple[float, int]] = []  # (monotonic time, TPM cost) of each admitted online call
        self.counts = {"rate_limited": 0}
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.stub = self
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def count(self, **delta: int) -> None:
        with self._lock:
            for k, v in delta.items():
                self.counts[k] = self.counts.get(k, 0) + v

    def admitted_at(self, cost: int) -> None:
        with self._lock:
            self.admitted.append((time.monotonic(), cost))

    def complete(self, body: dict[str, Any], mode: str) -> dict[str, Any]:
        """Answer and bill one chat call (online or a batch line); returns the completion body."""
        content, finish = self.answer(body)
        prompt = prompt_text_pieces(body)
        cached = self.prefix.cached_tokens(prompt) if self.prefix else 0
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(pieces(content))}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if self.prefix:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        with self._lock:
            self.bills.append({"mode": mode, "prompt": len(prompt), "cached": cached,
                               "completion": usage["completion_tokens"], "messages": body.get("messages")})
        return {"id": f"chatcmpl-stub-{len(self.bills)}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "stub-model"),
                "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": content}}],
                "usage": usage}

    def online_calls(self) -> int:
        """Online chat calls answered."""
        return sum(b["mode"] == "online" for b in self.bills)

    def stats(self) -> dict[str, Any]:
        """Counts and bills as JSON (``GET /v1/_stats``); bills without their messages."""
        with self._lock:
            bills = [{k: v for k, v in b.items() if k != "messages"} for b in self.bills]
            return {"bills": bills, "admitted": list(self.admitted), **self.counts,
                    "batches": len(self.batches.jobs), "retrieves": self.batches.retrieves,
                    "lines_run": len(self.batches.lines_run)}

    def __enter__(self) -> "StubEndpoint":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve_child(kwargs: dict[str, Any], conn) -> None:
    """Child-process entry (``multiprocessing``): serve ``StubEndpoint(**kwargs)``, send its URL
    on ``conn``, stop when the parent closes the pipe. The stub then does not share the client's
    GIL, as a real endpoint would not."""
    with StubEndpoint(**kwargs) as stub:
        conn.send(stub.base_url)
        try:
            conn.recv()
        except EOFError:
            pass

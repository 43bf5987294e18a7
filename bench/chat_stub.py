"""A scripted OpenAI chat-completions stub on 127.0.0.1, for fault injection in tests ONLY.

Each POST to ``/v1/chat/completions`` consumes the next step of the script:

* ``{"content": str, "finish_reason": "stop"}`` - a normal answer (usage 10 prompt + 5 completion);
* ``{"status": 429, "headers": {"Retry-After": "1"}, "body": {...}}`` - an HTTP error;
* ``{"reset": True}`` - close the socket with an RST and no response;
* ``{"sleep": 1.0, ...}`` - wait before doing the rest of the step (timeouts);
* ``{"status": 401, "echo_auth": True, "pad": 250}`` - an error whose body repeats the request's
  credentials after ``pad`` filler characters (a careless proxy; the client must redact them);

* ``{"die": "SIGILL"}`` / ``{"exit": 3, "stderr": "..."}`` - the process kills itself with that
  signal, or writes ``stderr`` and exits with that code: for the stub run as a stand-in for the
  embedded server in its own process (``python bench/chat_stub.py --port P --script JSON``);
* ``{"body_text": "<html>...", "content_type": "text/html"}`` - a 200 (or ``status``) whose body
  is the given text, not JSON (a misconfigured proxy or captive portal).

An exhausted script answers 599 so an unexpected extra call fails the test loudly, unless a
``default`` step is given (benchmarks: every call gets it). Request bodies are kept in
``stub.requests``, paths in ``stub.paths``, Authorization headers in ``stub.auth`` and all
headers in ``stub.headers``, for assertions; ``GET /v1/_stats`` answers ``{"requests": n}``.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes; without TCP_NODELAY, Nagle + delayed ACK add ~40 ms
    # to every response (measured: 0.544 s per 0.5 s request), which would swamp the benchmark
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.endswith("/_stats"):  # for a stub in another process (bench/llm_stage.py)
            self._send(200, {"requests": len(self.server.stub.requests)})
            return
        self._send(200, {"object": "list", "data": [{"id": "stub-model", "object": "model", "owned_by": "stub"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        stub = self.server.stub
        with stub.lock:
            stub.requests.append(body)
            stub.auth.append(self.headers.get("Authorization", ""))
            stub.paths.append(self.path)
            stub.headers.append(dict(self.headers.items()))
            step = stub.script.pop(0) if stub.script else (stub.default or {"status": 599, "body": {"error": "script exhausted"}})
        if step.get("echo_auth"):
            creds = f"{self.headers.get('Authorization', '')} {self.headers.get('api-key', '')}"
            pad = "x" * step.get("pad", 0)
            step = dict(step, body={"error": {"message": f"{pad}invalid credentials: {creds}"}})
        if step.get("sleep"):
            time.sleep(step["sleep"])
        if step.get("die"):
            os.kill(os.getpid(), getattr(signal, step["die"]))
            time.sleep(5)  # a handled signal (faulthandler) re-raises it; never answer meanwhile
        if "exit" in step:
            sys.stderr.write(step.get("stderr", "") + "\n")
            sys.stderr.flush()
            os._exit(step["exit"])
        if "body_text" in step:
            data = step["body_text"].encode("utf-8")
            self.send_response(step.get("status", 200))
            self.send_header("Content-Type", step.get("content_type", "application/json"))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if step.get("reset"):
            # SO_LINGER 0 makes close() send RST: the client sees a connection reset.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if "status" in step:
            self._send(step["status"], step.get("body", {"error": {"message": "stub error"}}), step.get("headers"))
            return
        self._send(200, {
            "id": f"chatcmpl-{len(stub.requests)}", "object": "chat.completion", "created": 0,
            "model": body.get("model", "stub-model"),
            "choices": [{"index": 0, "finish_reason": step.get("finish_reason", "stop"),
                         "message": {"role": "assistant", "content": step["content"]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog is 5: 16 concurrent connects overflow it and the
    # dropped SYNs come back after a 1 s retransmit (measured: 16 requests of 0.5 s took 1.7-3.4 s)
    request_queue_size = 128
    stub: "ChatStub"

    def handle_error(self, request, client_address) -> None:
        pass  # a client that timed out leaves a broken pipe behind: expected, not news


class ChatStub:
    """Context manager: ``with ChatStub(script) as stub: stub.base_url`` (ends in ``/v1``)."""

    def __init__(self, script: list[dict[str, Any]], default: dict[str, Any] | None = None):
        self.script = list(script)
        self.default = default
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str] = []  # Authorization header of each POST
        self.lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.stub = self
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "ChatStub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def main(argv: list[str] | None = None) -> None:
    """Serve a script on a fixed port until killed: a stand-in for the embedded server process.

    ``--as`` is ignored; it puts a name in the command line (``server._pid_is_our_server``
    recognises the embedded server by ``llama_cpp.server`` in it)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--script", default="[]", help="JSON list of steps")
    ap.add_argument("--default", default="", help="JSON step for every call after the script")
    ap.add_argument("--as", dest="alias", default="")
    a = ap.parse_args(argv)
    stub = ChatStub(json.loads(a.script), json.loads(a.default) if a.default else None)
    stub._server.server_close()  # rebind on the requested port
    stub._server = _Server(("127.0.0.1", a.port), _Handler)
    stub._server.stub = stub
    print(f"stub listening on 127.0.0.1:{a.port}", flush=True)
    stub._server.serve_forever()


if __name__ == "__main__":
    main()

"""The Files + Batches side of the loopback stub (``bench/stub_endpoint.py``): uploaded files and
batch jobs that run their JSONL lines in a background thread, with OpenAI's status transitions.

A job goes ``validating`` -> ``in_progress`` -> ``finalizing`` -> ``completed``; a job whose
input is not valid JSONL of ``POST /v1/chat/completions`` lines goes ``failed`` (with ``errors``);
``cancel`` makes a running job ``cancelling`` -> ``cancelled``; a job given an expiry (below) stops
after that many lines and goes ``expired``. As at OpenAI, the lines that ran are in the output file
(``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null}``), a line
that got an HTTP error is in the error file with its ``response``, and each line that never ran
of an expired or cancelled job is in the error file as
``{"custom_id", "response": null, "error": {"code": "batch_expired" | "batch_cancelled"}}``.

Fault knobs (for tests): ``validating_s`` and ``line_s`` (seconds before the job starts and per
line), ``expire_after`` (a list: the n-th job created expires after ``expire_after[n]`` lines;
jobs beyond the list run to the end), ``line_error(custom_id, times_seen)`` (an HTTP status for
that run of that line, or ``None`` to run it), ``hold_after`` (every job stops after that many
lines until :attr:`BatchStore.release` is set: a test kills its client while the job runs).
"""
from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any, Callable

ENDPOINT = "/v1/chat/completions"
TERMINAL = ("completed", "failed", "expired", "cancelled")


class BatchStore:
    """Files and jobs; ``run_line(body) -> chat completion dict`` answers one line."""

    def __init__(self, run_line: Callable[[dict[str, Any]], dict[str, Any]], validating_s: float = 0.0,
                 line_s: float = 0.0, expire_after: list[int] | None = None,
                 line_error: Callable[[str, int], int | None] | None = None, hold_after: int | None = None):
        self.run_line, self.validating_s, self.line_s = run_line, validating_s, line_s
        self.hold_after, self.release = hold_after, threading.Event()
        self.expire_after = list(expire_after or [])
        self.line_error = line_error
        self.files: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.lines_run: list[str] = []  # custom ids of the lines that ran, in order (what was billed)
        self.retrieves = 0
        self._seen: dict[str, int] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"

    # ---- files ---------------------------------------------------------------------------
    def add_file(self, filename: str, purpose: str, data: bytes) -> dict[str, Any]:
        """Store an upload; returns its file object."""
        with self._lock:
            fid = self._new_id("file")
            self.files[fid] = {"meta": {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                                        "filename": filename, "purpose": purpose, "status": "processed"},
                               "data": data}
            return self.files[fid]["meta"]

    def content(self, file_id: str) -> bytes | None:
        """A file's bytes, or ``None`` for an unknown id."""
        f = self.files.get(file_id)
        return None if f is None else f["data"]

    # ---- jobs ----------------------------------------------------------------------------
    def create(self, input_file_id: str, endpoint: str, completion_window: str,
               metadata: dict[str, str] | None) -> dict[str, Any] | None:
        """A new job (started in its own thread); ``None`` when the input file is unknown."""
        if input_file_id not in self.files:
            return None
        with self._lock:
            bid = self._new_id("batch")
            expire = self.expire_after[len(self.jobs)] if len(self.jobs) < len(self.expire_after) else None
            now = int(time.time())
            self.jobs[bid] = {"id": bid, "object": "batch", "endpoint": endpoint, "errors": None,
                              "input_file_id": input_file_id, "completion_window": completion_window,
                              "status": "validating", "output_file_id": None, "error_file_id": None,
                              "created_at": now, "expires_at": now + 86400, "metadata": metadata or {},
                              "request_counts": {"total": 0, "completed": 0, "failed": 0}}
        threading.Thread(target=self._work, args=(bid, expire), daemon=True).start()
        return self.view(bid)

    def view(self, batch_id: str) -> dict[str, Any] | None:
        """The job object as the API returns it, or ``None``."""
        with self._lock:
            job = self.jobs.get(batch_id)
            return None if job is None else json.loads(json.dumps(job))

    def retrieve(self, batch_id: str) -> dict[str, Any] | None:
        """:meth:`view`, counted in :attr:`retrieves` (how often a client polled)."""
        self.retrieves += 1
        return self.view(batch_id)

    def cancel(self, batch_id: str) -> dict[str, Any] | None:
        """Ask a running job to stop; a finished job is returned as it is."""
        with self._lock:
            job = self.jobs.get(batch_id)
            if job is not None and job["status"] not in TERMINAL:
                job["status"], job["cancelling_at"] = "cancelling", int(time.time())
        return self.view(batch_id)

    def list(self, limit: int = 20) -> list[dict[str, Any]]:
        """The newest ``limit`` jobs, newest first."""
        return [self.view(b) for b in sorted(self.jobs, reverse=True)[:limit]]

    def _set(self, bid: str, **fields: Any) -> None:
        with self._lock:
            self.jobs[bid].update(fields)

    def _lines(self, bid: str) -> list[dict[str, Any]] | None:
        """The job's input lines, or ``None`` after marking it ``failed`` (not JSONL of chat calls)."""
        text = self.files[self.jobs[bid]["input_file_id"]]["data"].decode("utf-8", errors="replace")
        lines = []
        for n, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
                ok = line.get("url") == ENDPOINT and line.get("method") == "POST" and "custom_id" in line
            except (ValueError, AttributeError):
                ok = False
            if not ok:
                self._set(bid, status="failed", failed_at=int(time.time()), errors={"object": "list", "data": [
                    {"code": "invalid_request", "message": f"line {n} is not a POST {ENDPOINT} request", "line": n}]})
                return None
            lines.append(line)
        return lines

    def _work(self, bid: str, expire: int | None) -> None:
        time.sleep(self.validating_s)
        lines = self._lines(bid)
        if lines is None:
            return
        with self._lock:
            self.jobs[bid].update(status="in_progress", in_progress_at=int(time.time()))
            self.jobs[bid]["request_counts"]["total"] = len(lines)
        out, err, ran = [], [], 0
        for line in lines:
            if self.hold_after is not None and ran >= self.hold_after:
                if not self.release.wait(timeout=600):  # a test that never releases must not hang the stub
                    break
            if self.jobs[bid]["status"] == "cancelling" or (expire is not None and ran >= expire):
                break
            self._run_one(bid, line, out, err)
            ran += 1
            time.sleep(self.line_s)
        status = "cancelled" if self.jobs[bid]["status"] == "cancelling" else "expired" if ran < len(lines) else "completed"
        code = {"cancelled": "batch_cancelled", "expired": "batch_expired"}.get(status)
        err += [{"id": f"batch_req_{bid}_{i}", "custom_id": line["custom_id"], "response": None,
                 "error": {"code": code, "message": f"This request could not be executed before the job was {status}."}}
                for i, line in enumerate(lines[ran:], start=ran)]
        self._set(bid, status="finalizing", finalizing_at=int(time.time()))
        files = {}
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                files[name] = self.add_file(f"{bid}_{name[:-8]}.jsonl", "batch_output",
                                            "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))["id"]
        self._set(bid, status=status, **files, **{f"{status}_at": int(time.time())})

    def _run_one(self, bid: str, line: dict[str, Any], out: list, err: list) -> None:
        cid = line["custom_id"]
        with self._lock:
            self._seen[cid] = self._seen.get(cid, 0) + 1
            seen = self._seen[cid]
        status = self.line_error(cid, seen) if self.line_error else None
        rid = f"batch_req_{bid}_{len(out) + len(err)}"
        if status:
            err.append({"id": rid, "custom_id": cid, "error": None, "response": {
                "status_code": status, "request_id": rid, "body": {"error": {"message": f"stub error {status}"}}}})
            failed = 1
        else:
            body = self.run_line(line["body"])
            self.lines_run.append(cid)
            out.append({"id": rid, "custom_id": cid, "error": None,
                        "response": {"status_code": 200, "request_id": rid, "body": body}})
            failed = 0
        with self._lock:
            counts = self.jobs[bid]["request_counts"]
            counts["failed" if failed else "completed"] += 1

"""Batch mode (``llm.mode: batch``): a stage's requests as one job of the endpoint's Batch API.

OpenAI's Batch API (and the compatible ones of other providers) answers within 24 h at half the
price: exactly this pipeline's case. :meth:`LLMClient.complete_json_many` hands the requests of
a stage to :class:`BatchRunner`, which returns the same ``JSONResult`` list, in the same order, as
the online loop would:

1. answers already in the cache are taken from it and never submitted (nothing is paid twice);
2. every other request becomes one line of a JSONL file (``custom_id`` = SHA-256 of the line's
   body, so identical requests share a line), written to ``<run>/_llm_batches/``, uploaded with
   ``files.create(purpose="batch")`` and submitted with ``batches.create`` (more than
   ``llm.batch_max_requests`` lines, or 190 MB, are split over several jobs);
3. each job is recorded in the run's LLM cache under ``batch:<input file id>`` (the *ledger*:
   file id, job id, the custom ids) before and after ``batches.create``, and the job is polled
   every ``llm.batch_poll_s`` until it is completed, failed, expired or cancelled;
4. the output and error files are downloaded and every answer goes through the online loop's
   own verdict (:meth:`LLMClient.judge`: extraction, schema, the request's check, the ``length``
   rule); accepted answers are cached, rejected ones are repaired in a second, smaller job with
   the same repair message as online, until ``llm.max_repairs``;
5. a request with no answer (the job expired or was cancelled before it ran, or its line failed
   with a 408/409/429/5xx) goes out again in a new job, at most ``llm.max_retries`` times per
   process; then it fails (``timeout`` when its job expired, else ``http_error``) and the stage
   records it as a failed request, which a rerun retries. Another HTTP error is final.

**Resuming.** A killed or retried task starts over from its cache and the ledger: for each
request it rebuilds the body it would send, finds the newest job holding that ``custom_id`` and,
if the job is still running, polls that job instead of submitting a second one; a finished job's
files are downloaded again (no call is paid twice) and replayed through the same steps, repairs
included. A job created just before a kill, whose id never reached the ledger, is found again by
its input file id in ``batches.list``.

Counters: ``calls`` = lines the endpoint ran (a line shared by identical requests once), tokens
from each line's ``usage``, ``retries`` = requests sent again, ``batches`` = jobs created.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import openai

from pipeline.llm.types import JSONRequest, JSONResult

LEDGER_PREFIX = "batch:"
TERMINAL = ("completed", "failed", "expired", "cancelled")
MAX_FILE_BYTES = 190_000_000  # OpenAI takes input files up to 200 MB
LOG_EVERY_S = 60.0  # a progress line per job at most this often (and on each status change)
ENDPOINT = "/v1/chat/completions"


def custom_id(body: dict[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of a chat-completions ``body``: the line's id."""
    blob = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _retryable_status(status: int) -> bool:
    return status in (408, 409, 429) or status >= 500


@dataclass
class _Item:
    """One uncached request on its way through the jobs."""
    index: int
    req: JSONRequest
    key: str
    messages: list[dict[str, str]]
    attempt: int = 0  # repairs made
    calls: int = 0
    tries: int = 0  # jobs of this process that came back without its answer
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0,
                                                            "cached_prompt_tokens": 0})


class Ledger:
    """The jobs submitted for a run: ``{input_file_id, batch_id, custom_ids, stage, created}``
    records in the LLM cache (in memory when the client has no cache), oldest first."""

    def __init__(self, cache: Any, model_id: str):
        self.cache, self.model_id = cache, model_id
        entries = cache.entries_under(LEDGER_PREFIX) if cache is not None else []
        self.records: dict[str, dict[str, Any]] = {v["input_file_id"]: v for _, v in entries}
        self._index: dict[str, list[str]] = {}
        for rec in self.records.values():
            self._add_index(rec)

    def _add_index(self, rec: dict[str, Any]) -> None:
        for cid in rec["custom_ids"]:
            ids = self._index.setdefault(cid, [])
            if rec["input_file_id"] not in ids:
                ids.append(rec["input_file_id"])

    def put(self, rec: dict[str, Any]) -> None:
        """Record (or update) one job; committed before returning."""
        self.records[rec["input_file_id"]] = rec
        self._add_index(rec)
        if self.cache is not None:
            self.cache.put(LEDGER_PREFIX + rec["input_file_id"], self.model_id, rec, "", {})

    def drop(self, file_id: str) -> None:
        """Forget a record whose job was never created."""
        rec = self.records.pop(file_id)
        for cid in rec["custom_ids"]:
            self._index[cid].remove(file_id)
        if self.cache is not None:
            self.cache.delete(LEDGER_PREFIX + file_id)

    def newest(self, cid: str) -> dict[str, Any] | None:
        """The newest job holding line ``cid``, or ``None``."""
        ids = self._index.get(cid)
        return self.records[ids[-1]] if ids else None


class BatchRunner:
    """Runs one stage's requests through the Batch API (module docstring) for ``client``
    (:class:`pipeline.llm.client.LLMClient`); ``desc`` names the stage in logs and job metadata."""

    def __init__(self, client: Any, desc: str):
        self.client, self.desc, self.cfg = client, desc, client.cfg
        self.ledger = Ledger(client.cache, client.model_id)
        self._batches: dict[str, Any] = {}  # job id -> last Batch seen
        self._lines: dict[str, dict[str, dict[str, Any]]] = {}  # job id -> custom id -> output/error line
        self._mine: set[str] = set()  # input file ids of the jobs this process created
        self._paid: set[str] = set()  # custom ids whose line was counted
        self._oai: openai.OpenAI | None = None

    def run(self, requests: list[JSONRequest]) -> list[JSONResult]:
        """The results of ``requests``, in order; never raises for a failed request (it becomes an
        ``ok=False`` result). Raises ``openai.OpenAIError`` when the Files/Batches calls
        themselves fail after the SDK's retries (nothing is lost: a rerun resumes)."""
        results: list[JSONResult | None] = [None] * len(requests)
        items = []
        for i, req in enumerate(requests):
            key, hit = self.client.lookup(req)
            if hit is not None:
                results[i] = hit
            else:
                items.append(_Item(i, req, key, list(req.messages)))
        if items:
            self._oai = self.client.open_sync()
            try:
                self._adopt_unrecorded()
                while items:
                    items = self._round(items, results)
            finally:
                self._oai.close()
        return results  # type: ignore[return-value]

    def _round(self, items: list[_Item], results: list) -> list[_Item]:
        """Advance every item as far as the ledger allows; submit what needs sending, wait for
        the jobs items are waiting on. Returns the items not finished yet."""
        submit: dict[str, tuple[_Item, dict[str, Any]]] = {}
        waiting: set[str] = set()
        left = []
        for item in items:
            state, what = self._advance(item)
            if state == "done":
                results[item.index] = what
                continue
            left.append(item)
            if state == "submit":
                submit.setdefault(custom_id(what), (item, what))
            else:
                waiting.add(what)
        if submit:
            waiting |= self._submit([body for _, body in submit.values()])
        if waiting:
            self._wait(waiting)
        return left

    def _advance(self, item: _Item) -> tuple[str, Any]:
        """``("done", result)``, ``("submit", body)`` or ``("wait", job id)`` for ``item``,
        consuming every answer the ledger's finished jobs hold for it."""
        while True:
            body = self.client.request_body(item.req, item.messages)
            cid = custom_id(body)
            rec = self.ledger.newest(cid)
            if rec is None:
                return "submit", body
            job = self._batch(rec["batch_id"])
            if job.status not in TERMINAL:
                return "wait", job.id
            line = self._job_lines(job).get(cid)
            response = (line or {}).get("response") or {}
            if response.get("status_code") == 200:
                verdict = self._consume(item, cid, response.get("body") or {})
                if verdict is not None:
                    return "done", verdict
                continue  # a repair: its line is the next to look for
            reason, detail = self._no_answer(job, line)
            if reason == "final":
                return "done", self.client.fail(item.req, "http_error", "", detail, item.calls, item.usage)
            if rec["input_file_id"] not in self._mine:
                return "submit", body  # a job of an earlier process: send again, no try counted
            item.tries += 1
            if item.tries > self.cfg.max_retries:
                return "done", self.client.fail(item.req, reason, "", f"{detail} ({item.tries} jobs)", item.calls,
                                                item.usage)
            self.client.bump(retries=1)
            return "submit", body

    def _consume(self, item: _Item, cid: str, body: dict[str, Any]) -> JSONResult | None:
        """Judge one answer line (as the online loop judges an answer); ``None`` after a repair."""
        if cid not in self._paid:
            self._paid.add(cid)
            self.client.bump(calls=1)
            self.client.count_usage(item.usage, body.get("usage"))
        item.calls += 1
        choice = (body.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        if not isinstance(message, dict) or "content" not in message:
            return self.client.fail(item.req, "http_error", "", f"batch line {cid[:12]} is not a chat completion",
                                    item.calls, item.usage)
        verdict, got, raw, detail = self.client.judge(item.req, item.messages, message.get("content") or "",
                                                      choice.get("finish_reason"), item.attempt)
        if verdict == "repair":
            item.messages, item.attempt = got, item.attempt + 1
            return None
        if verdict == "fail":
            return self.client.fail(item.req, got, raw, detail, item.calls, item.usage)
        return self.client.store(item.key, item.req, got, raw, item.calls, item.usage)

    @staticmethod
    def _no_answer(job: Any, line: dict[str, Any] | None) -> tuple[str, str]:
        """``(reason, detail)`` for a line a finished job did not answer with a 200: ``final``
        for an HTTP error that another try cannot mend, else the reason it fails with once the
        tries are spent."""
        response = (line or {}).get("response") or {}
        status = response.get("status_code")
        if status is not None:
            msg = json.dumps((response.get("body") or {}).get("error") or response.get("body"))[:300]
            return ("http_error" if _retryable_status(status) else "final"), f"HTTP {status} in batch {job.id}: {msg}"
        code = ((line or {}).get("error") or {}).get("code") or job.status
        if job.status == "expired" or code == "batch_expired":
            return "timeout", f"batch {job.id} expired before this request ran"
        if job.status == "failed":
            errors = getattr(job, "errors", None)
            data = getattr(errors, "data", None) or []
            return "http_error", f"batch {job.id} failed: " + "; ".join(str(getattr(e, "message", e)) for e in data)[:300]
        return "http_error", f"batch {job.id} ended {job.status} ({code}) before this request ran"

    # ---- the endpoint's Files + Batches API -----------------------------------------------
    def _batch(self, batch_id: str) -> Any:
        job = self._batches.get(batch_id)
        if job is None or job.status not in TERMINAL:
            job = self._batches[batch_id] = self._oai.batches.retrieve(batch_id)
        return job

    def _job_lines(self, job: Any) -> dict[str, dict[str, Any]]:
        """``custom_id -> line`` of a finished job's output and error files (downloaded once)."""
        if job.id not in self._lines:
            lines: dict[str, dict[str, Any]] = {}
            for file_id in (job.error_file_id, job.output_file_id):  # an answer wins over an error
                if file_id:
                    for text in self._oai.files.content(file_id).text.splitlines():
                        if text.strip():
                            line = json.loads(text)
                            lines[line.get("custom_id", "")] = line
            self._lines[job.id] = lines
        return self._lines[job.id]

    def _submit(self, bodies: list[dict[str, Any]]) -> set[str]:
        """Submit ``bodies`` as one or more jobs; returns their ids."""
        ids, chunk, size = set(), [], 0
        for body in bodies:
            line = json.dumps({"custom_id": custom_id(body), "method": "POST", "url": ENDPOINT, "body": body},
                              ensure_ascii=False) + "\n"
            if chunk and (len(chunk) >= self.cfg.batch_max_requests or size + len(line) > MAX_FILE_BYTES):
                ids.add(self._create(chunk))
                chunk, size = [], 0
            chunk.append(line)
            size += len(line.encode("utf-8"))
        if chunk:
            ids.add(self._create(chunk))
        return ids

    def _create(self, lines: list[str]) -> str:
        """Write, upload and submit one JSONL job; the ledger holds it before and after
        ``batches.create``, so a kill at any point loses no job."""
        data = "".join(lines).encode("utf-8")
        path = os.path.join(self._batch_dir(), f"{self.desc}-{hashlib.sha256(data).hexdigest()[:16]}.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        with open(path, "rb") as f:
            upload = self._oai.files.create(file=f, purpose="batch")
        rec = {"input_file_id": upload.id, "batch_id": "", "stage": self.desc, "created": time.time(),
               "custom_ids": [json.loads(x)["custom_id"] for x in lines]}
        self.ledger.put(rec)
        job = self._oai.batches.create(input_file_id=upload.id, endpoint=ENDPOINT, completion_window="24h",
                                       metadata={"skillpipe_stage": self.desc[:500]})
        self.ledger.put({**rec, "batch_id": job.id})
        self._mine.add(upload.id)
        self._batches[job.id] = job
        self.client.bump(batches=1)
        os.remove(path)  # the endpoint keeps the input file
        self._log(f"batch {job.id} submitted: {len(lines)} requests (file {upload.id})")
        return job.id

    def _batch_dir(self) -> str:
        cache = self.client.cache
        folder = os.path.join(os.path.dirname(os.path.abspath(cache.path)), "_llm_batches") if cache is not None \
            else os.path.join(tempfile.gettempdir(), "skillpipe_llm_batches")
        os.makedirs(folder, exist_ok=True)
        return folder

    def _adopt_unrecorded(self) -> None:
        """Ledger records without a job id (killed between upload and the record of the job):
        adopt the job ``batches.list`` shows for that input file, else forget the record."""
        pending = [r for r in self.ledger.records.values() if not r["batch_id"]]
        if not pending:
            return
        by_file = {b.input_file_id: b for b in self._oai.batches.list(limit=100)}
        for rec in pending:
            job = by_file.get(rec["input_file_id"])
            if job is None:
                self.ledger.drop(rec["input_file_id"])
            else:
                self.ledger.put({**rec, "batch_id": job.id})
                self._batches[job.id] = job

    def _wait(self, batch_ids: set[str]) -> None:
        """Poll the jobs every ``llm.batch_poll_s`` until each is finished; logs each change."""
        seen: dict[str, tuple[str, float]] = {}
        while True:
            open_ids = [b for b in sorted(batch_ids) if self._batch(b).status not in TERMINAL]
            for b in sorted(batch_ids):
                job = self._batches[b]
                last = seen.get(b)
                if last is None or last[0] != job.status or time.monotonic() - last[1] >= LOG_EVERY_S:
                    counts = job.request_counts
                    done = f", {counts.completed + counts.failed}/{counts.total} done" if counts else ""
                    self._log(f"batch {b}: {job.status}{done}")
                    seen[b] = (job.status, time.monotonic())
            if not open_ids:
                return
            time.sleep(self.cfg.batch_poll_s)

    def _log(self, message: str) -> None:
        print(f"[{self.desc}] {message}", file=sys.stderr, flush=True)

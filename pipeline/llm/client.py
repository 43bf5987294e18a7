"""LLMClient: structured JSON calls to any OpenAI-compatible endpoint (contract: ``types.py``).

Per request (D-M1, D-M2 fixes):

1. cache lookup (:mod:`.cache`) - a hit re-validates and costs no call;
2. one chat call, with transport retries by tenacity (exponential backoff + jitter, ``Retry-After``
   honoured) on 429, 408/409, 5xx, timeouts, connection errors and an HTTP 200 whose body is not
   a chat completion (not JSON: a proxy's error page), at most ``cfg.max_retries``; when the
   embedded server's process dies, the batch stops at once with :class:`server.ServerDied`
   (signal or exit code, log tail) instead of retrying a dead endpoint;
3. ``finish_reason == "length"`` ends the request as ``length`` (a truncated answer is never data);
4. extraction (:mod:`.jsonparse`), jsonschema validation against the request's schema (the file
   form, on every dialect), then the request's ``check``; an error is
   fed back to the model in up to ``cfg.max_repairs`` repair calls;
5. success is cached; anything else returns ``JSONResult(ok=False, error=<reason>, raw, detail)``.

Error reasons: ``length``, ``not_json``, ``schema_invalid``, ``check_failed``, ``http_error``
(including a 200 that is not a chat completion; the detail names the endpoint), ``timeout``,
``connection_error``.

Endpoints (docs/llm_endpoints.md): any OpenAI-compatible URL through ``openai.AsyncOpenAI``; a
classic Azure OpenAI URL through ``openai.AsyncAzureOpenAI`` (:func:`azure_settings`). The API key
is read from the environment variable named by ``llm.api_key_env`` at each batch, never stored,
and redacted (``***``) from every answer as it arrives (raw text and parsed value, so neither the
cache nor any row holds it) and from every error detail before it is cut to length.

Structured-output dialects (``cfg.structured_output``): ``json_schema`` (OpenAI, vLLM),
``json_object`` = ``{"type": "json_object", "schema": grammar_schema(S)}`` (llama.cpp's Python
server, which answers HTTP 500 to ``json_schema``; measured; the grammar form bounds
every string, :mod:`.schemas`), ``none`` (no ``response_format``; the schema is
appended to the first user message, :func:`schema_hint`). ``auto`` picks ``json_object`` for the
embedded model and ``json_schema`` otherwise, and switches once, for the client's lifetime, to
``json_object`` when the endpoint rejects ``response_format``.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import email.utils
import json
import os
import threading
import time
from typing import Any, Callable

import openai
from jsonschema import exceptions as js_exceptions
from jsonschema import validators as js_validators
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from pipeline.core.config import LLMConfig
from pipeline.progress import bar as progress_bar
from pipeline.llm.cache import ResponseCache, cache_key
from pipeline.llm.jsonparse import JSONExtractError, extract_json
from pipeline.llm.ratelimit import RateBudget
from pipeline.llm.endpoints import azure_settings, schema_hint  # noqa: F401  (re-exported)
from pipeline.llm.schemas import grammar_schema
from pipeline.llm.server import EMBEDDED_SLOTS, ServerDied, embedded_alias, is_embedded_alias
from pipeline.llm.types import JSONRequest, JSONResult

COUNTERS = ("calls", "cache_hits", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "retries", "repairs",
            "failures", "rate_limited", "limit_wait_s", "batches")
DIALECTS = ("auto", "json_schema", "json_object", "none")
MAX_RETRY_AFTER_S = 120.0  # never sleep longer than this on a server's Retry-After
WATCH_INTERVAL_S = 0.2  # how often a batch checks that the embedded server process still runs
#: Sent with every call to the embedded model so that both programs that can serve it sample
#: alike: 1.1 is llama-cpp-python's server default (``llama_cpp/server/types.py``), under which the
#: embedded teacher's figures were measured; llama-server's default is 1.0 (off), and with it the
#: teacher copied its prompt more (memory on the sample: echo_prompt 6 of 19 against 3).
EMBEDDED_REPEAT_PENALTY = 1.1
DEATH_GRACE_S = 1.0  # a reset can reach us a moment before the dying process's exit is visible
TRANSPORT_ERRORS = ("connection_error", "timeout", "http_error")


class _BadBody(Exception):
    """An HTTP 2xx whose body is not a chat completion (not JSON, or JSON without ``choices``):
    a transport fault (a proxy's error page, a cut body), retried like a 5xx."""


class _Rejected(Exception):
    """A model answer that failed extraction, schema or check: ``reason`` + ``detail``."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _validator(schema: dict[str, Any]):
    cls = js_validators.validator_for(schema)
    cls.check_schema(schema)  # a broken schema is a code bug: raise SchemaError at once
    return cls(schema)


def _schema_error(validator, value: Any) -> str | None:
    err = js_exceptions.best_match(validator.iter_errors(value))
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path) or "<root>"
    return f"at {where}: {err.message}"[:400]


def _retry_after_s(exc: BaseException) -> float | None:
    """Seconds from ``retry-after-ms`` / ``Retry-After`` (delta seconds or HTTP date), if any."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    try:
        if headers.get("retry-after-ms"):
            return float(headers["retry-after-ms"]) / 1000.0
        value = headers.get("retry-after")
        if not value:
            return None
        try:
            return float(value)
        except ValueError:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _mentions_response_format(exc: openai.APIStatusError) -> bool:
    return "response_format" in f"{exc} {exc.body}"


class LLMClient:
    """Structured-output client over ``openai.AsyncOpenAI``; see the module docstring.

    Args:
        cfg: endpoint and sampling settings; the API key is read only from the environment
            variable named by ``cfg.api_key_env`` (``"sk-no-key"`` when empty) and never stored.
        cache_path: SQLite response cache file; ``None`` disables caching.
        model_id: identity recorded in rows and fingerprints; default ``cfg.model``, or
            :func:`server.embedded_model_id` for the embedded model.
        base_url: overrides ``cfg.base_url`` (e.g. an :class:`EmbeddedServer` URL).
        backoff_initial_s, backoff_max_s: exponential backoff range for transport retries.
        azure: ``{"api_version", "deployment"}`` to speak Azure OpenAI (``AsyncAzureOpenAI``);
            ``None`` = detect from the URL with :func:`azure_settings`; ``{}`` = never Azure.
        server_watch: for an embedded server, a zero-argument callable returning ``None`` while
            the server process runs and the cause of death once it has exited
            (:meth:`server.EmbeddedServer.death`, :func:`server.detached_watch`). Polled every
            :data:`WATCH_INTERVAL_S` during a batch: a dead server ends the batch at once with
            :class:`server.ServerDied` instead of minutes of connection retries.

    Raises ``ValueError`` for an unknown dialect, a missing endpoint or an unset key variable.
    """

    def __init__(self, cfg: LLMConfig, cache_path: str | None = None, model_id: str | None = None,
                 *, base_url: str | None = None, backoff_initial_s: float = 1.0,
                 backoff_max_s: float = 30.0, azure: dict[str, str] | None = None,
                 server_watch: Callable[[], str | None] | None = None):
        if cfg.structured_output not in DIALECTS:
            raise ValueError(f"llm.structured_output must be one of {DIALECTS}, got {cfg.structured_output!r}")
        self.cfg = cfg
        self.base_url = base_url or cfg.base_url
        if not self.base_url:
            raise ValueError("no LLM endpoint: set llm.base_url or start pipeline.llm.server.EmbeddedServer")
        embedded = not cfg.model or is_embedded_alias(cfg.model)
        if embedded and cfg.concurrency > EMBEDDED_SLOTS:
            cfg = self.cfg = dataclasses.replace(cfg, concurrency=EMBEDDED_SLOTS)  # a second request only queues
        if cfg.max_repairs < 0:  # auto: a greedy small model mostly repeats its mistake (LLMConfig.max_repairs)
            cfg = self.cfg = dataclasses.replace(cfg, max_repairs=0 if embedded and cfg.temperature == 0 else 1)
        self.model = cfg.model or embedded_alias("")
        if model_id is None:
            from pipeline.llm.server import embedded_model_id
            model_id = embedded_model_id(self.model) if embedded else cfg.model
        self.model_id = model_id
        if cfg.mode == "batch" and embedded:
            raise ValueError("llm.mode batch needs an endpoint with the Batch API (llm.base_url and llm.model); "
                             "the embedded server answers online only")
        self._auto = cfg.structured_output == "auto"
        self.dialect = ("json_object" if embedded else "json_schema") if self._auto else cfg.structured_output
        self.embedded = embedded
        self.azure = azure_settings(self.base_url, self.model) if azure is None else (azure or None)
        self._api_key()  # fail early on an unset key variable
        self._cache = ResponseCache(cache_path) if cache_path else None
        self._stats = dict.fromkeys(COUNTERS, 0)
        self._lock = threading.Lock()
        self._backoff = wait_exponential_jitter(multiplier=backoff_initial_s, max=backoff_max_s,
                                                jitter=backoff_initial_s)
        self._validators: dict[str, Any] = {}
        self.server_watch = server_watch
        self.budget = RateBudget(cfg.rpm, cfg.tpm, cfg.concurrency, cfg.max_tokens)

    # ---- counters -------------------------------------------------------------------------
    def bump(self, **delta: float) -> None:
        """Add ``delta`` to the counters (names in :data:`COUNTERS`)."""
        with self._lock:
            for k, v in delta.items():
                self._stats[k] += v

    def stats_snapshot(self) -> dict[str, int]:
        """Cumulative counters (names in :data:`COUNTERS`, see ``types.py``)."""
        with self._lock:
            return dict(self._stats)

    def stats_delta(self, snapshot: dict[str, int] | None) -> dict[str, int]:
        """Counters since ``snapshot`` (``None`` = since the start); ``limit_wait_s`` rounded to ms."""
        now = self.stats_snapshot()
        delta = {k: now[k] - (snapshot or {}).get(k, 0) for k in COUNTERS}
        delta["limit_wait_s"] = round(delta["limit_wait_s"], 3)
        return delta

    # ---- public API -----------------------------------------------------------------------
    def complete_json_many(self, requests: list[JSONRequest], desc: str = "llm") -> list[JSONResult]:
        """Run ``requests`` concurrently (``cfg.concurrency``, at most the embedded server's
        :data:`~pipeline.llm.server.EMBEDDED_SLOTS`); results in the same order.

        Never raises for a bad answer or an unreachable endpoint: those become ``ok=False``
        results. Raises :class:`server.ServerDied` when the watched embedded server process
        exits (``server_watch``), within :data:`WATCH_INTERVAL_S`; raises
        ``jsonschema.SchemaError`` for an invalid request schema (a code bug).
        """
        if not requests:
            return []
        if self.cfg.mode == "batch":
            from pipeline.llm.batch import BatchRunner
            return BatchRunner(self, desc).run(requests)
        coro_fn = lambda: self.acomplete_json_many(requests, desc)  # noqa: E731
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro_fn())
        # Called from inside an event loop (notebook, async task): run on a private loop.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(lambda: asyncio.run(coro_fn())).result()

    def unreachable_after(self) -> int:
        """Connection errors (each after its retries) with no answer yet after which the rest of a
        batch is not sent: ``max(2, llm.concurrency)``. Each remaining request becomes a
        ``connection_error`` result without a call, so an endpoint that refuses every
        connection fails the stage in one retry cycle (~15 s) instead of one per request (the
        18 refused memory requests took 2 min 41 s). A timeout or an HTTP error does not count:
        a slow or overloaded server may recover."""
        return max(2, self.cfg.concurrency)

    async def acomplete_json_many(self, requests: list[JSONRequest], desc: str = "llm") -> list[JSONResult]:
        """Async form of :meth:`complete_json_many`. Stops sending once the endpoint looks
        unreachable (:meth:`unreachable_after`)."""
        for r in requests:
            self._get_validator(r.schema)
        self._raise_if_dead(desc)
        self.budget.start(max(self.prompt_chars(r.messages, r) for r in requests))
        # One client per batch: its connection pool belongs to the running event loop.
        oai = self._open()
        sem = asyncio.Semaphore(max(1, self.cfg.concurrency))
        bar = progress_bar(len(requests), desc, unit="req", mininterval=2.0)  # plain lines in logs
        refused = {"n": 0, "answered": False}  # connection_error results so far; any answer at all

        async def one(req: JSONRequest) -> JSONResult:
            async with sem:
                if refused["n"] >= self.unreachable_after() and not refused["answered"]:
                    res = self.fail(req, "connection_error", "", f"not sent: the endpoint refused the first "
                                    f"{refused['n']} requests of this batch after retries", 0,
                                    {"prompt_tokens": 0, "completion_tokens": 0, "cached_prompt_tokens": 0})
                else:
                    res = await self._complete_one(oai, req)
            refused["answered"] |= res.error not in TRANSPORT_ERRORS
            refused["n"] += res.error == "connection_error"
            bar.update(1)
            return res

        try:
            results = await self._watched(asyncio.gather(*(one(r) for r in requests)), desc)
        finally:
            bar.close()
            await oai.close()
        if self.server_watch is not None and any(not r.ok and r.error in TRANSPORT_ERRORS for r in results):
            await self._await_death(desc)  # failed because the server was dying: say so
        return results

    # ---- embedded server liveness ---------------------------------------------------------
    def _raise_if_dead(self, desc: str) -> None:
        death = self.server_watch() if self.server_watch is not None else None
        if death:
            raise ServerDied(f"[{desc}] {death}")

    async def _await_death(self, desc: str) -> None:
        """Raise :class:`ServerDied` if the server turns out dead within :data:`DEATH_GRACE_S`."""
        deadline = time.monotonic() + DEATH_GRACE_S
        while True:
            self._raise_if_dead(desc)
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(WATCH_INTERVAL_S / 4)

    async def _watched(self, work, desc: str) -> list[JSONResult]:
        """Await ``work``; with a ``server_watch``, cancel it and raise once the server dies."""
        if self.server_watch is None:
            return list(await work)

        async def watch() -> None:
            while True:
                await asyncio.sleep(WATCH_INTERVAL_S)
                self._raise_if_dead(desc)

        watcher = asyncio.ensure_future(watch())
        work = asyncio.ensure_future(work)
        try:
            await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work, watcher):
                task.cancel()
            await asyncio.gather(work, watcher, return_exceptions=True)
        if watcher.done() and not watcher.cancelled() and watcher.exception() is not None:
            raise watcher.exception()
        return list(work.result())

    # ---- one request ----------------------------------------------------------------------
    @property
    def cache(self) -> ResponseCache | None:
        """The response cache (``None`` when caching is off)."""
        return self._cache

    def open_sync(self) -> openai.OpenAI:
        """A synchronous SDK client for the Files and Batches calls of batch mode (``AzureOpenAI``
        for an Azure endpoint); the SDK retries those calls itself, ``llm.max_retries`` times."""
        common = dict(api_key=self._api_key(), timeout=self.cfg.timeout_s, max_retries=self.cfg.max_retries)
        if self.azure is None:
            return openai.OpenAI(base_url=self.base_url, **common)
        return openai.AzureOpenAI(azure_endpoint=self.base_url, api_version=self.azure["api_version"], **common)

    def _open(self) -> openai.AsyncOpenAI:
        """The async SDK client: ``AsyncAzureOpenAI`` for an Azure endpoint, else ``AsyncOpenAI``.

        The SDK's own retries are off (``max_retries=0``): tenacity does them, counted.
        """
        common = dict(api_key=self._api_key(), timeout=self.cfg.timeout_s, max_retries=0)
        if self.azure is None:
            return openai.AsyncOpenAI(base_url=self.base_url, **common)
        return openai.AsyncAzureOpenAI(azure_endpoint=self.base_url, api_version=self.azure["api_version"],
                                       azure_deployment=self.azure["deployment"], **common)

    def _redact(self, text: str) -> str:
        """``text`` with the API key replaced by ``***`` (a server may echo it in an error body)."""
        key = os.environ.get(self.cfg.api_key_env, "") if self.cfg.api_key_env else ""
        return text.replace(key, "***") if key and text else text

    def _accept_redacted(self, req: JSONRequest, raw: str) -> tuple[Any, str]:
        """:meth:`_accept` on the redacted ``raw``; returns ``(value, raw)`` free of the key.

        When the key hid in ``\\u`` escapes of the text (so only the parsed value shows it), the
        raw text is replaced by the redacted value's JSON: no form of the key is kept."""
        raw = self._redact(raw)
        value = self._accept(req, raw)
        clean = self._redact_value(value)
        if clean != value:
            return clean, json.dumps(clean, ensure_ascii=False)
        return value, raw

    def _redact_value(self, value: Any) -> Any:
        """``value`` (parsed JSON) with the key redacted from every string: a ``\\u``-escaped key
        in the raw text survives :meth:`_redact` of the text but not this."""
        if isinstance(value, str):
            return self._redact(value)
        if isinstance(value, list):
            return [self._redact_value(v) for v in value]
        if isinstance(value, dict):
            return {self._redact(k): self._redact_value(v) for k, v in value.items()}
        return value

    def _api_key(self) -> str:
        if not self.cfg.api_key_env:
            return "sk-no-key"
        key = os.environ.get(self.cfg.api_key_env, "")
        if not key:
            raise ValueError(f"llm.api_key_env names {self.cfg.api_key_env!r}, which is unset or empty")
        return key

    def _get_validator(self, schema: dict[str, Any]):
        k = json.dumps(schema, sort_keys=True)
        if k not in self._validators:
            self._validators[k] = _validator(schema)
        return self._validators[k]

    def _accept(self, req: JSONRequest, text: str) -> Any:
        """Extract, validate and check one answer; raises :class:`_Rejected`."""
        try:
            value = extract_json(text)
        except JSONExtractError as e:
            raise _Rejected("not_json", str(e)) from None
        err = _schema_error(self._get_validator(req.schema), value)
        if err:
            raise _Rejected("schema_invalid", err)
        if req.check is not None:
            try:
                err = req.check(value)
            except Exception as e:  # a crashing check must not crash the run
                err = f"{type(e).__name__}: {e}"
            if err:
                raise _Rejected("check_failed", str(err)[:400])
        return value

    # ---- one request: shared by the online loop and batch mode (pipeline.llm.batch) ----------
    def key_of(self, req: JSONRequest) -> str:
        """The cache key of ``req``: model id, its first messages, the schema as sent
        (:meth:`_sent_schema`) and sampling parameters. A cached answer is still checked against
        ``req.schema`` on every lookup."""
        params = {"temperature": self.cfg.temperature, "max_tokens": self.cfg.max_tokens, "seed": self.cfg.seed,
                  **self._sampling(), **(req.sampling or {})}
        return cache_key(self.model_id, req.messages, self._sent_schema(req), params)

    def _sent_schema(self, req: JSONRequest) -> dict[str, Any]:
        """The schema a ``json_schema`` endpoint receives: the stage-wide one with
        ``llm.stable_schema`` (when the request has one), else the request's own."""
        stable = self.cfg.stable_schema and self.dialect == "json_schema" and req.shared_schema
        return req.shared_schema if stable else req.schema

    def _sampling(self) -> dict[str, Any]:
        """Sampling parameters beyond OpenAI's: the embedded model's repeat penalty."""
        return {"repeat_penalty": EMBEDDED_REPEAT_PENALTY} if self.embedded else {}

    def lookup(self, req: JSONRequest) -> tuple[str, JSONResult | None]:
        """``(cache key, the cached result)``; the result is ``None`` on a miss, and when the
        cached answer no longer passes the request's check (the entry is then deleted)."""
        key = self.key_of(req)
        hit = self._cache.get(key) if self._cache is not None else None
        if hit is None:
            return key, None
        try:
            value, raw = self._accept_redacted(req, hit["raw"])  # an entry from before redaction
        except _Rejected:  # the request's check changed since: ask again
            self._cache.delete(key)
            return key, None
        self.bump(cache_hits=1)
        return key, JSONResult(req.key, True, value=value, raw=raw, cached=True, usage=hit["usage"])

    def judge(self, req: JSONRequest, messages: list[dict[str, str]], content: str, finish_reason: str | None,
              attempt: int) -> tuple[str, Any, str, str]:
        """Verdict on one answer ``content`` to ``messages`` (``attempt``: repairs made so far):
        ``("ok", value, raw, "")``, ``("repair", next messages, raw, "")`` (counted in ``repairs``)
        or ``("fail", reason, raw, detail)``. ``raw`` is redacted; a ``length`` finish is never
        accepted nor repaired."""
        raw = self._redact(content or "")  # an endpoint may echo the key: never keep it
        if finish_reason == "length":
            return "fail", "length", raw, f"answer cut at max_tokens={self.cfg.max_tokens}"
        try:
            value, raw = self._accept_redacted(req, raw)
        except _Rejected as rej:
            if attempt >= self.cfg.max_repairs:
                return "fail", rej.reason, raw, rej.detail
            self.bump(repairs=1)
            return "repair", messages + [
                {"role": "assistant", "content": raw},
                {"role": "user", "content": f"Your answer was rejected ({rej.reason}): {rej.detail}\n"
                                            "Reply again with only the corrected JSON, nothing else."}], raw, ""
        return "ok", value, raw, ""

    def store(self, key: str, req: JSONRequest, value: Any, raw: str, calls: int, usage: dict[str, int]) -> JSONResult:
        """Cache an accepted answer under ``key`` and return its result."""
        if self._cache is not None:
            self._cache.put(key, self.model_id, value, raw, usage)
        return JSONResult(req.key, True, value=value, raw=raw, attempts=calls, usage=usage)

    def count_usage(self, usage: dict[str, int], reported: Any) -> None:
        """Add an answer's ``usage`` (an SDK object or its dict) to ``usage`` and the counters:
        prompt, completion and cached prompt tokens (``prompt_tokens_details.cached_tokens``,
        0 when the endpoint does not report it)."""
        if reported is None:
            return
        get = reported.get if isinstance(reported, dict) else lambda k, d=None: getattr(reported, k, d)
        details = get("prompt_tokens_details")
        cached = (details.get("cached_tokens") if isinstance(details, dict)
                  else getattr(details, "cached_tokens", None)) if details is not None else None
        add = {"prompt_tokens": get("prompt_tokens") or 0, "completion_tokens": get("completion_tokens") or 0,
               "cached_prompt_tokens": cached or 0}
        for k, v in add.items():
            usage[k] = usage.get(k, 0) + v
        self.bump(**add)

    async def _complete_one(self, oai: openai.AsyncOpenAI, req: JSONRequest) -> JSONResult:
        key, hit = self.lookup(req)
        if hit is not None:
            return hit
        messages = list(req.messages)
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_prompt_tokens": 0}
        counter = {"calls": 0}
        raw = ""
        for attempt in range(self.cfg.max_repairs + 1):
            try:
                resp = await self._chat(oai, messages, req, counter)
            except openai.APITimeoutError as e:
                return self.fail(req, "timeout", raw, f"{type(e).__name__}: {e}", counter["calls"], usage)
            except openai.APIConnectionError as e:
                return self.fail(req, "connection_error", raw, f"{type(e).__name__}: {e}", counter["calls"], usage)
            except openai.APIStatusError as e:  # redact, then cut: a cut key would escape redaction
                return self.fail(req, "http_error", raw, f"HTTP {e.status_code}: {self._redact(str(e))[:300]}",
                                 counter["calls"], usage)
            except _BadBody as e:
                return self.fail(req, "http_error", raw, str(e), counter["calls"], usage)
            self.count_usage(usage, resp.usage)
            choice = resp.choices[0]
            verdict, got, raw, detail = self.judge(req, messages, choice.message.content, choice.finish_reason, attempt)
            if verdict == "repair":
                messages = got
                continue
            if verdict == "fail":
                return self.fail(req, got, raw, detail, counter["calls"], usage)
            return self.store(key, req, got, raw, counter["calls"], usage)
        raise AssertionError("unreachable")

    def fail(self, req: JSONRequest, reason: str, raw: str, detail: str, calls: int,
             usage: dict[str, int]) -> JSONResult:
        """A failed result (counted in ``failures``), raw output and detail redacted."""
        self.bump(failures=1)
        return JSONResult(req.key, False, raw=self._redact(raw), error=reason, detail=self._redact(detail),
                          attempts=calls, usage=usage)

    # ---- transport ------------------------------------------------------------------------
    def _response_format(self, req: JSONRequest) -> dict[str, Any] | None:
        if self.dialect == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": req.schema_name, "schema": self._sent_schema(req)}}
        if self.dialect == "json_object":  # llama.cpp grammar: bound every string (schemas.py)
            return {"type": "json_object", "schema": grammar_schema(req.schema)}
        return None

    def _is_dialect_rejection(self, exc: BaseException) -> bool:
        return (self._auto and self.dialect == "json_schema" and isinstance(exc, openai.APIStatusError)
                and exc.status_code >= 400 and _mentions_response_format(exc))

    def _retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, (openai.APIConnectionError, _BadBody)):  # includes APITimeoutError
            return True
        if isinstance(exc, openai.APIStatusError) and not _mentions_response_format(exc):
            # a response_format complaint is deterministic: retrying cannot help
            return exc.status_code in (408, 409, 429) or exc.status_code >= 500
        return False

    def _wait(self, retry_state) -> float:
        exc = retry_state.outcome.exception()
        after = _retry_after_s(exc)
        wait = min(after, MAX_RETRY_AFTER_S) if after is not None else self._backoff(retry_state)
        if isinstance(exc, openai.RateLimitError):
            self.bump(limit_wait_s=wait)  # a 429's back-off is time spent waiting on the limits
        return wait

    async def _chat(self, oai: openai.AsyncOpenAI, messages, req: JSONRequest, counter: dict):
        """One chat completion with transport retries; may switch the dialect once (auto)."""
        while True:
            try:
                return await self._chat_retrying(oai, messages, req, counter)
            except openai.APIStatusError as e:
                if not self._is_dialect_rejection(e):
                    raise
                self.dialect = "json_object"  # remembered for every later call of this client

    def request_body(self, req: JSONRequest, messages: list[dict[str, str]]) -> dict[str, Any]:
        """The chat-completions body for ``messages`` of ``req`` in the current dialect: model,
        messages (with the schema appended for dialect ``none``), sampling parameters and
        ``response_format``. The same body goes online and into a batch file."""
        sent = schema_hint(messages, req.schema) if self.dialect == "none" else messages
        body: dict[str, Any] = dict(model=self.model, messages=sent, temperature=self.cfg.temperature,
                                    max_tokens=self.cfg.max_tokens, seed=self.cfg.seed, **self._sampling())
        body.update(req.sampling or {})  # a sampled retry's own temperature and seed
        fmt = self._response_format(req)
        if fmt is not None:
            body["response_format"] = fmt
        return body

    def prompt_chars(self, messages: list[dict[str, str]], req: JSONRequest) -> int:
        """Characters of a call's prompt: the messages' contents and the response format sent."""
        fmt = self._response_format(req)
        return sum(len(m.get("content") or "") for m in messages) + (len(json.dumps(fmt)) if fmt else 0)

    async def _chat_retrying(self, oai, messages, req: JSONRequest, counter: dict):
        retrying = AsyncRetrying(stop=stop_after_attempt(self.cfg.max_retries + 1), wait=self._wait,
                                 retry=retry_if_exception(self._retryable), reraise=True,
                                 before_sleep=lambda _s: self.bump(retries=1))
        async for attempt in retrying:
            with attempt:
                body = self.request_body(req, messages)
                chars = self.prompt_chars(body["messages"], req)
                self.bump(limit_wait_s=await self.budget.admit(chars))
                self.bump(calls=1)
                counter["calls"] += 1
                try:
                    return await self._call(oai, body, chars)
                finally:
                    await self.budget.release()

    async def _call(self, oai, body: dict[str, Any], chars: int):
        """One HTTP call; feeds the answer's ``x-ratelimit-*`` headers (or the 429) to the budget."""
        try:
            # llama.cpp's own sampling fields travel as extra JSON fields (the SDK has no argument for them)
            extra = {k: v for k, v in body.items() if k == "repeat_penalty"}
            known = {k: v for k, v in body.items() if k not in extra}
            raw = await oai.chat.completions.with_raw_response.create(**known, extra_body=extra or None)
            resp = raw.parse()
        except json.JSONDecodeError as e:  # the SDK parses a JSON-typed 200 body itself
            raise self._bad_body("not JSON", e.doc) from None
        except openai.RateLimitError as e:
            self.bump(rate_limited=1)
            self.budget.throttled(e.response.headers, _retry_after_s(e))
            raise
        if isinstance(resp, str):  # a 200 that is not JSON-typed: the SDK returns its text
            raise self._bad_body("not JSON", resp)
        if not getattr(resp, "choices", None) or getattr(resp.choices[0], "message", None) is None:
            raise self._bad_body("no choices", resp.model_dump_json() if hasattr(resp, "model_dump_json")
                                 else str(resp))
        self.budget.observe(raw.headers, chars, getattr(resp.usage, "prompt_tokens", 0) or 0)
        return resp

    def _bad_body(self, why: str, body: str) -> _BadBody:
        """The error for a 2xx body that is not a chat completion, naming the endpoint; the
        body is redacted, then cut (a cut key would escape redaction)."""
        body = self._redact(body or "")
        return _BadBody(f"HTTP 200 from {self.base_url.rstrip('/')}/chat/completions is not a chat completion "
                        f"({why}): {body[:200]!r}")

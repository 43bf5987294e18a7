"""LLMClient: structured JSON calls to any OpenAI-compatible endpoint (contract: ``types.py``).

Per request (DESIGN §4; spec D-M1, D-M2 fixes):

1. cache lookup (:mod:`.cache`) - a hit re-validates and costs no call;
2. one chat call, with transport retries by tenacity (exponential backoff + jitter, ``Retry-After``
   honoured) on 429, 408/409, 5xx, timeouts and connection errors, at most ``cfg.max_retries``;
3. ``finish_reason == "length"`` ends the request as ``length`` (a truncated answer is never data);
4. extraction (:mod:`.jsonparse`), jsonschema validation against the request's schema (the file
   form, on every dialect), then the request's ``check``; an error is
   fed back to the model in up to ``cfg.max_repairs`` repair calls;
5. success is cached; anything else returns ``JSONResult(ok=False, error=<reason>, raw, detail)``.

Error reasons: ``length``, ``not_json``, ``schema_invalid``, ``check_failed``, ``http_error``,
``timeout``, ``connection_error``.

Endpoints (docs/llm_endpoints.md): any OpenAI-compatible URL through ``openai.AsyncOpenAI``; a
classic Azure OpenAI URL through ``openai.AsyncAzureOpenAI`` (:func:`azure_settings`). The API key
is read from the environment variable named by ``llm.api_key_env`` at each batch, never stored,
and redacted (``***``) from every quarantined detail and raw text.

Structured-output dialects (``cfg.structured_output``): ``json_schema`` (OpenAI, vLLM),
``json_object`` = ``{"type": "json_object", "schema": grammar_schema(S)}`` (llama.cpp's Python
server, which answers HTTP 500 to ``json_schema``; measured, DESIGN §8; the grammar form bounds
every string, :mod:`.schemas`), ``none`` (no ``response_format``; the schema is
appended to the first user message, :func:`schema_hint`). ``auto`` picks ``json_object`` for the
embedded model and ``json_schema`` otherwise, and switches once, for the client's lifetime, to
``json_object`` when the endpoint rejects ``response_format``.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import json
import os
import threading
import time
from typing import Any

import openai
from jsonschema import exceptions as js_exceptions
from jsonschema import validators as js_validators
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from ..config import LLMConfig
from ..progress import bar as progress_bar
from .cache import ResponseCache, cache_key
from .jsonparse import JSONExtractError, extract_json
from .endpoints import azure_settings, schema_hint  # noqa: F401  (re-exported)
from .schemas import grammar_schema
from .server import EMBEDDED_MODEL_ALIAS
from .types import JSONRequest, JSONResult

COUNTERS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "retries", "repairs", "failures")
DIALECTS = ("auto", "json_schema", "json_object", "none")
MAX_RETRY_AFTER_S = 120.0  # never sleep longer than this on a server's Retry-After


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

    Raises ``ValueError`` for an unknown dialect, a missing endpoint or an unset key variable.
    """

    def __init__(self, cfg: LLMConfig, cache_path: str | None = None, model_id: str | None = None,
                 *, base_url: str | None = None, backoff_initial_s: float = 1.0,
                 backoff_max_s: float = 30.0, azure: dict[str, str] | None = None):
        if cfg.structured_output not in DIALECTS:
            raise ValueError(f"llm.structured_output must be one of {DIALECTS}, got {cfg.structured_output!r}")
        self.cfg = cfg
        self.base_url = base_url or cfg.base_url
        if not self.base_url:
            raise ValueError("no LLM endpoint: set llm.base_url or start pipeline.llm.server.EmbeddedServer")
        embedded = cfg.model in ("", EMBEDDED_MODEL_ALIAS)
        self.model = cfg.model or EMBEDDED_MODEL_ALIAS
        if model_id is None:
            from .server import embedded_model_id
            model_id = embedded_model_id() if embedded else cfg.model
        self.model_id = model_id
        self._auto = cfg.structured_output == "auto"
        self.dialect = ("json_object" if embedded else "json_schema") if self._auto else cfg.structured_output
        self.azure = azure_settings(self.base_url, self.model) if azure is None else (azure or None)
        self._api_key()  # fail early on an unset key variable
        self._cache = ResponseCache(cache_path) if cache_path else None
        self._stats = dict.fromkeys(COUNTERS, 0)
        self._lock = threading.Lock()
        self._backoff = wait_exponential_jitter(multiplier=backoff_initial_s, max=backoff_max_s,
                                                jitter=backoff_initial_s)
        self._validators: dict[str, Any] = {}

    # ---- counters -------------------------------------------------------------------------
    def _bump(self, **delta: int) -> None:
        with self._lock:
            for k, v in delta.items():
                self._stats[k] += v

    def stats_snapshot(self) -> dict[str, int]:
        """Cumulative counters (names in :data:`COUNTERS`, see ``types.py``)."""
        with self._lock:
            return dict(self._stats)

    def stats_delta(self, snapshot: dict[str, int] | None) -> dict[str, int]:
        """Counters since ``snapshot`` (``None`` = since the start)."""
        now = self.stats_snapshot()
        return {k: now[k] - (snapshot or {}).get(k, 0) for k in COUNTERS}

    # ---- public API -----------------------------------------------------------------------
    def complete_json_many(self, requests: list[JSONRequest], desc: str = "llm") -> list[JSONResult]:
        """Run ``requests`` concurrently (``cfg.concurrency``); results in the same order.

        Never raises for a bad answer or a dead endpoint: those become ``ok=False`` results.
        Raises ``jsonschema.SchemaError`` for an invalid request schema (a code bug).
        """
        if not requests:
            return []
        coro_fn = lambda: self.acomplete_json_many(requests, desc)  # noqa: E731
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro_fn())
        # Called from inside an event loop (notebook, async task): run on a private loop.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(lambda: asyncio.run(coro_fn())).result()

    async def acomplete_json_many(self, requests: list[JSONRequest], desc: str = "llm") -> list[JSONResult]:
        """Async form of :meth:`complete_json_many`."""
        for r in requests:
            self._get_validator(r.schema)
        # One client per batch: its connection pool belongs to the running event loop.
        oai = self._open()
        sem = asyncio.Semaphore(max(1, self.cfg.concurrency))
        bar = progress_bar(len(requests), desc, unit="req", mininterval=2.0)  # plain lines in logs

        async def one(req: JSONRequest) -> JSONResult:
            async with sem:
                res = await self._complete_one(oai, req)
            bar.update(1)
            return res

        try:
            return list(await asyncio.gather(*(one(r) for r in requests)))
        finally:
            bar.close()
            await oai.close()

    # ---- one request ----------------------------------------------------------------------
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

    async def _complete_one(self, oai: openai.AsyncOpenAI, req: JSONRequest) -> JSONResult:
        params = {"temperature": self.cfg.temperature, "max_tokens": self.cfg.max_tokens, "seed": self.cfg.seed}
        key = cache_key(self.model_id, req.messages, req.schema, params)
        if self._cache is not None:
            hit = self._cache.get(key)
            if hit is not None:
                try:
                    value = self._accept(req, hit["raw"])
                    self._bump(cache_hits=1)
                    return JSONResult(req.key, True, value=value, raw=hit["raw"], cached=True, usage=hit["usage"])
                except _Rejected:  # the request's check changed since: ask again
                    self._cache.delete(key)
        messages = list(req.messages)
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        counter = {"calls": 0}
        raw = ""
        for attempt in range(self.cfg.max_repairs + 1):
            try:
                resp = await self._chat(oai, messages, req, counter)
            except openai.APITimeoutError as e:
                return self._fail(req, "timeout", raw, f"{type(e).__name__}: {e}", counter, usage)
            except openai.APIConnectionError as e:
                return self._fail(req, "connection_error", raw, f"{type(e).__name__}: {e}", counter, usage)
            except openai.APIStatusError as e:
                return self._fail(req, "http_error", raw, f"HTTP {e.status_code}: {str(e)[:300]}", counter, usage)
            if resp.usage is not None:
                pt, ct = resp.usage.prompt_tokens or 0, resp.usage.completion_tokens or 0
                usage["prompt_tokens"] += pt
                usage["completion_tokens"] += ct
                self._bump(prompt_tokens=pt, completion_tokens=ct)
            choice = resp.choices[0]
            raw = choice.message.content or ""
            if choice.finish_reason == "length":
                return self._fail(req, "length", raw, f"answer cut at max_tokens={self.cfg.max_tokens}", counter, usage)
            try:
                value = self._accept(req, raw)
            except _Rejected as rej:
                if attempt == self.cfg.max_repairs:
                    return self._fail(req, rej.reason, raw, rej.detail, counter, usage)
                self._bump(repairs=1)
                messages = messages + [
                    {"role": "assistant", "content": raw},
                    {"role": "user", "content": f"Your answer was rejected ({rej.reason}): {rej.detail}\n"
                                                "Reply again with only the corrected JSON, nothing else."}]
                continue
            if self._cache is not None:
                self._cache.put(key, self.model_id, value, raw, usage)
            return JSONResult(req.key, True, value=value, raw=raw, attempts=counter["calls"], usage=usage)
        raise AssertionError("unreachable")

    def _fail(self, req, reason, raw, detail, counter, usage) -> JSONResult:
        self._bump(failures=1)
        return JSONResult(req.key, False, raw=self._redact(raw), error=reason, detail=self._redact(detail),
                          attempts=counter["calls"], usage=usage)

    # ---- transport ------------------------------------------------------------------------
    def _response_format(self, req: JSONRequest) -> dict[str, Any] | None:
        if self.dialect == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": req.schema_name, "schema": req.schema}}
        if self.dialect == "json_object":  # llama.cpp grammar: bound every string (schemas.py)
            return {"type": "json_object", "schema": grammar_schema(req.schema)}
        return None

    def _is_dialect_rejection(self, exc: BaseException) -> bool:
        return (self._auto and self.dialect == "json_schema" and isinstance(exc, openai.APIStatusError)
                and exc.status_code >= 400 and _mentions_response_format(exc))

    def _retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
            return True
        if isinstance(exc, openai.APIStatusError) and not _mentions_response_format(exc):
            # a response_format complaint is deterministic: retrying cannot help
            return exc.status_code in (408, 409, 429) or exc.status_code >= 500
        return False

    def _wait(self, retry_state) -> float:
        after = _retry_after_s(retry_state.outcome.exception())
        if after is not None:
            return min(after, MAX_RETRY_AFTER_S)
        return self._backoff(retry_state)

    async def _chat(self, oai: openai.AsyncOpenAI, messages, req: JSONRequest, counter: dict):
        """One chat completion with transport retries; may switch the dialect once (auto)."""
        while True:
            try:
                return await self._chat_retrying(oai, messages, req, counter)
            except openai.APIStatusError as e:
                if not self._is_dialect_rejection(e):
                    raise
                self.dialect = "json_object"  # remembered for every later call of this client

    async def _chat_retrying(self, oai, messages, req: JSONRequest, counter: dict):
        retrying = AsyncRetrying(stop=stop_after_attempt(self.cfg.max_retries + 1), wait=self._wait,
                                 retry=retry_if_exception(self._retryable), reraise=True,
                                 before_sleep=lambda _s: self._bump(retries=1))
        async for attempt in retrying:
            with attempt:
                sent = schema_hint(messages, req.schema) if self.dialect == "none" else messages
                kwargs: dict[str, Any] = dict(model=self.model, messages=sent, temperature=self.cfg.temperature,
                                              max_tokens=self.cfg.max_tokens, seed=self.cfg.seed)
                fmt = self._response_format(req)
                if fmt is not None:
                    kwargs["response_format"] = fmt
                self._bump(calls=1)
                counter["calls"] += 1
                return await oai.chat.completions.create(**kwargs)

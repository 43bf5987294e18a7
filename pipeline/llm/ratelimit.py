"""Rate-limit budgets: run at an endpoint's RPM/TPM limits without running into them.

A production key has a requests-per-minute (RPM) and a tokens-per-minute (TPM) limit. OpenAI
(and the gateways that copy it) state them on every answer::

    x-ratelimit-limit-requests: 500         x-ratelimit-limit-tokens: 200000
    x-ratelimit-remaining-requests: 499     x-ratelimit-remaining-tokens: 198232
    x-ratelimit-reset-requests: 120ms       x-ratelimit-reset-tokens: 530ms

and count a call against TPM at admission as its prompt tokens plus ``max_tokens``. What
:class:`RateBudget` does with that, per client:

* two leaky buckets (``aiolimiter.AsyncLimiter``): one request per call from the request bucket,
  ``estimate(prompt chars)`` = prompt tokens (characters x a tokens-per-character ratio learned
  from the answers' ``usage``, first 1/3) + ``max_tokens`` from the token bucket. Limits come from
  ``llm.rpm`` / ``llm.tpm``, else from the ``x-ratelimit-limit-*`` headers of the first answer
  (no header, no limit: the client behaves as before). The buckets drain at :data:`SAFETY` (95 %)
  of the limits and hold :data:`BURST_S` seconds of that rate (at least one call), so the client
  never bursts above what an endpoint that enforces its per-minute limit over shorter windows
  would accept;
* a window of calls in flight between 1 and ``llm.concurrency``: halved on every 429, with every
  call held back until the answer's ``retry-after`` has passed; held back also while the endpoint
  reports fewer ``x-ratelimit-remaining-*`` than the next call needs (until that many have come
  back at the stated rate); widened by one on each answer that shows enough room (AIMD, as TCP
  adapts to congestion);
* the time calls spent held back, returned by :meth:`RateBudget.admit` for the client's
  ``limit_wait_s`` counter.
"""
from __future__ import annotations

import asyncio
import math
import re
from typing import Any, Mapping

from aiolimiter import AsyncLimiter

BURST_S = 1.0  # a bucket holds this many seconds of its rate: no burst above the per-second rate
#: The buckets run at this share of the stated limits. At exactly 100 % the endpoint's own bucket
#: never refills, and a few ms of jitter between admitting a call here and its arrival there give
#: a 429 every few calls (measured: 1 call in 4 against bench/stub_endpoint.py); 5 % below, its
#: bucket refills enough to absorb the jitter.
SAFETY = 0.95
#: Tokens per character before any answer says otherwise: 1/3, above English BPE's ~1/4, so the
#: first calls are overestimated (a little throughput lost) rather than underestimated (429s).
FIRST_TOKENS_PER_CHAR = 1 / 3
LEARN_WEIGHT = 0.2  # weight of each new answer in the learned tokens-per-character ratio
MIN_PAUSE_S, MAX_PAUSE_S = 0.05, 120.0  # bounds of one hold-back after a 429 or a low 'remaining'
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | None) -> float | None:
    """Seconds of an ``x-ratelimit-reset-*`` value (``"1s"``, ``"6m0s"``, ``"20ms"``, ``"1.5s"``,
    or a bare number of seconds); ``None`` when absent or unreadable."""
    if not text:
        return None
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def _int(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    try:
        return int(float(value)) if value not in (None, "") else None
    except ValueError:
        return None


def limit_headers(headers: Mapping[str, str] | None) -> dict[str, Any]:
    """The ``x-ratelimit-*`` facts of an answer's headers: ``limit_requests``, ``limit_tokens``,
    ``remaining_requests``, ``remaining_tokens`` (ints) and ``reset_requests``, ``reset_tokens``
    (seconds); a missing or unreadable header is ``None``."""
    h = {k.lower(): v for k, v in (headers or {}).items()}
    out: dict[str, Any] = {}
    for what in ("requests", "tokens"):
        out[f"limit_{what}"] = _int(h, f"x-ratelimit-limit-{what}")
        out[f"remaining_{what}"] = _int(h, f"x-ratelimit-remaining-{what}")
        out[f"reset_{what}"] = parse_duration(h.get(f"x-ratelimit-reset-{what}"))
    return out


class RateBudget:
    """The RPM/TPM budget and the in-flight window of one client (module docstring).

    Args:
        rpm, tpm: the limits per minute; 0 = learn them from the endpoint's headers.
        concurrency: the most calls in flight (``llm.concurrency``); the window starts there.
        max_tokens: ``llm.max_tokens``, added to each call's prompt estimate.

    Learned limits and the tokens-per-character ratio last as long as the budget; the buckets and
    the window belong to one event loop: call :meth:`start` at the start of each batch, in its loop.
    """

    def __init__(self, rpm: int, tpm: int, concurrency: int, max_tokens: int):
        self.rpm, self.tpm = rpm, tpm
        self.max_width = max(1, concurrency)
        self.max_tokens = max_tokens
        self.tokens_per_char = FIRST_TOKENS_PER_CHAR
        self.width = self.max_width
        self._need = max_tokens
        self._requests: AsyncLimiter | None = None
        self._tokens: AsyncLimiter | None = None
        self._cond: asyncio.Condition | None = None
        self._in_flight = 0
        self._paused_until = 0.0

    # ---- per batch ------------------------------------------------------------------------
    def start(self, largest_prompt_chars: int) -> None:
        """New buckets and window for a batch run in the current event loop; the token bucket
        holds at least the largest call of the batch (``largest_prompt_chars`` of prompt)."""
        self._need = self.estimate(largest_prompt_chars)
        self._cond = asyncio.Condition()
        self._in_flight, self._paused_until = 0, 0.0
        self._requests = self._bucket(self.rpm, 1) if self.rpm else None
        self._tokens = self._bucket(self.tpm, self._need) if self.tpm else None

    @staticmethod
    def _bucket(per_minute: int, at_least: float) -> AsyncLimiter:
        rate = per_minute * SAFETY / 60.0
        capacity = max(rate * BURST_S, at_least)
        return AsyncLimiter(capacity, capacity / rate)  # drains at `rate` per second

    def estimate(self, prompt_chars: int) -> int:
        """Tokens a call counts against TPM: its prompt (``prompt_chars`` x the learned ratio,
        rounded up) plus ``max_tokens``."""
        return math.ceil(prompt_chars * self.tokens_per_char) + self.max_tokens

    @property
    def limited(self) -> bool:
        """True once a request or token limit is known (configured or learned)."""
        return bool(self.rpm or self.tpm)

    # ---- per call -------------------------------------------------------------------------
    async def admit(self, prompt_chars: int) -> float:
        """Wait until a call with ``prompt_chars`` characters of prompt may go: a place in the
        window, no hold-back, a request and its :meth:`estimate` from the buckets (estimated then,
        with the ratio learned while it waited). Returns the seconds waited. Pair with
        :meth:`release` when the call has its answer."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        async with self._cond:
            while self._in_flight >= self.width or loop.time() < self._paused_until:
                hold = self._paused_until - loop.time()
                try:
                    await asyncio.wait_for(self._cond.wait(), timeout=hold if hold > 0 else None)
                except asyncio.TimeoutError:
                    pass
            self._in_flight += 1
        if self._requests is not None:
            await self._requests.acquire(1)
        left = self.estimate(prompt_chars)
        while self._tokens is not None and left > 0:  # a call larger than the bucket takes it in parts
            part = min(left, self._tokens.max_rate)
            await self._tokens.acquire(part)
            left -= part
        return loop.time() - t0

    async def release(self) -> None:
        """A call admitted by :meth:`admit` has finished (answer, error or timeout)."""
        async with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def observe(self, headers: Mapping[str, str] | None, prompt_chars: int = 0, prompt_tokens: int = 0) -> None:
        """Learn from a 2xx answer: limits not configured, the tokens-per-character ratio (from
        ``usage.prompt_tokens`` over the characters sent), and whether the endpoint has room for
        the next call (else hold calls back until it has; if it has, widen the window by one)."""
        if prompt_chars > 0 and prompt_tokens > 0:
            self.tokens_per_char += LEARN_WEIGHT * (prompt_tokens / prompt_chars - self.tokens_per_char)
        facts = limit_headers(headers)
        self._learn(facts)
        hold = self._shortfall(facts)
        if hold > 0:
            self._hold(hold)
        elif self.width < self.max_width:
            self.width += 1

    def throttled(self, headers: Mapping[str, str] | None, retry_after_s: float | None) -> None:
        """A 429: halve the window and hold every call back for ``retry_after_s`` (else the
        reset the headers state, else the time the shortfall takes to refill, at least
        :data:`MIN_PAUSE_S`)."""
        facts = limit_headers(headers)
        self._learn(facts)
        self.width = max(1, self.width // 2)
        hold = retry_after_s if retry_after_s is not None else self._shortfall(facts)
        if not hold:
            hold = max(facts["reset_requests"] or 0.0, facts["reset_tokens"] or 0.0)
        self._hold(max(hold, MIN_PAUSE_S))

    def _learn(self, facts: dict[str, Any]) -> None:
        if not self.rpm and facts["limit_requests"]:
            self.rpm = facts["limit_requests"]
            if self._cond is not None:
                self._requests = self._bucket(self.rpm, 1)
        if not self.tpm and facts["limit_tokens"]:
            self.tpm = facts["limit_tokens"]
            if self._cond is not None:
                self._tokens = self._bucket(self.tpm, self._need)

    def _shortfall(self, facts: dict[str, Any]) -> float:
        """Seconds until the endpoint has room for one more call of the batch's largest size,
        from its ``remaining`` counts and the limit rates; 0 when it has room (or says nothing)."""
        waits = [0.0]
        for remaining, need, limit, reset in ((facts["remaining_requests"], 1, self.rpm, facts["reset_requests"]),
                                              (facts["remaining_tokens"], self._need, self.tpm, facts["reset_tokens"])):
            if remaining is None or remaining >= need:
                continue
            waits.append((need - remaining) / (limit / 60.0) if limit else (reset or MIN_PAUSE_S))
        return max(waits)

    def _hold(self, seconds: float) -> None:
        if self._cond is None:
            return
        until = asyncio.get_running_loop().time() + min(seconds, MAX_PAUSE_S)
        self._paused_until = max(self._paused_until, until)

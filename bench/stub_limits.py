"""What a hosted endpoint counts, for the loopback stub (``bench/stub_endpoint.py``): RPM/TPM
limits with the ``x-ratelimit-*`` headers, and the prompt tokens it bills as cached.

* :func:`prompt_tokens`: the stub's tokenizer (:func:`pieces`: word pieces of at most 6
  characters and punctuation marks, each with the space before it, as BPE tokenizers merge it;
  other runs of white space one token: 3.4 characters per token on this README, about 4 on plain
  English) over the messages in order (``role``, newline, ``content``, newline), with the JSON
  Schema of ``response_format``. OpenAI's prompt-caching guide says a structured-output schema
  (``json_schema``) "serves as a prefix to the system message", so that schema comes first: a
  schema that differs between calls leaves no shared prefix. llama.cpp's ``json_object`` schema is
  applied while sampling, not read as prompt text; it is counted last, where it cannot break a
  shared prefix of messages.
* :class:`RateLimits`: a token bucket for requests and one for tokens, each refilled at its
  per-minute limit / 60 per second and holding ``burst_s`` seconds of it (OpenAI: limits "may be
  quantized, meaning they are enforced over shorter periods of time"). A call is admitted when both
  have room for 1 request and its prompt tokens + ``max_tokens`` (what OpenAI counts against TPM),
  else it gets a 429 with ``retry-after-ms``. Every answer carries ``x-ratelimit-limit-*`` (per
  minute), ``-remaining-*`` (what the bucket holds now) and ``-reset-*`` (time until it is full).
* :class:`PrefixCache`: OpenAI's prompt caching as documented: prompts of at least ``min_tokens``
  (1024) tokens are cached in blocks of ``block_tokens`` (128); a call's ``cached_tokens`` is the
  longest run of whole blocks from its start that an earlier call's prompt began with.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from typing import Any

_PIECE = re.compile(r" ?\w{1,6}| ?[^\w\s]|\s+")


def pieces(text: str) -> list[str]:
    """The stub's tokens of ``text`` (module docstring)."""
    return _PIECE.findall(text)


def prompt_text_pieces(body: dict[str, Any]) -> list[str]:
    """The stub's tokens of a chat-completions ``body``'s prompt (module docstring)."""
    text = "".join(f"{m.get('role', '')}\n{m.get('content') or ''}\n" for m in body.get("messages") or [])
    fmt = body.get("response_format") or {}
    prefix = (fmt.get("json_schema") or {}).get("schema")  # OpenAI: a prefix of the system message
    if prefix:
        text = json.dumps(prefix, sort_keys=True) + "\n" + text
    elif fmt.get("schema"):  # llama.cpp's grammar schema: not prompt text
        text += json.dumps(fmt["schema"], sort_keys=True)
    return pieces(text)


def prompt_tokens(body: dict[str, Any]) -> int:
    """Prompt tokens of ``body`` as the stub counts and bills them."""
    return len(prompt_text_pieces(body))


def tpm_cost(body: dict[str, Any]) -> int:
    """Tokens a call counts against TPM at admission: prompt tokens + ``max_tokens``."""
    return prompt_tokens(body) + int(body.get("max_tokens") or 0)


def _duration(seconds: float) -> str:
    """``x-ratelimit-reset-*`` form: ``"20ms"``, ``"1.5s"``, ``"6m0s"``."""
    if seconds < 1:
        return f"{max(0, int(seconds * 1000))}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    return f"{int(seconds // 60)}m{int(seconds % 60)}s"


class _Bucket:
    def __init__(self, per_minute: int, burst_s: float):
        self.rate = per_minute / 60.0
        self.capacity = max(self.rate * burst_s, 1.0)
        self.level = self.capacity
        self.stamp = time.monotonic()

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_for(self, amount: float) -> float:
        """Seconds until the bucket holds ``amount`` (0 when it does now)."""
        return max(0.0, (min(amount, self.capacity) - self.level) / self.rate)


class RateLimits:
    """RPM/TPM enforcement of one API key (module docstring); thread-safe. ``rpm``/``tpm`` 0 =
    that limit is off (no headers for it either)."""

    def __init__(self, rpm: int = 0, tpm: int = 0, burst_s: float = 60.0):
        self.rpm, self.tpm = rpm, tpm
        self._req = _Bucket(rpm, burst_s) if rpm else None
        self._tok = _Bucket(tpm, burst_s) if tpm else None
        self._lock = threading.Lock()

    def admit(self, cost: int) -> tuple[bool, dict[str, str]]:
        """``(admitted, headers)`` for a call counting ``cost`` tokens; an admitted call is charged."""
        with self._lock:
            now = time.monotonic()
            buckets = [(b, n) for b, n in ((self._req, 1), (self._tok, cost)) if b is not None]
            for b, _ in buckets:
                b.refill(now)
            wait = max([b.wait_for(n) for b, n in buckets] or [0.0])
            if wait == 0.0:
                for b, n in buckets:
                    b.level -= min(n, b.capacity)
            headers = self._headers()
        if wait > 0:
            headers["retry-after-ms"] = str(max(1, int(wait * 1000 + 0.999)))
        return wait == 0.0, headers

    def _headers(self) -> dict[str, str]:
        out = {}
        for name, bucket, limit in (("requests", self._req, self.rpm), ("tokens", self._tok, self.tpm)):
            if bucket is None:
                continue
            out[f"x-ratelimit-limit-{name}"] = str(limit)
            out[f"x-ratelimit-remaining-{name}"] = str(int(bucket.level))
            out[f"x-ratelimit-reset-{name}"] = _duration((bucket.capacity - bucket.level) / bucket.rate)
        return out


class PrefixCache:
    """Which leading prompt tokens an endpoint with prompt caching bills as cached (module
    docstring); thread-safe. Entries never expire (a run's calls come minutes apart at most)."""

    def __init__(self, block_tokens: int = 128, min_tokens: int = 1024):
        self.block, self.min_tokens = block_tokens, min_tokens
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def cached_tokens(self, pieces: list[str]) -> int:
        """Cached tokens of a prompt of ``pieces``; the prompt's own blocks are remembered."""
        if len(pieces) < self.min_tokens:
            return 0
        digest, chain = hashlib.sha256(), []
        for start in range(0, len(pieces) - self.block + 1, self.block):
            digest.update("\x00".join(pieces[start:start + self.block]).encode("utf-8"))
            chain.append(digest.copy().hexdigest())
        with self._lock:
            hits = 0
            for h in chain:
                if h not in self._seen:
                    break
                hits += 1
            self._seen.update(chain)
        return hits * self.block

"""Strict extraction of one JSON value from a model's text answer.

Rule (D-M1 fix), tried in order
on the text with every ``<think>...</think>`` block removed:

1. ``whole``: the whole (stripped) text is one JSON value;
2. ``fenced``: the first fenced block labelled ``json`` (else the first unlabelled fence) parses;
3. ``scan``: the FIRST balanced JSON object or array found scanning left to right.

The reference instead takes the greedy span from the first ``{`` to the last ``}``, which breaks
on text holding two JSON values (D-M1, verified). One repair, ``trailing_comma``, removes commas
that directly precede ``}`` or ``]`` outside strings (a common small-model slip; it never changes
valid JSON): steps 1-2 run on the text as written, then on the repaired text, and step 3 scans the
repaired text, so an outer object with a trailing comma is not lost to an inner object that
decodes on its own. When the repair changed the text, the method name gets ``+trailing_comma``.
``NaN``/``Infinity`` are rejected: they are not JSON and would not survive a Parquet round trip.
"""
from __future__ import annotations

import json
import re
from typing import Any

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE_JSON = re.compile(r"```[ \t]*json[ \t]*\r?\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_FENCE_ANY = re.compile(r"```[ \t]*\r?\n(.*?)```", re.DOTALL)


class JSONExtractError(ValueError):
    """No JSON value could be extracted; ``reason`` is ``empty`` or ``no_json``."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-JSON constant {name}")


# strict=False: accept raw control characters (e.g. newlines) inside strings. llama.cpp's
# grammar lets a model emit them, and they carry no ambiguity.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, strict=False)


def _loads(text: str) -> tuple[bool, Any]:
    try:
        return True, _DECODER.decode(text)
    except ValueError:
        return False, None


def _scan_first_balanced(text: str) -> tuple[bool, Any]:
    """First position where an object/array decodes completely (raw_decode stops at its end)."""
    for m in re.finditer(r"[\[{]", text):
        try:
            value, _ = _DECODER.raw_decode(text, m.start())
            return True, value
        except ValueError:
            continue
    return False, None


def _strict(text: str, scan: bool = True) -> tuple[str, Any] | None:
    ok, value = _loads(text)
    if ok:
        return "whole", value
    for fence in (_FENCE_JSON, _FENCE_ANY):
        m = fence.search(text)
        if m:
            ok, value = _loads(m.group(1).strip())
            if ok:
                return "fenced", value
    if scan:
        ok, value = _scan_first_balanced(text)
        if ok:
            return "scan", value
    return None


def remove_trailing_commas(text: str) -> str:
    """Drop each ``,`` followed (after whitespace) by ``}`` or ``]``, outside double-quoted strings.

    Example: ``'{"a": [1, 2,], "b": "x,]",}'`` -> ``'{"a": [1, 2], "b": "x,]"}'``.
    """
    out: list[str] = []
    in_str = escaped = False
    n = len(text)
    for i, ch in enumerate(text):
        if in_str:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch == ",":
            j = i + 1
            while j < n and text[j] in " \t\r\n":
                j += 1
            if j < n and text[j] in "}]":
                continue
        out.append(ch)
    return "".join(out)


def extract_json_with_method(text: str | None) -> tuple[Any, str]:
    """Extract one JSON value; returns ``(value, method)``.

    ``method`` is ``whole``, ``fenced`` or ``scan``, with ``+trailing_comma`` appended when the
    repair step was needed. Raises :class:`JSONExtractError` (``reason`` ``empty`` when the text
    is blank after removing think blocks, ``no_json`` otherwise).
    """
    body = _THINK.sub("", text or "").strip()
    if not body:
        raise JSONExtractError("empty", "the answer is empty")
    repaired = remove_trailing_commas(body)
    suffix = "+trailing_comma" if repaired != body else ""
    # whole/fenced on the text as written, then on the repaired text; only then scan, and scan the
    # repaired text: an outer object with a trailing comma must not lose to an inner object that
    # happens to decode on its own. The repair never changes valid JSON, so a valid first value is
    # found the same way in both texts.
    for text, tag in ((body, ""), (repaired, suffix)):
        found = _strict(text, scan=False)
        if found is not None:
            return found[1], found[0] + tag
    ok, value = _scan_first_balanced(repaired)
    if ok:
        return value, "scan" + suffix
    raise JSONExtractError("no_json", "no JSON object or array found in the answer")


def extract_json(text: str | None) -> Any:
    """Like :func:`extract_json_with_method` but returns only the value."""
    return extract_json_with_method(text)[0]

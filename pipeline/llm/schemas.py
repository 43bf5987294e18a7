"""The JSON Schemas of the LLM answers: loaded from ``schemas/*.schema.json`` (one source of truth).

Every LLM answer is checked against a JSON Schema from ``schemas/``. A stage loads its file with :func:`load_schema` and
derives each call's specialisation in code (distill pins the expected step indices, memory keeps
the fields of one outcome, skills narrows ``maxItems`` to the configured count).

Two forms of one schema are used by :class:`pipeline.llm.client.LLMClient`:

* the **file form** (what :func:`load_schema` returns, minus the file-level ``$schema``, ``$id``,
  ``title`` and ``description``): sent to ``json_schema`` endpoints (OpenAI, Azure, DeepSeek,
  vLLM) and used for the local jsonschema validation of every answer, on every dialect. Strings
  are bounded by ``minLength``/``maxLength`` only, so a real model may write quotes, backslashes
  and newlines (the JSON decoder accepts raw control characters: ``jsonparse`` uses
  ``strict=False``).
* the **grammar form** (:func:`grammar_schema`): sent to llama.cpp's ``json_object`` dialect. Its
  schema-to-grammar converter ignores ``minLength``/``maxLength`` and copies a pattern's character
  class into the grammar unescaped, so a 135M model would run strings to ``max_tokens``. Each
  bounded string therefore gets ``pattern = ^[^"\\\\<control chars><forbid>]{min,max}$``: length
  bounded in the grammar, no raw quote that would end the string early. ``x-grammar-forbid`` (a
  string of characters, an annotation that jsonschema ignores) adds per-field forbidden characters.
"""
from __future__ import annotations

import copy
import functools
import json
import os
from typing import Any

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "schemas")
FILE_KEYS = ("$schema", "$id", "title", "description")  # documentation of the file, not sent
FORBID_KEY = "x-grammar-forbid"
GRAMMAR_FORBID = '"\\\\\\x00-\\x1f'  # regex char-class body: quote, backslash, control characters


def schema_path(name: str) -> str:
    """``<repo>/schemas/<name>.schema.json``."""
    return os.path.join(SCHEMA_DIR, f"{name}.schema.json")


@functools.lru_cache(maxsize=None)
def _load_text(path: str, mtime_ns: int) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def load_schema(name: str) -> dict[str, Any]:
    """A fresh (deep) copy of ``schemas/<name>.schema.json`` without its file-level keys.

    Raises ``FileNotFoundError`` naming the path when the file is missing (e.g. an installed
    package without the repository's ``schemas/`` folder), and ``ValueError`` when it is not a
    JSON object.
    """
    path = schema_path(name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"JSON Schema {path} not found (the schemas/ folder of the repository)")
    data = json.loads(_load_text(path, os.stat(path).st_mtime_ns))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a JSON Schema must be an object")
    return {k: v for k, v in copy.deepcopy(data).items() if k not in FILE_KEYS}


def wrap(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "object", "properties": {key: schema}, "required": [key], "additionalProperties": false}``.

    The list schemas (skills, mistakes, reasoning) are arrays in their files, the shape the GRPO
    skill update (``sft/rl/evolution.py``) also reads; OpenAI's ``json_schema`` needs an object
    at the top, so the stages send the array under one key.
    """
    return {"type": "object", "properties": {key: schema}, "required": [key], "additionalProperties": False}


def schema_files(*names: str) -> list[str]:
    """Paths of the named schema files (a stage hashes them into its fingerprint with its templates)."""
    return [schema_path(n) for n in names]


def _regex_class_escape(chars: str) -> str:
    return "".join("\\" + c if c in "\\]^-[" else c for c in chars)


def grammar_schema(schema: Any) -> Any:
    """The grammar form of ``schema`` (see the module docstring); the input is not modified.

    Every ``{"type": "string"}`` with a ``maxLength`` and no ``pattern`` gets
    ``pattern = ^[^"\\\\\\x00-\\x1f<forbid>]{minLength,maxLength}$``; ``x-grammar-forbid`` keys are
    removed. Example: ``{"type": "string", "minLength": 1, "maxLength": 20, "x-grammar-forbid": "<>"}``
    -> ``{"type": "string", "minLength": 1, "maxLength": 20, "pattern": '^[^"\\\\\\x00-\\x1f<>]{1,20}$'}``.
    """
    if isinstance(schema, list):
        return [grammar_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: grammar_schema(v) for k, v in schema.items() if k != FORBID_KEY}
    if out.get("items") is False and "prefixItems" in out:
        # llama-server's converter refuses a boolean schema ("schema must be an object"); the
        # tuple's maxItems already forbids items past prefixItems, so the grammar loses nothing
        del out["items"]
    types = schema.get("type")
    is_string = types == "string" or (isinstance(types, list) and "string" in types)
    if is_string and "maxLength" in schema and "pattern" not in schema:
        lo, hi = int(schema.get("minLength", 0)), int(schema["maxLength"])
        forbid = GRAMMAR_FORBID + _regex_class_escape(schema.get(FORBID_KEY, ""))
        out["pattern"] = f"^[^{forbid}]{{{lo},{hi}}}$"
    return out

"""Prompt templates of the LLM stages (memory, aggregate, distill), loaded from plain text files.

Layout (package data under ``pipeline/templates/``)::

    <stage>.txt            sections "@@ <name>" (e.g. "@@ system", "@@ user"), {placeholders}
    <env>/<stage>.txt      env guidance inserted as {env_rules}; ``default/`` for other envs

The prompt wording is ours (the reference's prompts are not copied, DESIGN.md §3). A row's
``prompt_sha`` is the SHA-256 of the exact files used for it (stage file + env file), so editing
a template changes the fingerprint and the rows it produced can be traced to it.
"""
from __future__ import annotations

import glob
import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache

TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "templates")
SECTION = "@@ "

# Human-readable environment names used in prompts (keys: Trajectory.env).
ENV_NAMES = {"alfworld": "ALFWorld (household tasks in a text world)",
             "webshop": "WebShop (online shopping website)",
             "search": "Search (question answering with a search engine)",
             "textworld": "TextWorld Express (text game)"}


@dataclass(frozen=True)
class Template:
    """The sections of one stage template with the env guidance of one environment."""
    sections: dict[str, str]
    env_rules: str
    files: tuple[str, ...]
    sha: str

    def render(self, section: str, **values: object) -> str:
        """Fill ``section`` with ``values`` (plus ``env_rules``); a missing placeholder raises ``KeyError``."""
        return self.sections[section].format(env_rules=self.env_rules, **values).strip()


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _split(text: str, path: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(SECTION):
            current = line[len(SECTION):].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    if not sections:
        raise ValueError(f"template {path} has no '{SECTION}<name>' section")
    return {k: "\n".join(v).strip() + "\n" for k, v in sections.items()}


def env_file(stage: str, env: str) -> str:
    """Path of the env guidance for ``stage``: ``<env>/<stage>.txt``, else ``default/<stage>.txt``."""
    path = os.path.join(TEMPLATE_DIR, env, f"{stage}.txt")
    return path if os.path.exists(path) else os.path.join(TEMPLATE_DIR, "default", f"{stage}.txt")


@lru_cache(maxsize=64)
def load(stage: str, env: str) -> Template:
    """Template of ``stage`` for ``env``. Raises ``FileNotFoundError`` if the stage file is missing."""
    stage_path = os.path.join(TEMPLATE_DIR, f"{stage}.txt")
    env_path = env_file(stage, env)
    stage_text, env_text = _read(stage_path), _read(env_path)
    sha = hashlib.sha256((stage_text + "\0" + env_text).encode("utf-8")).hexdigest()
    return Template(_split(stage_text, stage_path), env_text.strip(), (stage_path, env_path), sha)


def stage_files(stage: str) -> list[str]:
    """Every file that can shape ``stage``'s prompts (for the runner's fingerprint), sorted."""
    files = [os.path.join(TEMPLATE_DIR, f"{stage}.txt")]
    files += sorted(glob.glob(os.path.join(TEMPLATE_DIR, "*", f"{stage}.txt")))
    return files


def env_name(env: str) -> str:
    return ENV_NAMES.get(env, env)


def clip(text: str | None, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marking the cut with `` ...`` (None -> "")."""
    text = (text or "").strip()
    return text if len(text) <= limit else text[: max(0, limit - 4)].rstrip() + " ..."


def text_schema(max_len: int, forbid: str = "") -> dict:
    """JSON Schema of a one-line text of 1..``max_len`` characters without ``forbid`` characters.

    The ``pattern`` excludes control characters (newlines, tabs), ``"`` and ``\\``: llama.cpp's
    Python grammar lets a model emit raw control characters inside JSON strings, which strict
    JSON parsers reject, and a char class in a pattern is copied into the grammar unescaped, so a
    raw quote would end the string. The pattern also bounds the length for grammar endpoints
    (their converter ignores min/maxLength once a pattern is present).
    """
    cls = '"\\\\' + forbid + "\\x00-\\x1f"
    return {"type": "string", "minLength": 1, "maxLength": max_len, "pattern": f"^[^{cls}]{{1,{max_len}}}$"}

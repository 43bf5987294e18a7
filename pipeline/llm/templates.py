"""Prompt templates of the LLM stages (memory, skills, distill), loaded from plain text files.

Layout (package data under ``pipeline/templates/``, one flat folder)::

    <stage>.txt            sections "@@ <name>" (e.g. "@@ system", "@@ user"), {placeholders}
    <stage>.<env>.txt      env guidance inserted as {env_rules}; ``<stage>.default.txt`` for other envs;
                           optional "@@ examples" / "@@ examples <section>" parts (worked examples of
                           good answers, ours) are inserted as {examples} into every section / that
                           section

Prompt layout for reuse: the system message (instructions, env guidance, examples) is the same for
every request of a stage and env, and comes first; the per-item text (the episode, the task) comes
last, in the user message. A server that reuses the KV cache of a shared prefix (llama.cpp) or
bills cached prompt tokens at a discount (hosted APIs) then pays for the system part once.
The examples are not part of the "prompt words" that the echo rules compare answers with
(:func:`pipeline.quality.echo.prompt_words`): a good answer may well sound like them.

The names are unique on purpose: the runner keys a stage's template hashes by file basename
(``runner.fingerprint``), so ``alfworld/memory.txt`` and ``webshop/memory.txt`` would collide and
an edit of one could go unnoticed. The prompt wording is ours (the reference's prompts are not
copied). A row's ``prompt_sha`` is the SHA-256 of the exact files used for it
(stage file + env file), so editing a template changes the fingerprint (stage and downstream
rerun) and the rows it produced can be traced to it. ``TEMPLATE_DIR`` is read at call time, so
tests may point it at a copy (then call ``load.cache_clear()``).
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
from dataclasses import dataclass, field
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
    examples: dict[str, str] = field(default_factory=dict)

    def render(self, section: str, **values: object) -> str:
        """Fill ``section`` with ``values`` (plus ``env_rules`` and the ``examples`` of that
        section, else the env file's unnamed examples, else ""); a missing placeholder raises
        ``KeyError``."""
        examples = self.examples.get(section, self.examples.get("", ""))
        return self.sections[section].format(env_rules=self.env_rules, examples=examples, **values).strip()


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
    """Path of the env guidance for ``stage``: ``<stage>.<env>.txt``, else ``<stage>.default.txt``."""
    path = os.path.join(TEMPLATE_DIR, f"{stage}.{env}.txt")
    return path if env and os.path.exists(path) else os.path.join(TEMPLATE_DIR, f"{stage}.default.txt")


@lru_cache(maxsize=64)
def load(stage: str, env: str) -> Template:
    """Template of ``stage`` for ``env``. Raises ``FileNotFoundError`` if the stage file is missing."""
    stage_path = os.path.join(TEMPLATE_DIR, f"{stage}.txt")
    env_path = env_file(stage, env)
    stage_text, env_text = _read(stage_path), _read(env_path)
    sha = hashlib.sha256((stage_text + "\0" + env_text).encode("utf-8")).hexdigest()
    rules, sep, rest = env_text.partition(f"\n{SECTION}examples")
    examples = {k.removeprefix("examples").strip(): v.strip() for k, v in _split(sep.lstrip() + rest, env_path).items()} \
        if sep else {}
    return Template(_split(stage_text, stage_path), rules.strip(), (stage_path, env_path), sha, examples)


def stage_files(stage: str, *schemas: str) -> list[str]:
    """Every file that can shape ``stage``'s calls, for the runner's fingerprint: the stage
    template, its env templates (sorted), then the named answer schemas (``schemas/<name>.schema.json``)."""
    from pipeline.llm.schemas import schema_files
    files = [os.path.join(TEMPLATE_DIR, f"{stage}.txt")]
    files += sorted(glob.glob(os.path.join(TEMPLATE_DIR, f"{stage}.*.txt")))
    return files + schema_files(*schemas)


def env_name(env: str) -> str:
    """The env's description for prompts (:data:`ENV_NAMES`, e.g. ``"WebShop (online shopping
    website)"``); an unknown env key is returned as is."""
    return ENV_NAMES.get(env, env)


def clip(text: str | None, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marking the cut with `` ...`` (None -> "")."""
    text = (text or "").strip()
    return text if len(text) <= limit else text[: max(0, limit - 4)].rstrip() + " ..."


#: Share of :func:`clip_middle`'s limit kept from the end of the text.
TAIL_SHARE = 0.4


def clip_middle(text: str | None, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters by dropping its middle (marked `` ... ``): the
    start and the last :data:`TAIL_SHARE` of the limit stay, cut at words. An
    observation says where the agent is first and where it can go last: a TextWorld Express room
    description ends with its exits ("To the North you see the pantry."), which a plain
    :func:`clip` of the 560-character kitchen cut away, so the teacher explained moves into rooms
    it was never shown. None -> ""."""
    text = (text or "").strip()
    if len(text) <= limit:
        return text
    if limit < 40:
        return clip(text, limit)
    tail_len = int(limit * TAIL_SHARE)
    tail = text[-tail_len:]
    cut = tail.find(" ")
    tail = tail[cut + 1:] if 0 <= cut < len(tail) - 1 else tail
    n = limit - len(tail) - 5
    head = text[:n]
    if not text[n].isspace() and " " in head:  # end the head at a word too
        head = head[: head.rfind(" ")]
    return f"{head.rstrip()} ... {tail.lstrip()}"


_QUOTED = re.compile(r'"((?:[^"\\]|\\.){20,})"')


@lru_cache(maxsize=64)
def example_texts(stage: str, env: str) -> tuple[str, ...]:
    """The quoted strings of 20+ characters in the worked examples of ``stage`` for ``env`` (the
    answers' field values, e.g. a memory's description): what a model must not copy into its own
    answer (rule ``echo_prompt``, :func:`pipeline.quality.echo.example_violations`)."""
    tpl = load(stage, env)
    return tuple(dict.fromkeys(m.group(1) for text in tpl.examples.values() for m in _QUOTED.finditer(text)))

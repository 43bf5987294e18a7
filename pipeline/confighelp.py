"""The pipeline config as a reader sees it: sections, keys, defaults and help texts.

:func:`commented_yaml` renders a config (usually the effective one: defaults merged with a YAML
file by :func:`pipeline.core.config.load_config`) as YAML with each key's help text as a comment
above it; ``skillpipe config --show`` prints it, and the output loads back as a config file. The
training sections (``sft``, ``grpo``, ``eval``) show the keys a config file may set: not the
paths, policy, bank and prompt a pipeline run sets itself
(``pipeline.core.train_config.RUN_SET``).
:func:`section_names` feeds the section list in ``skillpipe run --help``.
"""
from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

from pipeline.core.config import PipelineConfig
from pipeline.core.train_config import section_keys
from pipeline.quality.catalog import names as quality_rule_names

#: Width of a help comment line (the ``# `` prefix and indent included).
COMMENT_WIDTH = 100


def section_names() -> list[str]:
    """Names of the config sections, in :class:`PipelineConfig` order (``llm``, ``parse``, ...)."""
    return [f.name for f in dataclasses.fields(PipelineConfig)]


def field_help(f: dataclasses.Field, section: str = "") -> str:
    """The help text of a config field (``config_field(default, help)``) of ``section``, its
    choices appended (``one of: a, b``) and, for a list of names only a registry above the config
    knows (``quality.flag_rules``: :data:`REGISTRY_NAMES`), those names; ``""`` for a field
    declared without one."""
    text = f.metadata.get("help", "")
    choices = f.metadata.get("choices")
    if choices and not all(str(c) in text for c in choices):  # most help texts already list them
        text += f" (one of: {', '.join(map(str, choices))})"
    if names := REGISTRY_NAMES.get((section, f.name)):
        text += f" ({', '.join(names())})"
    return text


#: ``(section, key)`` -> the names the key may list, from the registry that declares them.
REGISTRY_NAMES = {("quality", "flag_rules"): quality_rule_names}


def commented_yaml(cfg: PipelineConfig, header: str = "") -> str:
    """``cfg`` as YAML, one block per section, each key preceded by its help text as ``#``
    comments (wrapped at :data:`COMMENT_WIDTH`). ``header``: comment lines put first (no ``#``).

    ``yaml.safe_load`` of the result equals ``pipeline.core.config.to_dict(cfg)``.
    """
    out = [f"# {line}" for line in header.splitlines()]
    for section in dataclasses.fields(cfg):
        out += ["", f"{section.name}:"]
        values = getattr(cfg, section.name)
        keys = section_keys(section.name, values)  # a training section without its run-set fields
        for f in (f for f in dataclasses.fields(values) if f.name in keys):
            out += _comment(field_help(f, section.name), indent="  ")
            out += _key_value(f.name, getattr(values, f.name), indent="  ")
    return "\n".join(out).lstrip("\n") + "\n"


def _comment(text: str, indent: str) -> list[str]:
    """``text`` as wrapped ``# `` lines at ``indent``."""
    if not text:
        return []
    prefix = indent + "# "
    return textwrap.wrap(text, COMMENT_WIDTH, initial_indent=prefix, subsequent_indent=prefix,
                         break_long_words=False, break_on_hyphens=False)


def _key_value(key: str, value: Any, indent: str) -> list[str]:
    """``key: value`` as YAML lines at ``indent`` (collections in block style; empty ones ``{}``/``[]``)."""
    import yaml  # here: the CLI imports this module for run --help, which needs no YAML
    text = yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False, allow_unicode=True,
                          width=COMMENT_WIDTH)
    return [indent + line for line in text.rstrip("\n").split("\n")]

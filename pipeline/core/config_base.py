"""What every section of the run config is built from, and the one section the data stages and
the training steps share.

A field is made with :func:`config_field` (a default, a help text, and its range or choices); a
value read from YAML or the command line is converted by :func:`coerce` (no silent
``bool("false") == True`` or ``int(1.7) == 1``) and checked by :func:`check_fields`; every problem
is a :class:`ConfigError` ``section.key: message``. :func:`build_flat` applies a flat mapping to
one section. :class:`PromptConfig` (``prompt:``) is read by distill and build_pairs and handed to
SFT, GRPO and eval, so they all render the prompt alike.

The data sections (:mod:`pipeline.core.config`) and the training sections
(:mod:`pipeline.core.train_config`) both build on this module; it imports neither.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A config value of the wrong type, out of range, or an unknown key/section.

    A ``ValueError`` so every caller that already reports ``ValueError`` cleanly (``skillpipe run
    --config``, ``skillpipe sft``, ``skillpipe rl grpo``) prints it as one ``error:`` line.
    """


#: ``min``/``max`` of each field made by :func:`config_field`, keyed by the ``dataclasses.Field``
#: itself (identity hash). Not in the field metadata: ``HfArgumentParser`` (``python -m sft.train``)
#: passes every metadata key to ``argparse.add_argument``, which has no ``min``/``max``.
_LIMITS: dict[dataclasses.Field, tuple[float | None, float | None]] = {}


def config_field(default: Any, help: str, *, min: float | None = None, max: float | None = None,
                 choices: tuple | None = None):
    """A dataclass field with a default and a ``help`` text (lists/dicts get a fresh copy each).

    ``min``/``max`` (inclusive) and ``choices`` are enforced by :func:`check_fields` when a config
    is loaded; ``choices`` also goes into the metadata, where argparse-based parsers use it.
    """
    meta: dict[str, Any] = {"help": help}
    if choices is not None:
        meta["choices"] = choices
    if isinstance(default, (list, dict)):
        f = field(default_factory=lambda: type(default)(default), metadata=meta)
    else:
        f = field(default=default, metadata=meta)
    if min is not None or max is not None:
        _LIMITS[f] = (min, max)
    return f


_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def coerce(value: Any, default: Any, where: str) -> Any:
    """``value`` converted to the type of ``default``; raises :class:`ConfigError` ``"where: ..."``.

    Rules: a bool field takes a bool, 0/1, or one of the strings true/false/yes/no/1/0 (any
    case); an int field takes an int or an integral float (``1.0``), never a bool; a float field
    takes a finite int/float or a numeric string (PyYAML reads ``1e-6`` as a string); a str field
    takes a string; list/dict fields take a list/mapping. ``None`` is never accepted.
    """
    def fail(expected: str):
        raise ConfigError(f"{where}: expected {expected}, got {value!r} ({type(value).__name__})")

    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _BOOLS:
            return _BOOLS[value.strip().lower()]
        fail("a boolean (true/false/yes/no/1/0)")
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        fail("an integer")
    if isinstance(default, float):
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                pass
        if number is None or not math.isfinite(number):
            fail("a finite number")
        return number
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        fail("a string")
    if isinstance(default, list):
        if isinstance(value, list):
            return list(value)
        fail("a list")
    if isinstance(default, dict):
        if isinstance(value, dict):
            return dict(value)
        fail("a mapping")
    return value


def check_fields(cfg: Any, section: str = "") -> None:
    """Enforce the ``min``/``max``/``choices`` of every field of dataclass ``cfg``;
    raises :class:`ConfigError` ``"section.key: must be >= 0, got -1"``."""
    for f in dataclasses.fields(cfg):
        value, meta = getattr(cfg, f.name), f.metadata
        where = f"{section}.{f.name}" if section else f.name
        if "choices" in meta and value not in meta["choices"]:
            raise ConfigError(f"{where}: must be one of {', '.join(map(str, meta['choices']))}, got {value!r}")
        low, high = _LIMITS.get(f, (None, None))
        if low is not None and value < low:
            raise ConfigError(f"{where}: must be >= {low}, got {value!r}")
        if high is not None and value > high:
            raise ConfigError(f"{where}: must be <= {high}, got {value!r}")


def build_flat(cls: type, data: Any, base: Any = None, what: str = "config") -> Any:
    """``base`` (or ``cls()``) with the keys of the flat mapping ``data`` coerced and replaced,
    then range-checked. Raises :class:`ConfigError` for a non-mapping, an unknown key, a wrong
    type or an out-of-range value. Used by the SFT and GRPO configs."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: expected a mapping of field names to values, got {type(data).__name__}")
    cfg = base if base is not None else cls()
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(map(str, set(data) - names))
    if unknown:
        raise ConfigError(f"unknown {what} keys {unknown}; known: {sorted(names)}")
    cfg = dataclasses.replace(cfg, **{k: coerce(v, getattr(cfg, k), k) for k, v in data.items()})
    check_fields(cfg)
    return cfg


_f = config_field


@dataclass
class PromptConfig:
    """YAML section ``prompt:``: what the per-step prompt shows (history, skills, mistakes), read
    by distill and build_pairs (field help: ``skillpipe config --show``)."""
    history_length: int = _f(2, "observation/action pairs shown in the prompt (SkillRL's RL default)",
                            min=0)
    top_k_general: int = _f(6, "general skills shown (SkillRL's top_k)", min=0)
    max_mistakes: int = _f(5, "common mistakes shown", min=0)
    skills: bool = _f(True, "include the retrieved skills block at every step")

"""Phrase lists and patterns written from observed outputs, with where each entry comes from.

A rule's generic word lists (stop words, ALFWorld's command grammar) stay in its module; what a
rule was written against one output at a time (the teacher's "move it to the correct location",
WebShop controls a skill asked for, the rooms a think sent the agent to) lives in
``pipeline/quality/data/<file>.toml``, one table per list, each entry with:

* ``pattern``: a regular expression (a word list's word and its forms, or a phrase);
* ``seen``: the output it was written from ("" for a word added with the one seen, of the same
  kind: its ``source`` says so);
* ``source``: who wrote that output (the teacher on the shipped sample, the GRPO skill updater,
  SkillRL's released banks, the TextWorld Express engine);
* ``stage``: the stage whose output it was; ``added``: the date the entry was added;
  ``commit``: the commit that added it (``git show <commit>`` tells the run it came from).

The files ship as package data (``pyproject.toml``); :func:`entries` reads them with
``tomllib``, and a module builds its pattern from them at import (:func:`alternation`).
"""
from __future__ import annotations

import datetime
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

#: Keys every entry must have, with their types.
FIELDS = {"pattern": str, "seen": str, "source": str, "stage": str, "added": datetime.date, "commit": str}


@dataclass(frozen=True)
class Phrase:
    """One entry of a phrase list (module docstring); ``name``: what a violation calls it, for
    lists whose entries are named (WebShop controls)."""
    pattern: str
    seen: str
    source: str
    stage: str
    added: datetime.date
    commit: str
    name: str = ""


def files() -> list[str]:
    """The names of the data files, sorted (``vague.toml`` ...)."""
    return sorted(p.name for p in resources.files("pipeline.quality").joinpath("data").iterdir()
                  if p.name.endswith(".toml"))


@lru_cache(maxsize=None)
def entries(file: str, table: str) -> tuple[Phrase, ...]:
    """The entries of table ``table`` of data file ``file``, in file order. Raises ``KeyError``
    for a missing table and ``ValueError`` for an entry without one of :data:`FIELDS` (or of
    the wrong type) or with a blank ``source``: nothing is used without saying where it came from."""
    data = tomllib.loads(resources.files("pipeline.quality").joinpath("data", file).read_text(encoding="utf-8"))
    out = []
    for i, raw in enumerate(data[table]):
        bad = [k for k, t in FIELDS.items() if not isinstance(raw.get(k), t)]
        if bad or not raw["source"].strip() or not raw["pattern"]:
            raise ValueError(f"{file} [{table}] entry {i}: missing or wrong {bad or ['source']}")
        out.append(Phrase(**{k: raw[k] for k in FIELDS}, name=raw.get("name", "")))
    return tuple(out)


def tables(file: str) -> list[str]:
    """The table names of data file ``file``, in file order."""
    return list(tomllib.loads(resources.files("pipeline.quality").joinpath("data", file).read_text(encoding="utf-8")))


def alternation(file: str, table: str) -> str:
    """The patterns of one table joined by ``|``, in file order (a regular expression's body;
    the order decides which alternative a match takes)."""
    return "|".join(p.pattern for p in entries(file, table))

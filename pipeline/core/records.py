"""The record types that flow between stages, and their declared Arrow schemas.

Every Parquet artifact of the pipeline has one of the schemas below; nothing is inferred.
Text columns are ``large_string`` (observations and prompts can be long), steps are a nested
``list<struct>``. Writing a row with a field that is not in the schema raises ``KeyError``
(see :func:`to_table`), so a typo never becomes a silently empty column.

Step convention (same as SkillRL's rollout dumps): ``steps[0]`` is the reset state
(``action`` is ``None``, ``observation`` the first observation); for ``k >= 1`` ``steps[k].action``
is the action the agent took and ``steps[k].observation`` what the environment answered. The SFT
pair for action ``k`` therefore shows ``steps[k-1].observation`` and ``steps[k-1].admissible_actions``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

import pyarrow as pa

TEXT = pa.large_string()
#: Field metadata of a column a row may leave out (it is written as null): a column added later
#: that the stages before the one that fills it do not know about (``usefulness``).
OPTIONAL = {b"skillpipe.optional": b"1"}

STEP_TYPE = pa.struct([
    ("index", pa.int32()),
    ("action", TEXT),                       # None for the reset step
    ("observation", TEXT),
    ("admissible_actions", pa.list_(TEXT)),  # empty when the source has none
    ("reward", pa.float64()),
    ("done", pa.bool_()),
    ("thought", TEXT),                      # reasoning recorded in the source, if any
    ("line", pa.int32()),                   # 1-based line in the source file (None if unknown)
])


@dataclass
class Step:
    """One step of a trajectory (see module docstring for the index convention)."""
    index: int
    action: str | None
    observation: str
    admissible_actions: list[str] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    thought: str | None = None
    line: int | None = None


TRAJECTORY_SCHEMA = pa.schema([
    ("trajectory_id", pa.string()),
    ("env", pa.string()),                   # alfworld | webshop | search | textworld
    ("env_instance", pa.string()),          # env folder / game file / session: the unit of train/val split
    ("task", TEXT),
    ("category", pa.string()),              # from pipeline.envs classifier; "other" when unknown
    ("outcome", pa.string()),               # success | failure
    ("reward", pa.float64()),               # final episode reward (env units)
    ("steps", pa.list_(STEP_TYPE)),
    ("source_uri", pa.string()),
    ("source_format", pa.string()),
    ("record_index", pa.int32()),           # index of the record inside the source file
    ("source_line", pa.int32()),            # 1-based first line of the record in the source
    ("removed_step_indices", pa.list_(pa.int32())),  # filled by remove_loops
    ("metadata", TEXT),                     # JSON object with reader-specific extras
])


@dataclass
class Trajectory:
    """One episode of an agent in an environment, normalised from any input format."""
    trajectory_id: str
    env: str
    env_instance: str
    task: str
    category: str
    outcome: str
    reward: float
    steps: list[Step]
    source_uri: str
    source_format: str
    record_index: int
    source_line: int | None = None
    removed_step_indices: list[int] = field(default_factory=list)
    metadata: str = "{}"

    @property
    def success(self) -> bool:
        """Whether ``outcome`` is ``"success"`` (set by the reader; graded rewards use
        ``parse.success_threshold``)."""
        return self.outcome == "success"

    @property
    def actions(self) -> list[str]:
        """Recorded actions, i.e. ``steps[1:]`` actions (length ``len(steps) - 1``)."""
        return [s.action or "" for s in self.steps[1:]]

    def to_row(self) -> dict[str, Any]:
        """A :data:`TRAJECTORY_SCHEMA` row: every field, steps as dicts (``dataclasses.asdict``)."""
        return asdict(self)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Trajectory":
        """The trajectory of a :data:`TRAJECTORY_SCHEMA` row (inverse of :meth:`to_row`; a missing
        or null ``removed_step_indices`` reads as ``[]``); ``TypeError`` for unknown keys."""
        row = dict(row)
        row["steps"] = [Step(**s) for s in row["steps"]]
        row["removed_step_indices"] = list(row.get("removed_step_indices") or [])
        return cls(**row)


MISTAKE_TYPE = pa.struct([("trigger_condition", TEXT), ("bad_action", TEXT)])
REFINED_STEP_TYPE = pa.struct([("step_index", pa.int32()), ("action", TEXT),
                               ("critical_observation", TEXT), ("reasoning", TEXT)])

MEMORY_SCHEMA = pa.schema([
    ("memory_id", pa.string()),
    ("trajectory_id", pa.string()),
    ("env", pa.string()),
    ("category", pa.string()),
    ("outcome", pa.string()),
    ("task", TEXT),
    ("contextual_description", TEXT),
    ("refined_trajectory", pa.list_(REFINED_STEP_TYPE)),   # successes only; empty for failures
    ("planning_pattern", TEXT),                            # successes only
    ("mistakes_to_avoid", pa.list_(MISTAKE_TYPE)),         # failures only
    ("model", pa.string()),
    ("prompt_sha", pa.string()),
])

#: A bank item's measured usefulness (:mod:`pipeline.usefulness.bank`): ``score`` = mean gain over
#: ``n`` held-out expert steps, ``[lo, hi]`` its 95 % interval, ``method`` how it was measured,
#: ``scorer`` the model id, ``version`` the score's code version. Null: not scored.
SKILL_USEFULNESS_TYPE = pa.struct([
    ("score", pa.float64()),
    ("n", pa.int32()),
    ("lo", pa.float64()),
    ("hi", pa.float64()),
    ("method", pa.string()),
    ("scorer", pa.string()),
    ("version", pa.string()),
])

#: Text fields of a bank skill and of a common mistake, as the skills answers name them
#: (schemas/skills.schema.json, schemas/mistakes.schema.json) and the skill rows store them.
SKILL_FIELDS = ("title", "principle", "when_to_apply")
MISTAKE_FIELDS = ("description", "why_it_happens", "how_to_avoid")

SKILL_SCHEMA = pa.schema([
    ("skill_id", pa.string()),
    ("env", pa.string()),                   # environment whose bank holds the skill ("" = any)
    ("kind", pa.string()),                  # general | task_specific | mistake
    ("category", pa.string()),              # task-specific category; "" otherwise
    ("title", TEXT),
    ("principle", TEXT),
    ("when_to_apply", TEXT),
    ("description", TEXT),                  # mistakes only
    ("why_it_happens", TEXT),               # mistakes only
    ("how_to_avoid", TEXT),                 # mistakes only
    ("source_memory_ids", pa.list_(pa.string())),
    ("source_trajectory_ids", pa.list_(pa.string())),
    ("bank_version", pa.string()),
    ("model", pa.string()),
    ("prompt_sha", pa.string()),
    pa.field("usefulness", SKILL_USEFULNESS_TYPE, metadata=OPTIONAL),  # null until the skills stage scores it
])

THINK_TYPE = pa.struct([("step_index", pa.int32()), ("think", TEXT)])

DISTILLED_SCHEMA = pa.schema([
    ("trajectory_id", pa.string()),
    ("env", pa.string()),
    ("category", pa.string()),
    ("thinks", pa.list_(THINK_TYPE)),       # one per recorded action (+ synthetic done), 0-based
    ("synthetic_done", pa.bool_()),
    ("skill_ids_used", pa.list_(pa.string())),
    ("memory_ids", pa.list_(pa.string())),
    ("bank_version", pa.string()),
    ("model", pa.string()),
    ("prompt_sha", pa.string()),
])

#: One row per environment instance of the run (stage ``split``, :mod:`pipeline.core.split`).
SPLIT_SCHEMA = pa.schema([
    ("env_instance", pa.string()),
    ("split", pa.string()),                 # train | val
    ("rule", pa.string()),                  # hash: drawn by the hash rule | no_success: train, not drawn
    ("val_fraction", pa.float64()),         # export.val_fraction of the draw
    ("seed", pa.int64()),                   # export.seed of the draw
])

MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", TEXT)])

#: A think's measured usefulness (:mod:`pipeline.usefulness.score`): ``gain`` = ``share`` (the
#: expert action's share among ``candidates`` actions with the masked think) - ``share_empty``
#: (with an empty think); ``scorer`` the model id, ``version`` the score's code version. Null: not
#: scored (an empty think, or the gate is off).
THINK_USEFULNESS_TYPE = pa.struct([
    ("gain", pa.float64()),
    ("share", pa.float64()),
    ("share_empty", pa.float64()),
    ("candidates", pa.int32()),
    ("scorer", pa.string()),
    ("version", pa.string()),
])

SFT_PAIR_SCHEMA = pa.schema([
    ("pair_id", pa.string()),
    ("trajectory_id", pa.string()),
    ("step_id", pa.string()),
    ("step_index", pa.int32()),             # index of the target action in trajectory.steps
    ("env", pa.string()),
    ("env_instance", pa.string()),
    ("category", pa.string()),
    ("messages", pa.list_(MESSAGE_TYPE)),   # system?, user, assistant
    ("instruction", TEXT),                  # alpaca form (LLaMA-Factory)
    ("output", TEXT),
    ("action", TEXT),
    ("think", TEXT),
    ("synthetic", pa.bool_()),              # the synthetic ALFWorld `done` turn
    ("memory_ids", pa.list_(pa.string())),
    ("skill_ids_used", pa.list_(pa.string())),
    ("bank_version", pa.string()),
    ("source_uri", pa.string()),
    ("source_line", pa.int32()),
    ("model", pa.string()),
    ("prompt_sha", pa.string()),
    ("flags", pa.list_(pa.string())),       # validation rules whose policy is "flag"
    ("split", pa.string()),                 # train | val (set by export)
    pa.field("usefulness", THINK_USEFULNESS_TYPE, metadata=OPTIONAL),  # set by the usefulness stage
])

#: What a quarantine row counts (its ``kind``), so its folder reconciles with the manifest's counts:
#: ``unit``: a unit of the stage it could not use (the manifest's ``counts.quarantined``: units in =
#: out + quarantined); ``item``: a part of a unit that went on without it (a bank item dropped by a
#: content rule, for its sources or its usefulness); ``rejected_answer``: a model answer rejected and
#: asked again (the retry's outcome is recorded on its own); ``request``: a failed LLM request whose
#: raw output no ``unit`` row keeps; ``demotion``: a unit kept in the rows but taken off a
#: downstream path (verify: a success demoted to a failure). ``counts.quarantine_kinds`` counts
#: every kind.
QUARANTINE_KINDS = ("unit", "item", "rejected_answer", "request", "demotion")

QUARANTINE_SCHEMA = pa.schema([
    ("stage", pa.string()),
    ("kind", pa.string()),                  # what the row counts: one of QUARANTINE_KINDS
    ("reason", pa.string()),                # short machine-readable reason, e.g. "not_admissible"
    ("detail", TEXT),                       # human-readable explanation
    ("item_id", pa.string()),               # trajectory/pair/memory id, or "" for unreadable input
    ("source_uri", pa.string()),
    ("line", pa.int32()),                   # 1-based line in the source, when known
    ("raw", TEXT),                          # the raw input or raw LLM output that failed
])


@dataclass
class QuarantineRow:
    """A row that a stage could not use, kept with the reason (nothing is dropped silently);
    ``kind`` says what it counts (:data:`QUARANTINE_KINDS`; a unit unless said otherwise)."""
    stage: str
    reason: str
    detail: str = ""
    item_id: str = ""
    source_uri: str = ""
    line: int | None = None
    raw: str = ""
    kind: str = "unit"


def _check_value(value: Any, typ: pa.DataType, where: str) -> None:
    """Raise if ``value`` (a Python value bound for Arrow type ``typ``) holds a struct whose keys
    are not exactly the struct's fields, or a ``None`` in a non-nullable struct field, at any
    depth of lists and structs. ``where`` names the value in the error (``steps[3].line``)."""
    if value is None:
        return
    if pa.types.is_struct(typ):
        if not isinstance(value, dict):
            raise TypeError(f"{where}: expected an object for {typ}, got {type(value).__name__}")
        _check_keys(value, typ, where)
        for i in range(typ.num_fields):
            f = typ.field(i)
            if value[f.name] is None and not f.nullable:
                raise ValueError(f"{where}.{f.name}: None in a non-nullable field")
            _check_value(value[f.name], f.type, f"{where}.{f.name}")
    elif pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        item = typ.value_type
        if _is_nested(item) and isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                _check_value(v, item, f"{where}[{i}]")


def _is_nested(typ: pa.DataType) -> bool:
    return pa.types.is_struct(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ) \
        or pa.types.is_fixed_size_list(typ)


def _optional(fields: pa.StructType | pa.Schema) -> set[str]:
    """Names of the :data:`OPTIONAL` fields of a schema (a struct type has none)."""
    if not isinstance(fields, pa.Schema):
        return set()
    return {f.name for f in fields if f.metadata and f.metadata.get(b"skillpipe.optional") == b"1"}


def _check_keys(row: dict[str, Any], fields: pa.StructType | pa.Schema, where: str) -> None:
    names = set(fields.names)
    extra, missing = set(row) - names, names - set(row) - _optional(fields)
    if extra or missing:
        raise KeyError(f"{where + ': ' if where else ''}fields do not match schema: "
                       f"unknown={sorted(extra)} missing={sorted(missing)}")


def to_table(rows: Iterable[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Build a table with exactly ``schema``, strict at every level.

    A row may leave out an :data:`OPTIONAL` column (written as null). Raises ``KeyError`` on an
    unknown or missing field of a row or of any nested struct (e.g. a
    key inside a ``steps`` item; Arrow alone would drop an unknown nested key and turn a missing
    one into null), ``ValueError`` on ``None`` in a non-nullable field, ``TypeError`` on a
    non-object where a struct is declared; Arrow's own errors for values of the wrong type.
    """
    optional = _optional(schema)
    rows = [{**{k: None for k in optional if k not in r}, **r} for r in rows] if optional else list(rows)
    nested = [f for f in schema if _is_nested(f.type)]
    for n, r in enumerate(rows):
        _check_keys(r, schema, f"row {n}")
        for f in schema:
            if r[f.name] is None and not f.nullable:
                raise ValueError(f"row {n}.{f.name}: None in a non-nullable field")
        for f in nested:
            _check_value(r[f.name], f.type, f"row {n}.{f.name}")
    return pa.Table.from_pylist(rows, schema=schema)

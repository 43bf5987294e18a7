"""Helpers shared by the readers: building trajectories with stable ids, quarantine rows,
streaming JSON containers with line numbers, and attaching reasoning to the next real step.
"""
from __future__ import annotations

import io
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TextIO

import pyarrow as pa

from pipeline import envs
from pipeline.core.lineage import trajectory_id
from pipeline.core.records import STEP_TYPE, TEXT, TRAJECTORY_SCHEMA, QuarantineRow, Step, Trajectory

STAGE = "parse"
RAW_LIMIT = 4000  # chars of raw input kept on a quarantine row (enough to see what went wrong)


def bad(reason: str, detail: str, source_uri: str, line: int | None = None, raw: str = "",
        item_id: str = "", stage: str = STAGE, limit: int | None = RAW_LIMIT) -> QuarantineRow:
    """A quarantine row (stage ``parse`` unless given); ``raw`` is cut to ``limit`` chars (None = whole)."""
    return QuarantineRow(stage=stage, reason=reason, detail=detail, item_id=item_id,
                         source_uri=source_uri, line=line, raw=(raw or "")[:limit] if limit else (raw or ""))


#: Text encoding of every input file: UTF-8, a leading byte-order mark (``EF BB BF``) dropped.
#: A BOM is not newline, so line numbers are unchanged.
ENCODING = "utf-8-sig"


#: Byte-order marks of UTF-16 text -> the ``iconv`` encoding name that reads the file.
UTF16_BOMS = {b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}
#: Bytes of the head examined for UTF-16 without a BOM (NUL every other byte).
_UTF16_PROBE = 4096


def utf16_encoding(head: bytes) -> str | None:
    """The ``iconv`` name of the encoding of a file that looks like UTF-16 text, else ``None``.

    ``head``: the file's first bytes. Yes for a UTF-16 byte-order mark (``FF FE`` / ``FE FF``:
    ``"UTF-16"``, iconv reads the BOM), or, without one, when in the first :data:`_UTF16_PROBE`
    bytes at least 80 % of the odd (even) bytes are NUL, at most 10 % of the others are, and the
    text decoded as UTF-16LE (BE) is at least 95 % printable or whitespace (``"UTF-16LE"`` /
    ``"UTF-16BE"``): mostly-ASCII text as written by Windows tools (PowerShell ``>``, Notepad
    "Unicode"). Real binaries (NULs with no such pattern, or unprintable) get ``None``.
    ``discover.read_file`` calls it only on files already rejected (NUL bytes or invalid UTF-8).
    """
    if head[:2] in UTF16_BOMS:
        return UTF16_BOMS[head[:2]]
    sample = head[:_UTF16_PROBE]
    sample = sample[:len(sample) - len(sample) % 2]
    half = len(sample) // 2
    if half < 2:
        return None
    nul_even, nul_odd = sample[0::2].count(0), sample[1::2].count(0)
    if nul_odd >= 0.8 * half and nul_even <= 0.1 * half:
        name = "UTF-16LE"
    elif nul_even >= 0.8 * half and nul_odd <= 0.1 * half:
        name = "UTF-16BE"
    else:
        return None
    text = sample.decode(name.lower(), errors="replace")
    printable = sum(c.isprintable() or c in "\t\n\r" for c in text)
    return name if printable >= 0.95 * len(text) else None


def open_text(path: str):
    """``path`` opened for reading as text (:data:`ENCODING`, universal newlines).

    The one way readers open an input file themselves (files over
    ``discover.WHOLE_READ_BYTES``, or readers that take no ``text=``), so every reader sees the
    same text as :func:`pipeline.formats.discover.read_file` hands to the others: a leading UTF-8
    BOM is dropped (Windows editors write one; ``json.loads`` rejects it and line-anchored
    patterns miss line 1). Raises ``OSError`` like ``open``.
    """
    return open(path, encoding=ENCODING)


@dataclass(frozen=True)
class Source:
    """One input file as a reader sees it: the single argument of every reader ``read(src)``.

    Attributes:
        path: the local file. Quarantine rows name it (the parse stage rebases them), and readers
            take file and folder names from it (``env000/test1.txt`` -> instance ``env000``).
        env_hint: ``alfworld``/``webshop``/``search`` when the caller knows it, else ``None`` (detect).
        success_threshold: graded rewards (WebShop score, QA reward) >= this are successes.
        uri: the source URI recorded on trajectories and hashed into their ids (the parse stage
            passes the path relative to the input root, so ids do not depend on the checkout);
            ``None`` = ``path``. Read it as :attr:`source_uri`.
        text: the file's decoded text when the caller already has it (``discover.read_file`` does
            for files up to ``WHOLE_READ_BYTES``); ``None`` = :meth:`read_text` opens the file.
        escaped: ``text`` was decoded with ``errors="surrogateescape"`` (a JSONL file with invalid
            UTF-8: each bad byte is one character U+DC80..U+DCFF for the reader to quarantine).
    """
    path: str
    env_hint: str | None = None
    success_threshold: float = 1.0
    uri: str | None = None
    text: str | None = None
    escaped: bool = False

    @property
    def source_uri(self) -> str:
        """The URI to record on trajectories: :attr:`uri`, else :attr:`path`."""
        return self.path if self.uri is None else self.uri

    def read_text(self) -> str:
        """The whole text: :attr:`text`, else the file read with :func:`open_text` (same
        decoding and newline translation). Raises ``OSError`` like ``open``."""
        if self.text is not None:
            return self.text
        with open_text(self.path) as f:
            return f.read()

    def open(self) -> TextIO:
        """The text as a stream of ``\\n``-terminated lines (a context manager), for readers that
        stream large files: over :attr:`text` when held, else :func:`open_text`."""
        return io.StringIO(self.text) if self.text is not None else open_text(self.path)


def line_at(text: str, pos: int) -> int:
    """1-based line number of character offset ``pos`` in ``text``."""
    return text.count("\n", 0, pos) + 1


#: ``json.dumps(..., ensure_ascii=False, sort_keys=True)`` of trajectory metadata, one encoder made once.
_METADATA_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True)


def build_trajectory(*, env: str, env_instance: str, task: str, outcome: str, reward: float,
                     steps: list[Step], source_uri: str, source_format: str, record_index: int,
                     source_line: int | None, category_hint: str | None = None,
                     category: str | None = None, metadata: dict[str, Any] | None = None) -> Trajectory:
    """Normalise one record into a :class:`Trajectory` with a content-derived id.

    The id hashes (source URI, record index, env, task, outcome, reward, each step's action,
    observation and reward), so rereading the same file gives the same id (D-P6, D-P9).
    ``category`` overrides the classifier; otherwise ``envs.classify(env, task, category_hint)``.
    Step indices are renumbered 0..n-1 here so readers need not track them.
    """
    for i, s in enumerate(steps):
        s.index = i
    return Trajectory(
        trajectory_id=trajectory_id(source_uri, record_index, _content(env, task, outcome, reward, steps)),
        env=env, env_instance=env_instance, task=task,
        category=category or envs.classify(env, task, category_hint),
        outcome=outcome, reward=float(reward), steps=steps,
        source_uri=source_uri, source_format=source_format, record_index=record_index,
        source_line=source_line, removed_step_indices=[],
        metadata=_METADATA_JSON.encode(metadata or {}))


def reader_trajectory(**kwargs: Any) -> Trajectory | QuarantineRow:
    """:func:`build_trajectory` for readers: the trajectory, or a ``non_finite_reward`` quarantine
    row when its reward or a step's reward is NaN or infinite (JSON ``NaN``/``Infinity``, or a
    number such as ``1e999999`` that overflows a float). Such a value would otherwise decide the
    outcome silently (NaN >= threshold is false: a failure; inf a success). The row's line is the
    first bad step's (else the record's) and ``raw`` holds the whole record as JSON, so nothing is
    lost. Arguments as :func:`build_trajectory`."""
    steps = kwargs["steps"]
    bad_step = next((s for s in steps if not math.isfinite(s.reward)), None)
    if bad_step is None and math.isfinite(kwargs["reward"]):
        return build_trajectory(**kwargs)
    where = (f"step {steps.index(bad_step)} reward {bad_step.reward!r}" if bad_step is not None
             else f"episode reward {kwargs['reward']!r}")
    line = bad_step.line if bad_step is not None and bad_step.line is not None else kwargs.get("source_line")
    record = {k: v for k, v in kwargs.items() if k != "steps"}
    record["steps"] = [s.__dict__ for s in steps]
    return bad("non_finite_reward", f"{where} is not a finite number (NaN or infinite; a reward or score "
               f"must be a finite float)", kwargs["source_uri"], line,
               json.dumps(record, ensure_ascii=False, default=str), limit=None)


STEP_FIELDS = ("index", "action", "observation", "admissible_actions", "reward", "done", "thought", "line")


def trajectory_row(t: Trajectory) -> dict[str, Any]:
    """``t`` as a row of ``records.TRAJECTORY_SCHEMA``: the same dict as ``t.to_row()``, built
    directly (``dataclasses.asdict`` deep-copies every step and dominated parse time at scale)."""
    return {"trajectory_id": t.trajectory_id, "env": t.env, "env_instance": t.env_instance, "task": t.task,
            "category": t.category, "outcome": t.outcome, "reward": t.reward,
            "steps": [{"index": s.index, "action": s.action, "observation": s.observation,
                       "admissible_actions": list(s.admissible_actions), "reward": s.reward, "done": s.done,
                       "thought": s.thought, "line": s.line} for s in t.steps],
            "source_uri": t.source_uri, "source_format": t.source_format, "record_index": t.record_index,
            "source_line": t.source_line, "removed_step_indices": list(t.removed_step_indices),
            "metadata": t.metadata}


_STEPS_TYPE = TRAJECTORY_SCHEMA.field("steps").type
_INT_LIST = TRAJECTORY_SCHEMA.field("removed_step_indices").type


def trajectories_table(trajs: list[Trajectory]) -> pa.Table:
    """``trajs`` as a table of exactly ``records.TRAJECTORY_SCHEMA``, built column by column.

    Same content as ``to_table([trajectory_row(t) for t in trajs], TRAJECTORY_SCHEMA)``, but the
    steps are gathered into flat per-field columns and assembled with list offsets, which skips
    the per-step dicts and the nested row conversion (about 4x faster; the parse workers use it
    so the main process only writes Parquet). Raises like ``pa.array`` on a value of the wrong type.
    """
    offsets, cols = [0], ([], [], [], [], [], [], [], [])
    index, action, observation, admissible, reward, done, thought, line = cols
    for t in trajs:
        for s in t.steps:
            index.append(s.index)
            action.append(s.action)
            observation.append(s.observation)
            admissible.append(s.admissible_actions)
            reward.append(s.reward)
            done.append(s.done)
            thought.append(s.thought)
            line.append(s.line)
        offsets.append(len(index))
    children = [pa.array(values, f.type) for values, f in zip(cols, STEP_TYPE)]
    steps = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()),
                                     pa.StructArray.from_arrays(children, fields=list(STEP_TYPE)), type=_STEPS_TYPE)

    def col(name: str) -> pa.Array:
        return pa.array([getattr(t, name) for t in trajs], TRAJECTORY_SCHEMA.field(name).type)

    arrays = {name: col(name) for name in TRAJECTORY_SCHEMA.names if name not in ("steps", "removed_step_indices")}
    arrays["steps"] = steps
    arrays["removed_step_indices"] = pa.array([list(t.removed_step_indices) for t in trajs], _INT_LIST)
    return pa.Table.from_arrays([arrays[n] for n in TRAJECTORY_SCHEMA.names], schema=TRAJECTORY_SCHEMA)


def _content(env: str, task: str, outcome: str, reward: float, steps: list[Step]) -> list:
    return [env, task, outcome, reward, [[s.action, s.observation, s.reward] for s in steps]]


def rebase(t: Trajectory, source_uri: str) -> Trajectory:
    """Give ``t`` a new ``source_uri`` (e.g. relative to the input root) and the matching id.

    Ids must not depend on where a checkout lives, so the parse stage stores URIs relative to
    the input root (the root itself is in the stage manifest).
    """
    t.source_uri = source_uri
    t.trajectory_id = trajectory_id(source_uri, t.record_index,
                                    _content(t.env, t.task, t.outcome, t.reward, t.steps))
    return t


def json_error_rows(e: "JSONContainerError", path: str, text: str, done: int, unit: str = "records"
                    ) -> Iterator[QuarantineRow]:
    """Quarantine rows for where :func:`iter_json_container` stopped: one :func:`invalid_json_row`
    for damage inside the top-level value; for content after it (:class:`JSONTrailingContent`),
    one ``trailing_json`` row per JSON value that follows, with its line and the value as JSON
    (an array: one row per element, as arrays hold one record per element in every format;
    an object is one record), and one ``invalid_json`` row holding the rest of the text from the
    first piece that does not decode. Nothing after the top-level value is dropped unseen."""
    if not isinstance(e, JSONTrailingContent):
        yield invalid_json_row(e, path, text, done, unit)
        return
    dec, pos = json.JSONDecoder(), e.pos
    while pos < len(text):
        line = line_at(text, pos)
        try:
            value, end = _decode(dec, text, pos)
        except JSONContainerError as err:
            yield bad("invalid_json", f"content after the top-level JSON value ({done} {unit}) does not decode: "
                      f"{err}", path, line, text[pos:], limit=None)
            return
        members = [(None, value, line)]  # an object, a scalar or an empty array: one row
        if value and isinstance(value, list):
            members = [(k, v, line + ln - 1) for k, v, _, ln in iter_json_container(text[pos:end])]
        for key, member, member_line in members:
            where = f"a JSON {type(member).__name__}" if key is None else f"element {key} of a JSON array"
            yield bad("trailing_json", f"{where} after the end of the top-level JSON value ({done} {unit} "
                      "read before it): a second document or a stray record, not read as a record", path,
                      member_line, json.dumps(member, ensure_ascii=False), limit=None)
        pos = _WS.match(text, end).end()


def invalid_json_row(e: "JSONContainerError", path: str, text: str, done: int, unit: str = "records"
                     ) -> QuarantineRow:
    """The quarantine row of a JSON container that stopped decoding after ``done`` members:
    its line and the text around the damage."""
    return bad("invalid_json", f"{e} (after {done} {unit})", path, line_at(text, e.pos),
               text[max(0, e.pos - 200):e.pos + 200])


class ThoughtBuffer:
    """Collects reasoning-only turns (``think:`` / ``think[...]``) for the next real action.

    Reasoning never becomes a step (it changes nothing in the environment); it is stored as the
    ``thought`` of the next action step, several thoughts joined by newlines.
    """

    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, text: str) -> None:
        """Keep ``text``, stripped (blank text is ignored)."""
        text = text.strip()
        if text:
            self.parts.append(text)

    def take(self) -> str | None:
        """The kept thoughts joined by newlines (``None`` when there are none), then empty the buffer."""
        out = "\n".join(self.parts) or None
        self.parts = []
        return out


_WS = re.compile(r"\s*")


class JSONContainerError(ValueError):
    """A JSON container stopped decoding at offset ``pos`` (see :func:`iter_json_container`)."""
    def __init__(self, msg: str, pos: int):
        super().__init__(msg)
        self.pos = pos


class JSONTrailingContent(JSONContainerError):
    """The top-level JSON value ended at ``pos`` but non-blank text follows it (a second JSON
    document, a stray record, garbage): :func:`json_error_rows` quarantines each piece."""


def _decode(dec: json.JSONDecoder, text: str, pos: int) -> tuple[Any, int]:
    """``dec.raw_decode``; a value nested too deeply for Python's recursion limit is a
    :class:`JSONContainerError` at ``pos`` like any undecodable value (not a RecursionError)."""
    try:
        return dec.raw_decode(text, pos)
    except json.JSONDecodeError as e:
        raise JSONContainerError(f"invalid JSON: {e.msg}", e.pos) from None
    except RecursionError:
        raise JSONContainerError("invalid JSON: nested too deeply to decode", pos) from None


class BadMember(JSONContainerError):
    """Yielded by :func:`iter_json_container` in place of a member value that does not decode
    (e.g. nested too deeply, or a bad token inside it) but whose brackets balance, so the members
    after it are still read; readers quarantine it with :func:`bad_member_row`."""


_BRACKET_OR_QUOTE = re.compile(r'["\[\]{}]')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def _skip_value(text: str, pos: int) -> int | None:
    """End offset of the array/object starting at ``pos``, found by counting brackets outside
    strings (no decoding, so any depth); ``None`` when the text ends first (a cut file)."""
    depth, i = 0, pos
    while (m := _BRACKET_OR_QUOTE.search(text, i)) is not None:
        if m[0] == '"':
            s = _STRING.match(text, m.start())
            if s is None:
                return None
            i = s.end()
            continue
        depth += 1 if m[0] in "[{" else -1
        i = m.end()
        if depth == 0:
            return i
    return None


def _member(dec: json.JSONDecoder, text: str, pos: int) -> tuple[Any, int]:
    """``(value, end)`` of the member at ``pos``; a :class:`BadMember` as the value when it does
    not decode but its brackets balance; raises :class:`JSONContainerError` otherwise."""
    try:
        return _decode(dec, text, pos)
    except JSONContainerError as e:
        end = _skip_value(text, pos) if text.startswith(("[", "{"), pos) else None
        if end is None:
            raise
        return BadMember(str(e), e.pos), end


def bad_member_row(key: Any, err: BadMember, path: str, text: str, start: int, line: int) -> QuarantineRow:
    """The ``invalid_json`` row of one member that did not decode (see :class:`BadMember`)."""
    return bad("invalid_json", f"member {key!r}: {err} (at line {line_at(text, err.pos)}); the members after "
               "it are still read", path, line, text[start:start + RAW_LIMIT])


def _end_of_top_level(text: str, pos: int) -> None:
    """Raise :class:`JSONTrailingContent` if anything but whitespace follows offset ``pos``."""
    pos = _WS.match(text, pos).end()
    if pos < len(text):
        raise JSONTrailingContent("content after the end of the top-level JSON value", pos)


#: ``each(key, value, index, start, line)`` of :func:`read_json_members`: the rows of one member.
MemberReader = Callable[[Any, Any, int, int, int], Iterator["Trajectory | QuarantineRow"]]


def read_json_members(src: Source, text: str, each: MemberReader, unit: str = "records",
                      single_object: bool = False) -> Iterator[Trajectory | QuarantineRow]:
    """The loop of every reader of a JSON array/object of records: ``each(key, value, index,
    start, line)`` per member of ``text`` (the text of ``src``; ``index`` counts members from 0,
    undecodable ones too), a :func:`bad_member_row` per member that does not decode, and the
    :func:`json_error_rows` of where reading stopped (``unit`` names the members in their detail).
    ``single_object``: as :func:`iter_json_container`."""
    index = 0
    try:
        for key, value, start, line in iter_json_container(text, single_object):
            if isinstance(value, BadMember):
                yield bad_member_row(key, value, src.path, text, start, line)
            else:
                yield from each(key, value, index, start, line)
            index += 1
    except JSONContainerError as e:
        yield from json_error_rows(e, src.path, text, index, unit)


def iter_json_container(text: str, single_object: bool = False) -> Iterator[tuple[Any, Any, int, int]]:
    """Yield ``(key_or_index, value, start_offset, start_line)`` for each member of a top-level
    JSON object or array, decoding one member at a time (``start_line`` 1-based, counted
    incrementally: O(file), not O(members x file)). ``single_object``: a top-level object is
    one member (index 0), not a container of members.

    A member that does not decode but whose brackets balance (nested too deeply for Python, a bad
    token inside) is yielded as a :class:`BadMember` value and reading goes on. A truncated or
    otherwise corrupt file still yields every member before the damage, then raises
    :class:`JSONContainerError` with the offset where decoding failed (readers turn it into a
    quarantine row with that line). Raises it too when the text is not an object or array, and
    :class:`JSONTrailingContent` when text follows the closing bracket (:func:`json_error_rows`).
    """
    dec = json.JSONDecoder()
    pos = _WS.match(text, 0).end()
    if pos >= len(text) or text[pos] not in "[{":
        raise JSONContainerError("top level is not a JSON object or array", pos)
    if single_object and text[pos] == "{":
        value, end = _member(dec, text, pos)
        yield 0, value, pos, line_at(text, pos)
        _end_of_top_level(text, end)
        return
    is_obj, close = text[pos] == "{", "}" if text[pos] == "{" else "]"
    pos = _WS.match(text, pos + 1).end()
    index, line, counted = 0, 1, 0
    if text.startswith(close, pos):
        _end_of_top_level(text, pos + 1)
        return
    while True:
        start = pos
        if is_obj:
            key, pos = _decode(dec, text, pos)
            pos = _WS.match(text, pos).end()
            if not text.startswith(":", pos):
                raise JSONContainerError("expected ':' after object key", pos)
            pos = _WS.match(text, pos + 1).end()
            start = pos
        else:
            key = index
        value, pos = _member(dec, text, pos)
        line, counted = line + text.count("\n", counted, start), start
        yield key, value, start, line
        index += 1
        pos = _WS.match(text, pos).end()
        if text.startswith(",", pos):
            pos = _WS.match(text, pos + 1).end()
        elif text.startswith(close, pos):
            _end_of_top_level(text, pos + 1)
            return
        else:
            raise JSONContainerError(f"expected ',' or '{close}'" if pos < len(text) else "unexpected end of file", pos)

"""Reader for chat-format trajectories: a JSON list (or JSONL) of records holding ``messages``
(``role``/``content``, OpenAI style, e.g. FireAct) or ``conversations`` (``role``/``content`` as
in ETO, or ShareGPT ``from``/``value``).

Turns: an optional instruction prompt answered ``OK`` (ETO's preamble) is skipped; the next user
turn is the reset observation (the task from its ``Your task is to:`` line, else the WebShop
``Instruction:``, else the whole first turn, e.g. a question); assistant turns are
``Thought: ...\\nAction: ...`` (or ``<think>``/``<action>`` tags; otherwise the whole turn is the
action); user turns are ``Observation: ...``. QA actions (env ``search``) are mapped to SkillRL
Search's tags by :func:`pipeline.envs.search.normalise_action` (``search[x]`` -> ``<search>x</search>``,
``finish[x]`` -> ``<answer>x</answer>``).

Outcome: an explicit record field (``success``/``won``/``outcome``/``reward``) or a closing
``reward = <value>`` observation decides; without any label (ETO) the record is a demonstration,
treated as success with ``"outcome_source": "assumed"`` in metadata (ETO's SOURCE.md warns some
are not successes: downstream validation must not trust it blindly). The ALFWorld game-file
folder gives the category and wins over the text classifier.
"""
from __future__ import annotations

import functools
import json
import os
import re
from typing import Any, Iterator

from pipeline import envs
from pipeline.envs import search as search_env
from pipeline.core.records import QuarantineRow, Step, Trajectory
from pipeline.formats.common import Source, ThoughtBuffer, bad, read_json_members, reader_trajectory
from pipeline.formats.webshop_transcript import task_from_observation

FORMAT = "chat_json"
WIN_REWARD = {"alfworld": 10.0}  # env units of a won episode; 1.0 elsewhere
_ROLE = {"user": "user", "human": "user", "assistant": "assistant", "gpt": "assistant", "model": "assistant",
         "system": "system"}
_CONTENT_KEY = re.compile(r'(?<!\\)"(?:content|value)"\s*:')
_TASK = re.compile(r"^\s*Your task is to:\s*(.*)$", re.M | re.I)
_REWARD_OBS = re.compile(r"reward\s*=\s*(True|False|[-+]?\d+(?:\.\d+)?)\s*$", re.I)
_OK = {"ok", "ok."}


class RecordError(ValueError):
    """A record that is not a usable chat (no messages, a message without a known role or string
    content, no user turn or assistant action); the reader turns it into that record's
    ``bad_record`` quarantine row and reads on."""


def _messages(rec: Any) -> list[tuple[str, str]]:
    if not isinstance(rec, dict):
        raise RecordError(f"record is a {type(rec).__name__}, expected an object")
    msgs = rec.get("messages", rec.get("conversations"))
    if not isinstance(msgs, list) or not msgs:
        raise RecordError("record has no non-empty 'messages' or 'conversations' list")
    out = []
    for i, m in enumerate(msgs):
        role = _ROLE.get(str(m.get("role", m.get("from", ""))).lower()) if isinstance(m, dict) else None
        content = m.get("content", m.get("value")) if isinstance(m, dict) else None
        if role is None or not isinstance(content, str):
            raise RecordError(f"message {i} lacks a known role or a string content")
        out.append((role, content))
    return out


def split_turn(content: str) -> tuple[str | None, str]:
    """``(thought, action)`` of an assistant turn (``Thought:/Action:`` or ``<think>/<action>`` tags)."""
    tag = re.search(r"<action>(.*?)</action>", content, re.S | re.I)
    if tag:
        think = re.search(r"<think>(.*?)</think>", content, re.S | re.I)
        return (think[1].strip() if think else None), tag[1].strip()
    idx = content.rfind("Action:")
    if idx < 0:
        return None, content.strip()
    thought = re.sub(r"^\s*Thought:\s*", "", content[:idx]).strip() or None
    return thought, content[idx + len("Action:"):].strip()


def _obs(content: str) -> str:
    return re.sub(r"^\s*Observation:\s*", "", content).strip()


def _label(rec: dict, last_obs: str, env: str, threshold: float) -> tuple[str, float, str]:
    """(outcome, reward, outcome_source) from the record or its closing observation."""
    win = WIN_REWARD.get(env, 1.0)
    for key in ("success", "won"):
        if isinstance(rec.get(key), bool):
            return ("success" if rec[key] else "failure"), (win if rec[key] else 0.0), "field"
    if isinstance(rec.get("reward"), (int, float)) and not isinstance(rec.get("reward"), bool):
        r = float(rec["reward"])
        return ("success" if r >= threshold else "failure"), r, "field"
    if str(rec.get("outcome", "")).lower() in ("success", "failure"):
        ok = str(rec["outcome"]).lower() == "success"
        return ("success" if ok else "failure"), (win if ok else 0.0), "field"
    m = _REWARD_OBS.search(last_obs)
    if m:
        v = m[1].lower()
        r = 1.0 if v == "true" else 0.0 if v == "false" else float(v)
        return ("success" if r >= threshold else "failure"), r, "observation"
    return "success", win, "assumed"


def parse_record(rec: Any, lines: list[int | None], src: Source, index: int, first_line: int | None
                 ) -> Trajectory | QuarantineRow:
    """Record number ``index`` of ``src`` -> Trajectory (or a ``non_finite_reward`` row, see
    ``common.reader_trajectory``); ``lines[i]`` is the file line of message ``i`` (or None).

    Raises :class:`RecordError` for a record with no usable turns.
    """
    msgs = _messages(rec)
    keep = [(r, c, lines[i] if i < len(lines) else first_line) for i, (r, c) in enumerate(msgs) if r != "system"]
    if len(keep) >= 3 and keep[0][0] == "user" and keep[1][0] == "assistant" and keep[1][1].strip().lower() in _OK:
        keep = keep[2:]  # ETO-style instruction prompt + "OK"
    if not keep or keep[0][0] != "user":
        raise RecordError("conversation does not start with a user turn after the preamble")
    first = keep[0][1]
    game_file = rec.get("game_file") if isinstance(rec.get("game_file"), str) else None
    text = "\n".join(c for _, c, _ in keep)
    env = envs.detect_env(text, src.env_hint or ("alfworld" if game_file else None))
    t = _TASK.search(first)
    if t:
        task, reset_obs = t[1].strip(), _TASK.sub("", first).strip()
    else:
        task = task_from_observation(first) or _obs(first)
        reset_obs = _obs(first)
    steps = [Step(index=0, action=None, observation=reset_obs, line=keep[0][2])]
    thoughts = ThoughtBuffer()
    for role, content, ln in keep[1:]:
        if role == "assistant":
            thought, action = split_turn(content)
            if thought:
                thoughts.add(thought)
            steps.append(Step(index=len(steps), action=action, observation="", thought=thoughts.take(), line=ln))
        else:  # an observation answers the latest action (two user turns in a row are joined)
            prev = steps[-1]
            prev.observation = (prev.observation + "\n" + _obs(content)).strip() if prev.observation else _obs(content)
    if len(steps) < 2:
        raise RecordError("conversation has no assistant action")
    if env == "search":  # one QA action syntax for every source: finish[x] -> <answer>x</answer>
        for s in steps[1:]:
            s.action = search_env.normalise_action(s.action)
    outcome, reward, source = _label(rec, steps[-1].observation, env, src.success_threshold)
    if outcome == "success" or source == "observation":
        steps[-1].done = True
        steps[-1].reward = reward
    data_source = rec.get("data_source") if isinstance(rec.get("data_source"), str) else None
    if env == "search" and not data_source:
        data_source = search_env.data_source_from_text(src.path)
    hint = game_file if env == "alfworld" else data_source if env == "search" else None
    meta = {"outcome_source": source}
    for key in ("id", "game_file", "data_source"):
        if isinstance(rec.get(key), str):
            meta[key] = rec[key]
    if data_source:
        meta["data_source"] = data_source
    instance = game_file or (rec["id"] if isinstance(rec.get("id"), str) else
                             f"{os.path.splitext(os.path.basename(src.path))[0]}/{index}")
    return reader_trajectory(
        env=env, env_instance=instance, task=task, outcome=outcome, reward=reward, steps=steps,
        source_uri=src.source_uri, source_format=FORMAT, record_index=index, source_line=first_line,
        category_hint=hint, metadata=meta)


def _message_lines(text: str, start: int, n: int, start_line: int) -> list[int]:
    """Lines of the first ``n`` ``"content"``/``"value"`` keys from offset ``start`` (the record's
    messages, in order; escaped quotes inside strings never match)."""
    out, line, last = [], start_line, start
    for m in _CONTENT_KEY.finditer(text, start):
        if len(out) == n:
            break
        line += text.count("\n", last, m.start())
        last = m.start()
        out.append(line)
    return out


#: Non-blank lines :func:`is_jsonl` looks at.
JSONL_PROBE_LINES = 20


def _is_object_line(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (json.JSONDecodeError, RecursionError):  # RecursionError: pathologically deep nesting
        return False


def is_jsonl(text: str) -> bool:
    """Whether ``text`` (starting with ``{``) is JSON Lines rather than one JSON document.

    Yes when its first line is a whole JSON object (as before), or when at least 2 of its first
    :data:`JSONL_PROBE_LINES` non-blank lines are, and they are the majority: so a JSONL file
    whose first record is damaged (cut) is still read line by line, its bad line quarantined
    and the good ones kept. A pretty-printed document has few such lines (only an inner
    ``{...}`` with no trailing comma), never a majority.
    """
    probe, start = [], 0
    while start < len(text) and len(probe) < JSONL_PROBE_LINES:
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if not text[start:end].isspace() and end > start:
            probe.append(text[start:end])
        start = end + 1
    if not probe:
        return False
    if _is_object_line(probe[0]):
        return True
    good = sum(_is_object_line(line) for line in probe[1:])
    return good >= 2 and 2 * good > len(probe)


#: Characters ``errors="surrogateescape"`` decodes invalid UTF-8 bytes to (one per byte).
_ESCAPED = re.compile("[\udc80-\udcff]")


def _escaped_bytes(line: str) -> str:
    """``line``'s invalid bytes, hex (``"E9"``, ``"FF 80"``), first 8 of them."""
    return " ".join(f"{ord(c) - 0xDC00:02X}" for c in _ESCAPED.findall(line)[:8])


def _undecoded(line: str) -> str:
    """``line`` with each escaped byte shown as U+FFFD (the raw text of a ``not_utf8`` row)."""
    return line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def read(src: Source) -> Iterator[Trajectory | QuarantineRow]:
    """Yield one trajectory per record; ``bad_record`` / ``invalid_json`` rows for the rest.

    A JSON list is decoded record by record (a cut file keeps its earlier records; content after
    the list or after a single top-level record is quarantined piece by piece, see
    ``common.json_error_rows``); JSONL (:func:`is_jsonl`) is read line by line (a bad line, even
    one nested too deeply to decode, is quarantined with its line number and the next line still
    read).

    When ``src.escaped`` (``discover.read_file`` passes the text of a JSONL file with invalid
    UTF-8 decoded with ``errors="surrogateescape"``), a JSONL line holding escaped bytes
    (U+DC80..U+DCFF) is quarantined ``not_utf8`` with its line number and counts as a record
    (its index is used up, like a bad line's); a JSON document holding any is one ``not_utf8``
    row (a document cannot be split safely). A JSONL line holding NUL bytes is quarantined
    ``binary_file`` the same way (``discover`` passes such a file on instead of rejecting it whole).
    """
    text = src.read_text()
    dirty = _ESCAPED.search(text) if src.escaped else None
    stripped = text.lstrip(" \t\r\n")
    if stripped.startswith("{") and is_jsonl(stripped):
        yield from _read_jsonl(src, text, dirty is not None)
    elif dirty is not None:
        yield bad("not_utf8", f"invalid UTF-8 (bytes {_escaped_bytes(text[dirty.start():dirty.start() + 200])}) "
                  "in a JSON document", src.path, text.count("\n", 0, dirty.start()) + 1,
                  _undecoded(text[max(0, dirty.start() - 200):dirty.start() + 200]))
    else:
        yield from _read_document(src, text)


def _read_jsonl(src: Source, text: str, dirty: bool) -> Iterator[Trajectory | QuarantineRow]:
    """The records of a JSONL ``text``, one per non-blank line; ``dirty``: some line holds
    escaped invalid bytes (see :func:`read`)."""
    path, index = src.path, 0
    for no, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if "\x00" in line:  # binary data in one line: this line only, like invalid UTF-8
            yield bad("binary_file", "NUL bytes in this JSONL line (binary data, not text); the other lines "
                      "are read", path, no, line.replace("\x00", "\\x00"))
            index += 1
            continue
        if dirty and _ESCAPED.search(line):
            yield bad("not_utf8", f"invalid UTF-8 in this JSONL line (bytes {_escaped_bytes(line)}); "
                      "the other lines are read", path, no, _undecoded(line))
            index += 1
            continue
        try:
            rec = json.loads(line)
            yield parse_record(rec, [no] * len(_messages(rec)), src, index, no)
        except json.JSONDecodeError as e:
            yield bad("invalid_json", f"invalid JSON line: {e.msg} (column {e.colno})", path, no, line)
        except RecursionError:  # e.g. 100k nested brackets: this line only, the next is read
            yield bad("invalid_json", "invalid JSON line: nested too deeply to decode", path, no, line)
        except RecordError as e:
            yield bad("bad_record", str(e), path, no, line)
        except Exception as e:  # an unforeseen record shape costs this line, not the rest of the file
            yield bad("reader_error", f"{FORMAT}: {type(e).__name__}: {e}", path, no, line)
        index += 1


def _read_document(src: Source, text: str) -> Iterator[Trajectory | QuarantineRow]:
    """The records of a JSON document ``text``: a list of records, or one top-level record."""
    yield from read_json_members(src, text, functools.partial(_document_record, src, text), single_object=True)


def _document_record(src: Source, text: str, key: Any, rec: Any, index: int, pos: int, no: int
                     ) -> Iterator[Trajectory | QuarantineRow]:
    """Record number ``index`` of the document, at offset ``pos`` (line ``no``) of ``text``."""
    try:
        n = len(_messages(rec))
        yield parse_record(rec, _message_lines(text, pos, n, no), src, index, no)
    except RecordError as e:
        yield bad("bad_record", str(e), src.path, no, json.dumps(rec, ensure_ascii=False)[:4000])
    except Exception as e:  # an unforeseen record shape costs this record, not the rest
        yield bad("reader_error", f"{FORMAT}: {type(e).__name__}: {e}", src.path, no,
                  json.dumps(rec, ensure_ascii=False, default=str))

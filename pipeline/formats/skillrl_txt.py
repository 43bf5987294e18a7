"""Reader for SkillRL rollout dumps: ``envNNN/testK.txt``, one trajectory per file.

Each step block is a header ``Step <id> | Action: <a> | Reward: <r> | Done: <True|False>`` and an
``Obs:`` payload holding the full prompt of the next turn. We keep the reference's extraction
(task line, admissible list, observation after "your current observation is:") and fix:

* D-P1: the reward may be signed; a header that does not parse quarantines the file with its
  line instead of silently dropping the step (which shifted every later observation).
* D-P2: admissible items are recognised as quoted strings, also several on one line; unquoted
  items are split on commas for ALFWorld only (WebShop product titles contain commas).
* D-P3: success = the last step is done with reward >= 10, not "``Reward: 10.000`` anywhere".
* D-P4: the reset step's action is ``None``, not the string ``"None"``.
* D-P7: the observation is cut by template structure (everything from the admissible block on,
  and any turn instruction, whatever its wording), so WebShop prompts lose their boilerplate too.
* D-P8: optional lines between a step header and its ``Obs:`` line carry what the policy really
  said: ``Raw Model Output:`` (may span lines; its ``<think>`` becomes the step's ``thought``),
  ``Parsed Action:``, ``Valid Action: True|False`` and ``Invalid Reason:``. A step marked invalid
  is listed in metadata ``invalid_actions`` (``[{index, line, reason, parsed_action}]``) so that
  validation quarantines it (``invalid_action_in_source``) instead of training on the projection's
  garbage action; the step itself stays, since the environment did execute it.

Speed (the benchmark parses 12,000 files): headers are found with a ``str.find`` scan, identical
admissible blocks are parsed once per process (a bounded LRU), and the case-insensitive phrase
searches use ``str.find`` on ASCII text (identical results; the regexes remain for other text).
An ASCII file is lower-cased once and its step payloads are cleaned in place by offsets
(:func:`_clean_span`), so the usual step copies only its observation and its list body.
"""
from __future__ import annotations

import functools
import os
import re
from typing import Iterator

from pipeline import envs
from pipeline.core.records import QuarantineRow, Step, Trajectory
from pipeline.formats.common import Source, bad, reader_trajectory

FORMAT = "skillrl_txt"
WIN_REWARD = 10.0  # ALFWorld/WebShop env reward for a won episode (10 * won)

_HEADER = re.compile(r"^Step (-?\d+) \| Action: (.*?) \| Reward: ([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
                     r" \| Done: (True|False)\s*$")
_HEADER_AT = re.compile(_HEADER.pattern[1:])  # for .match(text, start, end): "^" matches only at 0 there
_BANNER = re.compile(r"^=== Trajectory for Test (\d+), Env (\d+) ===", re.M)
_TASK = re.compile(r"Your task is to:[ \t]*(.*)", re.I)
_ADMISSIBLE = re.compile(r"Your admissible actions of the current situation are:\s*\[(.*?)\]\.[ \t]*(?=\n|$)", re.S)
_OBS_PREFIX = re.compile(r"You are now at step \d+ and your current observation is:|Your current observation is:", re.I)
_TURN = re.compile(r"Now it's your turn to take (?:an|one) action.*\Z", re.S | re.I)
_WELCOME = re.compile(r"-=\s*Welcome to TextWorld,\s*ALFRED!\s*=-")
_TASK_LINE = re.compile(r"^[ \t]*Your task is to:.*(?:\n|$)", re.M | re.I)
_QUOTED_RUN = re.compile(r"""(?:'[^'\n]*'|"[^"\n]*")(?:\s*,\s*(?:'[^'\n]*'|"[^"\n]*"))*\s*,?""")
_QUOTED_ITEM = re.compile(r"""'([^'\n]*)'|"([^"\n]*)\"""")
# Whole body in the rollout writer's form: one quoted item per line (fast path of parse_admissible).
_SIMPLE_LIST = re.compile(r"""\s*'[^'\n]*'\s*(?:\n\s*'[^'\n]*'\s*,?\s*)*""")
_SIMPLE_ITEM = re.compile(r"'([^'\n]*)'")
_HEADER_LINE = re.compile(r"^Step -?\d+ \|.*$", re.M)
_OBS_LINE = re.compile(r"^Obs:", re.M)
_KEY_LINE = re.compile(r"^(Raw Model Output|Parsed Action|Valid Action|Invalid Reason):[ \t]?(.*)$")
_THINK = re.compile(r"<think>(.*?)</think>", re.S | re.I)
_ADM_LEAD = "Your admissible actions of the current situation are:"
RAW_TAIL = 400  # chars of a cut block kept on its quarantine row
DETECT_CHARS = 8192  # most text given to environment detection
_OBS_PHRASE = "your current observation is:"
_TURN_PHRASE = "now it's your turn to take "


def parse_admissible(body: str, env: str) -> list[str]:
    """Items of an admissible-action list body (the text between ``[`` and ``].``), in order.

    Quoted items are taken as written, several per line allowed (D-P2). An unquoted line has one
    trailing comma dropped and surrounding quotes removed; it is split on commas only when
    ``env == "alfworld"`` (WebShop titles contain commas). Empty items are dropped.
    """
    if _SIMPLE_LIST.fullmatch(body):  # one quoted item per line: same result as the loop below
        return [x.strip() for x in _SIMPLE_ITEM.findall(body) if x.strip()]
    items: list[str] = []
    for raw in body.split("\n"):
        piece = raw.strip()
        if not piece:
            continue
        if _QUOTED_RUN.fullmatch(piece):
            items += [(a or b).strip() for a, b in _QUOTED_ITEM.findall(piece) if (a or b).strip()]
            continue
        piece = piece[:-1].strip() if piece.endswith(",") else piece
        if len(piece) >= 2 and piece[0] == piece[-1] and piece[0] in "'\"":
            items.append(piece[1:-1].strip())
        elif env == "alfworld":
            items += [p.strip() for p in piece.split(",") if p.strip()]
        else:
            items.append(piece)
    return [i for i in items if i]


@functools.lru_cache(maxsize=4096)
def _admissible_cached(body: str, env: str) -> tuple[str, ...]:
    """:func:`parse_admissible`, memoised per process: a rollout tree repeats the same lists in
    many files (750 distinct bodies in 31,534 steps of the benchmark tree). Bounded (LRU)."""
    return tuple(parse_admissible(body, env))


def admissible_span(text: str, lead: int, end: int | None = None) -> tuple[int, int, int] | None:
    """``(block start, list body start, list body end)`` of the first admissible block of
    ``text[:end]`` at or after ``lead`` (an index of the block's lead phrase, or -1), or ``None``.

    The same span as ``_ADMISSIBLE.search(text[:end], lead)`` (its start, and the start and end
    of its group), found with ``str.find`` instead of a lazy regex, which tried every character
    of each list (the largest single cost of reading the benchmark tree): the lead phrase,
    whitespace, ``[``, then the first ``].`` followed by spaces or tabs up to a newline or
    ``end``; when no ``].`` qualifies, the next occurrence of the lead phrase. ``end``: where the
    payload ends in ``text`` (``None`` = its length), so a payload is searched in place.
    """
    n = len(text) if end is None else end
    while lead >= 0:
        i = lead + len(_ADM_LEAD)
        while i < n and text[i].isspace():  # the regex's \s* (str.isspace is the same class)
            i += 1
        if i < n and text[i] == "[":
            k = text.find("].", i + 1, n)
            while k >= 0:
                e = k + 2
                while e < n and text[e] in " \t":
                    e += 1
                if e == n or text[e] == "\n":
                    return lead, i + 1, k
                k = text.find("].", k + 1, n)
        lead = text.find(_ADM_LEAD, lead + 1, n)
    return None


def _after_obs_prefix(text: str) -> str:
    """Text after the first "...your current observation is:" (case-insensitive), else ``text``.

    Both reference phrases end in "your current observation is:", so on ASCII text the end of
    the regex match is the end of that phrase's first occurrence (a ``str.find``)."""
    if text.isascii():
        i = text.lower().find(_OBS_PHRASE)
        return text[i + len(_OBS_PHRASE):] if i >= 0 else text
    p = _OBS_PREFIX.search(text)
    return text[p.end():] if p else text


def clean_observation(payload: str, env: str) -> tuple[str, list[str]]:
    """Split an ``Obs:`` payload (a whole prompt) into (raw observation, admissible actions).

    Order (with D-P7): drop ``Obs:``; take the admissible block and cut the
    text there; keep what follows "...your current observation is:"; cut a remaining turn
    instruction; remove the TextWorld welcome banner and ``Your task is to:`` lines; trim.
    Admissible lists are memoised per process (``_admissible_cached``); each call gets its own list.
    """
    obs, admissible, _ = _clean_payload(payload, env)
    return obs, admissible


def _clean_payload(payload: str, env: str) -> tuple[str, list[str], bool]:
    """:func:`clean_observation`, plus whether ``payload`` holds the admissible list's lead
    phrase (``_ADM_LEAD in payload``: stripping and ``Obs:`` cannot cut into it)."""
    text = payload.strip()
    if text.startswith("Obs:"):
        text = text[4:].strip()
    admissible: list[str] = []
    lead = text.find(_ADM_LEAD)
    span = admissible_span(text, lead)
    if span:
        admissible = list(_admissible_cached(text[span[1]:span[2]], env))
        text = text[:span[0]]
    if text.isascii():  # the usual case: one lower-cased copy serves every phrase test
        return _clean_ascii(text), admissible, lead >= 0
    text = _after_obs_prefix(text)
    if not text.isascii() or _TURN_PHRASE in text.lower():
        text = _TURN.sub("", text)
    if "Welcome" in text:
        text = _WELCOME.sub("", text)
    if not text.isascii() or "your task is to:" in text.lower():
        text = _TASK_LINE.sub("", text)
    return text.strip(), admissible, lead >= 0


def _clean_ascii(text: str) -> str:
    """The tail of :func:`clean_observation` for ASCII ``text`` (same result, fewer copies: on
    ASCII, ``lower()`` keeps offsets, so phrase positions found in the copy apply to ``text``)."""
    low = text.lower()
    i = low.find(_OBS_PHRASE)
    if i >= 0:
        text, low = text[i + len(_OBS_PHRASE):], low[i + len(_OBS_PHRASE):]
    return _ascii_tail(text, low)


def _ascii_tail(text: str, low: str) -> str:
    """The last cuts of :func:`_clean_ascii` (``low`` = ``text.lower()``): a turn instruction,
    the TextWorld banner and ``Your task is to:`` lines, then a trim."""
    if _TURN_PHRASE in low:
        text = _TURN.sub("", text)
        low = text.lower()
    if "Welcome" in text:
        text = _WELCOME.sub("", text)
        low = text.lower()
    if "your task is to:" in low:
        text = _TASK_LINE.sub("", text)
    return text.strip()


def _clean_span(text: str, low: str, a: int, b: int, env: str) -> tuple[str, list[str], bool]:
    """``_clean_payload(text[a:b], env)`` for an ASCII ``text`` (``low`` = ``text.lower()``),
    worked out on offsets into the whole file, so the usual step copies only its observation
    and its list body (a step's payload is ~1.4 KB of prompt). A payload holding a turn
    instruction, the TextWorld banner or a task line after its observation phrase takes
    :func:`_ascii_tail` on a copy."""
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    if text.startswith("Obs:", a, b):
        a += 4
        while a < b and text[a].isspace():
            a += 1
    admissible: list[str] = []
    lead = text.find(_ADM_LEAD, a, b)
    span = admissible_span(text, lead, b)
    if span:
        admissible = list(_admissible_cached(text[span[1]:span[2]], env))
        b = span[0]
    i = low.find(_OBS_PHRASE, a, b)
    if i >= 0:
        a = i + len(_OBS_PHRASE)
    if (low.find(_TURN_PHRASE, a, b) >= 0 or text.find("Welcome", a, b) >= 0
            or low.find("your task is to:", a, b) >= 0):
        return _ascii_tail(text[a:b], low[a:b]), admissible, lead >= 0
    return text[a:b].strip(), admissible, lead >= 0


def _instance(path: str, banner_env: str | None) -> str:
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if re.fullmatch(r"env\d+", folder):
        return folder
    if banner_env is not None:
        return f"env{int(banner_env):03d}"
    return os.path.splitext(os.path.basename(path))[0]


def _header_spans(text: str) -> list[tuple[int, int, re.Match | None]]:
    """``(start, end, header match)`` of every line that starts a step (``Step <int> |``), in
    order; the match is ``None`` for such a line that is not a whole header (``_HEADER``). A
    ``str.find`` scan for "\\nStep " (the multi-line regex tried every position of the file);
    the full header pattern is tried first, so a good header costs one match."""
    spans = []
    pos = 0 if text.startswith("Step ") else text.find("\nStep ")
    while pos >= 0:
        start = pos if pos == 0 and text.startswith("Step ") else pos + 1
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        m = _HEADER_AT.match(text, start, end)
        if m or _HEADER_LINE.match(text, start, end):
            spans.append((start, end, m))
        pos = text.find("\nStep ", start)
    return spans


def split_block(body: str) -> tuple[str, dict[str, str]]:
    """``(Obs payload, {key: value})`` of the text after a step header (D-P8 key lines).

    Key lines are recognised only before the ``Obs:`` line; ``Raw Model Output`` runs until the
    next key line or ``Obs:``. A block without key lines is returned whole (reference behaviour).
    """
    if body.startswith("Obs:"):  # the usual block: nothing before Obs (same result as below)
        return body, {}
    o = _OBS_LINE.search(body)
    pre = body[:o.start()] if o else body
    if not pre.strip() or not any(_KEY_LINE.match(ln) for ln in pre.split("\n")):
        return body, {}
    keys: dict[str, str] = {}
    current = None
    for ln in pre.split("\n"):
        k = _KEY_LINE.match(ln)
        if k:
            current = k[1]
            keys[current] = k[2]
        elif current == "Raw Model Output":
            keys[current] += "\n" + ln
    return (body[o.start():] if o else ""), {k: v.strip() for k, v in keys.items()}


def read(src: Source) -> Iterator[Trajectory | QuarantineRow]:
    """Yield the one trajectory of a rollout file, or one quarantine row saying why not.

    Quarantine reasons: ``bad_step_header`` (a ``Step`` line that does not parse, D-P1),
    ``bad_step_sequence`` (ids not -1, 0, 1, ...: a step is missing), ``no_steps``, and
    ``truncated_file``: every step before the last has a complete admissible list in its ``Obs:``
    payload (the rollout writer always prints one) but the last has none or an unclosed one, so
    the file was cut inside its last block. A cut exactly between two blocks cannot be told from
    an episode that stopped there and still reads as one.
    env_instance is the ``envNNN`` folder (else the banner's env number, else the file stem).
    """
    path, text = src.path, src.read_text()
    heads = _header_spans(text)
    if not heads:
        yield bad("no_steps", "no 'Step <id> | Action: ...' headers found", path, 1, text)
        return
    low = text.lower() if text.isascii() else None  # ASCII: offsets in ``low`` are offsets in ``text``
    env = _detect_env(text, low, heads, src.env_hint)
    parsed = _steps(text, low, heads, env, path)
    if isinstance(parsed, QuarantineRow):
        yield parsed
        return
    steps, invalid = parsed
    banner = _BANNER.search(text, 0, heads[0][0])
    t = _task_match(text, low)
    task = t[1].strip() if t else ""
    last = steps[-1]
    won = last.done and last.reward >= WIN_REWARD  # D-P3
    meta = {"file": os.path.basename(path)}
    if banner:
        meta.update(test=int(banner[1]), env_number=int(banner[2]))
    if invalid:
        meta["invalid_actions"] = invalid
    yield reader_trajectory(
        env=env, env_instance=_instance(path, banner[2] if banner else None), task=task,
        outcome="success" if won else "failure", reward=last.reward, steps=steps,
        source_uri=src.source_uri, source_format=FORMAT, record_index=0, source_line=1, metadata=meta)


def _detect_env(text: str, low: str | None, heads: list[tuple[int, int, re.Match | None]], hint: str | None) -> str:
    """The environment of a rollout file: :func:`pipeline.envs.detect_env` on its first block
    (the banner and the Step -1 prompt, which names the environment; at most ``DETECT_CHARS``),
    else, when that block says nothing, on the first ``DETECT_CHARS`` of the file.

    The first block alone is also the right evidence: a later step's action such as
    ``click[...]`` written by an ALFWorld policy must not make the file a WebShop rollout.
    It is also ~5x less text to scan than the old fixed window (12,000 files per benchmark run)."""
    first = min(heads[1][0] if len(heads) > 1 else len(text), DETECT_CHARS)
    env = envs.detect_env(text[:first], hint, None if low is None else low[:first])
    if env == envs.OTHER and first < DETECT_CHARS:
        env = envs.detect_env(text[:DETECT_CHARS], hint, None if low is None else low[:DETECT_CHARS])
    return env


def _task_match(text: str, low: str | None) -> re.Match | None:
    """``_TASK.search(text)``; on ASCII text (``low`` = ``text.lower()``) the case-insensitive
    phrase is found with ``str.find`` first (the regex scanned the file character by character)."""
    if low is None:
        return _TASK.search(text)
    i = low.find("your task is to:")
    return _TASK.match(text, i) if i >= 0 else None


def _steps(text: str, low: str | None, heads: list[tuple[int, int, re.Match | None]], env: str, path: str
           ) -> tuple[list[Step], list[dict]] | QuarantineRow:
    """``(steps, invalid_actions)`` of the step blocks of ``text`` (``heads``: the header spans and
    matches of :func:`_header_spans`; a block's body runs to the next header and is read by
    offsets, not copied), or the quarantine row of the first problem: ``bad_step_header``,
    ``bad_step_sequence``, or ``truncated_file`` when the last block was cut short (see
    :func:`read`). ``low``: ``text.lower()`` when ``text`` is ASCII (every payload is then
    cleaned in place, :func:`_clean_span`), else ``None``."""
    steps, invalid = [], []
    with_list = 0  # steps whose Obs payload has an admissible list (complete: a later block follows)
    last = len(heads) - 1
    line, prev = 1, 0
    for k, (start, stop, m) in enumerate(heads):
        line, prev = line + text.count("\n", prev, start), start
        if not m:
            return bad("bad_step_header", "step header does not parse (expected "
                       "'Step <id> | Action: <a> | Reward: <float> | Done: True|False')", path, line,
                       text[start:stop])
        if int(m[1]) != k - 1:
            return bad("bad_step_sequence", f"step id {m[1]} where {k - 1} was expected (a step is missing "
                       "or out of order)", path, line)
        b = heads[k + 1][0] if k < last else len(text)
        a = min(stop + 1, b)
        # the usual block is "Obs: ..." with no key lines (split_block's own fast path, without the call)
        if text.startswith("Obs:", a, b):
            keys: dict[str, str] = {}
            obs, adm, has_list = (_clean_span(text, low, a, b, env) if low is not None
                                  else _clean_payload(text[a:b], env))
            payload = None
        else:
            payload, keys = split_block(text[a:b])
            obs, adm, has_list = _clean_payload(payload, env)
        if k == last and k > 0 and with_list == k and not (has_list and (
                admissible_span(text, text.find(_ADM_LEAD, a, b), b) if payload is None
                else admissible_span(payload, payload.find(_ADM_LEAD)))):
            return bad("truncated_file", "the last step's Obs payload ends before its admissible-action list is "
                       "complete, while every earlier step has one: the file was cut short (a cut episode would "
                       "otherwise read as a failure)", path, line, text[a:b][-RAW_TAIL:])
        with_list += has_list
        step_id, action, reward, done = m.groups()
        action = None if step_id == "-1" else action.strip()  # D-P4
        think = _THINK.search(keys["Raw Model Output"]) if keys and "Raw Model Output" in keys else None
        steps.append(Step(len(steps), action, obs, adm, float(reward), done == "True",
                          think[1].strip() or None if think else None, line))
        if not keys:
            continue
        valid = keys.get("Valid Action", "").lower()
        if action is not None and (valid == "false" or (valid != "true" and keys.get("Invalid Reason"))):
            invalid.append({"index": len(steps) - 1, "line": line, "reason": keys.get("Invalid Reason", ""),
                            "parsed_action": keys.get("Parsed Action")})
    return steps, invalid

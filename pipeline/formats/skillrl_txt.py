"""Reader for SkillRL rollout dumps: ``envNNN/testK.txt``, one trajectory per file (spec §2, §3.1).

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
"""
from __future__ import annotations

import os
import re
from typing import Iterator

from .. import envs
from ..records import QuarantineRow, Step, Trajectory
from .common import bad, build_trajectory

FORMAT = "skillrl_txt"
WIN_REWARD = 10.0  # ALFWorld/WebShop env reward for a won episode (10 * won, spec §2)

_STEP_START = re.compile(r"^Step -?\d+ \|")
_HEADER = re.compile(r"^Step (-?\d+) \| Action: (.*?) \| Reward: ([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
                     r" \| Done: (True|False)\s*$")
_BANNER = re.compile(r"^=== Trajectory for Test (\d+), Env (\d+) ===")
_TASK = re.compile(r"Your task is to:[ \t]*(.*)", re.I)
_ADMISSIBLE = re.compile(r"Your admissible actions of the current situation are:\s*\[(.*?)\]\.[ \t]*(?=\n|$)", re.S)
_OBS_PREFIX = re.compile(r"You are now at step \d+ and your current observation is:|Your current observation is:", re.I)
_TURN = re.compile(r"Now it's your turn to take (?:an|one) action.*\Z", re.S | re.I)
_WELCOME = re.compile(r"-=\s*Welcome to TextWorld,\s*ALFRED!\s*=-")
_TASK_LINE = re.compile(r"^[ \t]*Your task is to:.*(?:\n|$)", re.M | re.I)
_QUOTED_RUN = re.compile(r"""(?:'[^'\n]*'|"[^"\n]*")(?:\s*,\s*(?:'[^'\n]*'|"[^"\n]*"))*\s*,?""")
_QUOTED_ITEM = re.compile(r"""'([^'\n]*)'|"([^"\n]*)\"""")


def parse_admissible(body: str, env: str) -> list[str]:
    """Items of an admissible-action list body (the text between ``[`` and ``].``), in order.

    Quoted items are taken as written, several per line allowed (D-P2). An unquoted line has one
    trailing comma dropped and surrounding quotes removed; it is split on commas only when
    ``env == "alfworld"`` (WebShop titles contain commas). Empty items are dropped.
    """
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


def clean_observation(payload: str, env: str) -> tuple[str, list[str]]:
    """Split an ``Obs:`` payload (a whole prompt) into (raw observation, admissible actions).

    Order (spec §3.1 steps 6-9, with D-P7): drop ``Obs:``; take the admissible block and cut the
    text there; keep what follows "...your current observation is:"; cut a remaining turn
    instruction; remove the TextWorld welcome banner and ``Your task is to:`` lines; trim.
    """
    text = payload.strip()
    if text.startswith("Obs:"):
        text = text[4:].strip()
    admissible: list[str] = []
    m = _ADMISSIBLE.search(text)
    if m:
        admissible = parse_admissible(m.group(1), env)
        text = text[:m.start()]
    p = _OBS_PREFIX.search(text)
    if p:
        text = text[p.end():]
    text = _TURN.sub("", text)
    text = _WELCOME.sub("", text)
    text = _TASK_LINE.sub("", text)
    return text.strip(), admissible


def _instance(path: str, banner_env: str | None) -> str:
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if re.fullmatch(r"env\d+", folder):
        return folder
    if banner_env is not None:
        return f"env{int(banner_env):03d}"
    return os.path.splitext(os.path.basename(path))[0]


def read(path: str, env_hint: str | None = None, *, success_threshold: float = 1.0
         ) -> Iterator[Trajectory | QuarantineRow]:
    """Yield the one trajectory of a rollout file, or one quarantine row saying why not.

    Quarantine reasons: ``bad_step_header`` (a ``Step`` line that does not parse, D-P1),
    ``bad_step_sequence`` (ids not -1, 0, 1, ...: a step is missing), ``no_steps``.
    env_instance is the ``envNNN`` folder (else the banner's env number, else the file stem).
    """
    with open(path, encoding="utf-8") as f:
        text = f.read()
    env = envs.detect_env(text, env_hint)
    banner = None
    blocks: list[dict] = []
    for no, line in enumerate(text.split("\n"), 1):
        if _STEP_START.match(line):
            h = _HEADER.match(line)
            if not h:
                yield bad("bad_step_header", "step header does not parse (expected "
                          "'Step <id> | Action: <a> | Reward: <float> | Done: True|False')", path, no, line)
                return
            blocks.append({"id": int(h[1]), "action": h[2], "reward": float(h[3]), "done": h[4] == "True",
                           "line": no, "obs": []})
        elif blocks:
            blocks[-1]["obs"].append(line)
        elif banner is None:
            banner = _BANNER.match(line)
    if not blocks:
        yield bad("no_steps", "no 'Step <id> | Action: ...' headers found", path, 1, text)
        return
    for k, b in enumerate(blocks):
        if b["id"] != k - 1:
            yield bad("bad_step_sequence", f"step id {b['id']} where {k - 1} was expected (a step is missing "
                      "or out of order)", path, b["line"])
            return
    steps = []
    for b in blocks:
        obs, adm = clean_observation("\n".join(b["obs"]), env)
        action = None if b["id"] == -1 else b["action"].strip()  # D-P4
        steps.append(Step(index=0, action=action, observation=obs, admissible_actions=adm,
                          reward=b["reward"], done=b["done"], line=b["line"]))
    t = _TASK.search(text)
    task = t[1].strip() if t else ""
    last = steps[-1]
    won = last.done and last.reward >= WIN_REWARD  # D-P3
    meta = {"file": os.path.basename(path)}
    if banner:
        meta.update(test=int(banner[1]), env_number=int(banner[2]))
    yield build_trajectory(
        env=env, env_instance=_instance(path, banner[2] if banner else None), task=task,
        outcome="success" if won else "failure", reward=last.reward, steps=steps,
        source_uri=path, source_format=FORMAT, record_index=0, source_line=1, metadata=meta)

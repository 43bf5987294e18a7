"""Section 2 of the reliability suite: the corrupt-input matrix.

Each kind is an input folder holding ``good.jsonl`` (three valid chat-format trajectories) and
one bad item. ``skillpipe run --stages parse,remove_loops,verify`` reads it (the stub is the LLM,
never called: parse reads the input). Checks per kind: the run exits 0; the bad item is
quarantined with a reason naming its file (or, for a kind that is legitimately readable, e.g.
CRLF line ends, its records are read); units in = units out + quarantined at every stage; the
three good trajectories and the good records inside the bad file all come out (nothing else
lost). The last kinds are readable trajectories that break their environment's rules or give a
checker nothing to hold on to (no room description, no pages, no answer, garbage actions): verify
must give each its expected verdict and never a ``verify_error``.

Outcome ``ok``, ``FAIL`` (crash, loss, or a bad item that vanished without a quarantine row), or
``NOTE`` (passed, with a caveat written in the table, e.g. chmod 000 under root).
"""
from __future__ import annotations

import json
import os
import random
import shutil
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from bench.reliability_common import cli_args, md_table, quarantine_rows, rows, run_cli, run_state, write_config


def chat(task: str, action: str, **extra) -> dict:
    """A minimal valid chat-format trajectory record (one action)."""
    return {"messages": [{"role": "user", "content": f"Your task is to: {task}."},
                         {"role": "assistant", "content": f"Thought: I should go there.\nAction: {action}"},
                         {"role": "user", "content": "Observation: You arrive there."}], **extra}


def line(task: str, action: str = "go to desk 1", **extra) -> str:
    """:func:`chat` as one JSONL line (no newline)."""
    return json.dumps(chat(task, action, **extra))


GOOD = "\n".join(line(t, a) for t, a in [("put a mug on the desk", "go to desk 1"),
                                         ("put a pen in the drawer", "go to drawer 2"),
                                         ("clean a cup and put it on the shelf", "go to sinkbasin 1")]) + "\n"
B = "bad.jsonl"  # the usual name of the bad item


@dataclass
class Kind:
    """A corrupt-input kind: ``build(folder)`` writes the bad item(s); ``good_inside`` records of
    it are valid and must come out; ``expect`` is ``"quarantine"`` (at least one quarantine row
    names the bad item), ``"read"`` (its records come out, none quarantined) or ``"either"``."""
    name: str
    build: Callable[[str], str | None]  # returns a caveat for the table, or None
    good_inside: int = 0
    expect: str = "quarantine"
    verify: str = ""  # the verify verdict every trajectory of the bad item must get ("" = not checked)


def _write(folder: str, name: str, data: bytes | str) -> None:
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


def w(name: str, data: bytes | str) -> Callable[[str], None]:
    """A ``Kind.build`` that writes ``data`` to file ``name`` of the folder."""
    return lambda folder: _write(folder, name, data)


def _chmod000(folder: str) -> str | None:
    _write(folder, B, line("water the plant", "go to shelf 1") + "\n")
    os.chmod(os.path.join(folder, B), 0)
    if os.access(os.path.join(folder, B), os.R_OK):
        return "running as root: chmod 000 does not stop reading, so the file is read (the check is moot here)"
    return None


def _symlink_loop(folder: str) -> None:
    os.symlink("loop_b.jsonl", os.path.join(folder, "loop_a.jsonl"))
    os.symlink("loop_a.jsonl", os.path.join(folder, "loop_b.jsonl"))


def _dir_named_like_file(folder: str) -> None:
    os.makedirs(os.path.join(folder, "trajectories.jsonl", "nested.json"))


def _fifo(folder: str) -> str:
    os.mkfifo(os.path.join(folder, "pipe.jsonl"))
    return "a FIFO is not a file: skipped without a row, as list_input_files documents"


def _utf16(folder: str) -> None:
    _write(folder, B, (line("water the plant", "go to shelf 1") + "\n").encode("utf-16"))


def _zero_step() -> str:
    return json.dumps({"messages": [{"role": "user", "content": "Your task is to: open the fridge."}]}) + "\n"


def _episode(first: str, turns: list[tuple[str, str]]) -> str:
    """One chat JSONL record: ``first`` user turn, then (action, observation) turns."""
    msgs = [{"role": "user", "content": first}]
    for action, obs in turns:
        msgs += [{"role": "assistant", "content": f"Thought: next.\nAction: {action}"},
                 {"role": "user", "content": f"Observation: {obs}"}]
    return json.dumps({"messages": msgs}) + "\n"


ROOM = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a diningtable 1, "
        "a microwave 1, and a fridge 1.\n\nYour task is to: heat some egg and put it in diningtable.")
VERIFY_KINDS = [
    Kind("verify_impossible_alfworld", w(B, _episode(ROOM, [
        ("go to dining table 1", "On the dining table 1, you see an egg 1."),
        ("heat egg 1 with fridge 1", "You heat the egg 1 using the fridge 1."),
        ("take \u00e9gg \u2603 from diningtable 1", "You pick up the egg."),
        ("put egg 1 in/on diningtable 1", "You put the egg 1 in/on the diningtable 1.")])),
         good_inside=1, expect="read", verify="demoted"),
    Kind("verify_alfworld_without_room", w(B, _episode("Your task is to: heat some egg and put it in diningtable.",
                                                       [("go to microwave 1", "")])),
         good_inside=1, expect="read", verify="unchecked"),
    Kind("verify_webshop_without_pages", w(B, _episode("WebShop Instruction: i want a red mug [Search]",
                                                       [("click[Buy Now]", ""), ("search[]", "reward = 1.0")])),
         good_inside=1, expect="read", verify="demoted"),
    Kind("verify_garbage_actions", w(B, _episode(ROOM, [("[" * 500 + "\x07", "Nothing happens."),
                                                        ("go to " + "x" * 20000, "?" * 5000)])),
         good_inside=1, expect="read", verify="demoted"),
]
JUNK = bytes(random.Random(0).getrandbits(8) for _ in range(4096))
GOOD2 = line("heat an egg and put it on the table", "go to microwave 1")
KINDS: list[Kind] = [
    Kind("truncated_json", w("bad.json", '[{"messages": [{"role": "user", "content": "Your ta')),
    Kind("truncated_jsonl_last_line", w(B, GOOD2 + "\n" + line("cool a tomato")[:40]), good_inside=1),
    Kind("binary_junk", w("bad.bin", JUNK)),
    Kind("latin1_text", w("bad.txt", "Your task is to: caf\xe9 au lait\n> go to desk 1\n".encode("latin-1"))),
    Kind("latin1_in_jsonl", w(B, json.dumps(chat("put a caf\u00e9 mug on the desk", "go to desk 1"),
                                            ensure_ascii=False).encode("latin-1") + b"\n")),
    Kind("utf16_with_bom", _utf16, expect="either"),
    Kind("utf8_bom", w(B, "\ufeff" + GOOD2 + "\n"), good_inside=1, expect="either"),
    Kind("empty_file", w(B, b""), expect="either"),
    Kind("nul_bytes", w(B, GOOD2 + "\n" + '{"messages": [\x00\x00\x00]}\n'), good_inside=1),
    Kind("deeply_nested_jsonl_line", w(B, GOOD2 + "\n" + "[" * 100_000 + "]" * 100_000 + "\n"
                                         + line("slice a bread")), good_inside=2),
    Kind("huge_single_line", w(B, '{"junk": "' + "x" * 8_000_000 + '"}\n')),
    Kind("json_trailing_garbage", w("bad.json", json.dumps([chat("chill a wine bottle", "go to fridge 1")])
                                     + " }}garbage"), good_inside=1),
    Kind("json_second_document", w("bad.json", json.dumps([chat("wash a plate", "go to sinkbasin 1")])
                                    + json.dumps([chat("find a key", "go to drawer 1")])), good_inside=1),
    Kind("nan_reward", w(B, line("light a lamp", reward=0.5).replace("0.5", "NaN") + "\n")),
    Kind("infinity_reward", w(B, line("light a lamp", reward=0.5).replace("0.5", "1e999999") + "\n")),
    Kind("missing_required_keys", w(B, '{"id": "x-1", "note": "no messages here"}\n')),
    Kind("wrong_types", w(B, '{"messages": "not a list"}\n{"messages": [1, 2, 3]}\n')),
    Kind("json_scalar_top_level", w("bad.json", "42")),
    Kind("json_null_top_level", w("bad.json", "null")),
    Kind("duplicate_trajectories", w("zz_copy.jsonl", GOOD)),  # sorts after good.jsonl: the copy is the duplicate
    Kind("symlink_loop", _symlink_loop),
    Kind("dangling_symlink", lambda f: os.symlink("does-not-exist.jsonl", os.path.join(f, "dangling.jsonl"))),
    Kind("unreadable_chmod_000", _chmod000, expect="quarantine"),
    Kind("directory_named_like_a_file", _dir_named_like_file, expect="either"),
    Kind("zero_step_trajectory", w(B, _zero_step())),
    Kind("crlf_line_ends", w(B, GOOD2.replace("\n", "") + "\r\n"), good_inside=1, expect="read"),
    Kind("lone_surrogate_escape", w(B, line("find a \\ud800 thing").replace("\\\\ud800", "\\ud800") + "\n"),
         expect="either"),
    Kind("invalid_utf8_mid_file", w(B, GOOD2.encode() + b"\n" + b'{"messages": "\xff\xfe\xfa"}\n'), good_inside=1),
    Kind("fifo_in_input", _fifo, expect="either"),
    *VERIFY_KINDS,
]


@dataclass
class CorruptResult:
    """One row of the matrix (``outcome``: ok | NOTE | FAIL; ``note``: the problems or caveat)."""
    kind: str
    rc: int
    reasons: str
    good_out: int
    good_expected: int
    reconciled: bool
    quarantined_bad: int
    outcome: str
    note: str


def check_kind(work: str, config: str, kind: Kind) -> CorruptResult:
    """Build ``kind``'s input folder under ``work``, run parse, remove_loops and verify on it, check it."""
    folder = os.path.join(work, "in", kind.name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    _write(folder, "good.jsonl", GOOD)
    note = kind.build(folder) or ""
    run_id = f"corrupt-{kind.name}"
    res = run_cli(cli_args(work, run_id, config, input_path=folder, stages="parse,remove_loops,verify"), timeout_s=120,
                  log_path=os.path.join(work, f"{run_id}.log"))
    state = run_state(work, run_id)
    out = rows(work, run_id, "parse")
    q = [r for r in quarantine_rows(work, run_id, "parse") if not r["source_uri"].endswith("good.jsonl")]
    reasons = Counter(r["reason"] for r in q)
    from_good = sum(1 for r in out if r["source_uri"].endswith("good.jsonl"))
    from_bad = len(out) - from_good
    expected_good = 3 + kind.good_inside
    problems = []
    if res.returncode != 0:
        problems.append(f"rc {res.returncode}: {(res.stderr or res.stdout).strip().splitlines()[-1:]}")
    if "parse" in state.counts and not state.reconciled():
        problems.append("counts do not reconcile")
    if kind.name != "duplicate_trajectories" and len(out) < expected_good:
        problems.append(f"{expected_good - len(out)} good record(s) lost")
    if kind.name == "duplicate_trajectories" and (from_good != 3 or reasons.get("duplicate_trajectory") != 3):
        problems.append("duplicates not quarantined as duplicate_trajectory")
    if kind.expect == "quarantine" and not q and not note:
        problems.append("bad item vanished: no quarantine row names it")
    if kind.expect == "read" and (q or from_bad < kind.good_inside):
        problems.append("a readable file was not read")
    problems += _verify_problems(work, run_id, kind)
    outcome = "FAIL" if problems else ("NOTE" if note else "ok")
    return CorruptResult(kind.name, res.returncode, ", ".join(f"{k}={v}" for k, v in sorted(reasons.items())) or "-",
                         len(out), expected_good, state.reconciled() and "parse" in state.counts, len(q), outcome,
                         "; ".join(problems + ([note] if note else [])))


def _verify_problems(work: str, run_id: str, kind: Kind) -> list[str]:
    """What is wrong with verify's handling of the bad item: a ``verify_error``, or a verdict
    other than ``kind.verify`` for one of its trajectories."""
    out = [f"verify_error: {q['detail']}" for q in quarantine_rows(work, run_id, "verify") if q["reason"] == "verify_error"]
    if kind.verify:
        got = sorted({json.loads(r["metadata"])["verify"]["verdict"] for r in rows(work, run_id, "verify")
                      if not r["source_uri"].endswith("good.jsonl")})
        if got != [kind.verify]:
            out.append(f"verify verdicts {got}, expected [{kind.verify!r}]")
    return out


def matrix(work: str, base_url: str, kinds: list[Kind] | None = None, log=print) -> list[CorruptResult]:
    """Check every kind (default :data:`KINDS`) under ``work``; ``base_url``: the stub's (never
    called by these stages, but the config names one)."""
    config = write_config(os.path.join(work, "corrupt.yaml"), base_url)
    results = []
    for kind in kinds or KINDS:
        results.append(check_kind(work, config, kind))
        log(f"corrupt {kind.name}: {results[-1].outcome} {results[-1].note}")
    return results


def table(results: list[CorruptResult]) -> str:
    """The matrix as a Markdown table, one row per kind."""
    head = ["kind", "rc", "quarantined from the bad item (reasons)", "rows out / good expected", "reconciled",
            "outcome", "note"]
    return md_table(head, [[r.kind, r.rc, f"{r.quarantined_bad}: {r.reasons}", f"{r.good_out} / {r.good_expected}",
                            "yes" if r.reconciled else "NO", r.outcome, r.note] for r in results])

"""Reader for Reflexion's HotpotQA ReAct logs (noahshinn/reflexion ``hotpotqa_runs``; see the
data's SOURCE.md): agent blocks under ``BEGIN CORRECT|INCORRECT|HALTED AGENTS`` sections,
optionally inside ``BEGIN TRIAL k`` blocks.

An agent block is ``Question: <q>`` (from trial 2 on extended by "You have attempted to answer
..." and a ``Reflections:`` list), then ``Thought i:`` / ``Action i:`` / ``Observation i:`` lines
(observations may span lines). How a complete block closes depends on the log (both real files
in the data's SOURCE.md): in the multi-trial log every block ends with ``Correct answer: <gold>``;
the single-trial base log has no gold lines, and its CORRECT / INCORRECT blocks end with
``Observation n: Answer is CORRECT`` / ``... INCORRECT`` while HALTED blocks end with the
observation of their last action.

Normalisation (ours): env ``search``; the section is the label (CORRECT -> success, reward 1.0;
INCORRECT and HALTED -> failure, reward 0.0, metadata ``halted``); each ``Thought i`` is the
``thought`` of ``Action i``; ``Search[x]`` / ``Finish[x]`` become ``<search>x</search>`` /
``<answer>x</answer>`` (:func:`pipeline.envs.search.normalise_action`, so every QA source shares
SkillRL Search's action syntax; ``Lookup[x]`` is kept verbatim and left to validation). The task
is the question without the reflection suffix; the gold answer and reflections go to metadata
(never into a step, so they cannot leak into a prompt). env_instance = ``q-<hash of question>``,
so every trial of one question lands in the same train/val split.
"""
from __future__ import annotations

import re
from typing import Iterator

from pipeline.envs import search as search_env
from pipeline.core.lineage import content_hash
from pipeline.core.records import QuarantineRow, Step, Trajectory
from pipeline.formats.common import Source, bad, reader_trajectory

FORMAT = "reflexion_hotpotqa"
_SECTION = re.compile(r"^-{5,} BEGIN (CORRECT|INCORRECT|HALTED) AGENTS -{5,}\s*$")
_TRIAL = re.compile(r"^BEGIN TRIAL (\d+)\s*$")
_RULE = re.compile(r"^#{5,}\s*$|^Trial summary:")
_QUESTION = re.compile(r"^Question:\s?(.*)$")
_TURN = re.compile(r"^(Thought|Action|Observation) (\d+):\s?(.*)$")
_GOLD = re.compile(r"^Correct answer:\s?(.*)$")
_ATTEMPTED = "You have attempted to answer following question before and failed."
OUTCOME = {"CORRECT": ("success", 1.0), "INCORRECT": ("failure", 0.0), "HALTED": ("failure", 0.0)}


def _agents(lines: list[str]):
    """Yield ``(trial, section, first_line, block_lines)``; ``block_lines`` = [(line_no, text)]."""
    trial, section, block = None, None, None
    for no, text in enumerate(lines, 1):
        t, s = _TRIAL.match(text), _SECTION.match(text)
        if t or s or _RULE.match(text) or _QUESTION.match(text):
            if block:
                yield trial, section, block[0][0], block
            block = None
            if t:
                trial = int(t[1])
            elif s:
                section = s[1]
            elif _QUESTION.match(text):
                block = [(no, text)]
            continue
        if block is not None:
            block.append((no, text))
    if block:
        yield trial, section, block[0][0], block


def parse_block(block: list[tuple[int, str]]) -> dict:
    """``{question, reflections, gold, turns: [(i, kind, text, line)]}`` of one agent block."""
    question = [_QUESTION.match(block[0][1])[1]]
    turns: list[list] = []
    gold = None
    for no, text in block[1:]:
        m, g = _TURN.match(text), _GOLD.match(text)
        if m:
            turns.append([int(m[2]), m[1], m[3], no])
        elif g:
            gold = g[1].strip()
        elif turns:
            turns[-1][2] += "\n" + text
        else:
            question.append(text)
    q = "\n".join(question)
    reflections = []
    if _ATTEMPTED in q:
        head, _, rest = q.partition(_ATTEMPTED)
        q = head
        after = rest.split("Reflections:", 1)[1] if "Reflections:" in rest else ""
        reflections = [ln.strip()[2:].strip() for ln in after.split("\n") if ln.strip().startswith("- ")]
    return {"question": q.strip(), "reflections": reflections, "gold": gold, "turns": turns}


def _cut_short(section: str, b: dict, gold_style: bool, ends_in_newline: bool) -> str | None:
    """Why the LAST agent block of a file is not closed like a complete one (``None`` if it is).

    The file must end with a newline (the reference prints whole lines; both real logs end with
    one), else its last line, even a ``Correct answer:`` line, may be cut mid-text.
    ``gold_style``: the file has ``Correct answer:`` lines, so every complete block ends with one.
    Otherwise (base log) the last turn must be the observation of the last action; in CORRECT /
    INCORRECT sections exactly ``Answer is CORRECT`` / ``Answer is INCORRECT`` (a HALTED block
    closes with whatever its last observation is).
    """
    if not ends_in_newline:
        return "the file ends inside the block's last line (no final newline)"
    if b["gold"] is not None:
        return None
    if gold_style:
        return "no 'Correct answer:' line, which closes every complete block of this log"
    turns = b["turns"]
    actions = [i for i, kind, _, _ in turns if kind == "Action"]
    if not turns or turns[-1][1] != "Observation" or not actions or turns[-1][0] != actions[-1]:
        return "the block does not end with the observation of its last action"
    if section != "HALTED" and turns[-1][2].strip() != f"Answer is {section}":
        return f"the last observation is not 'Answer is {section}'"
    return None


def read(src: Source) -> Iterator[Trajectory | QuarantineRow]:
    """Yield one trajectory per agent block.

    Quarantine reasons: ``no_section`` (agent block before any BEGIN ... AGENTS header, so no
    label), ``truncated_record`` (the file's last block is not closed the way complete blocks of
    the log are, see :func:`_cut_short`: the log was cut short; earlier blocks still read, and a
    cut one would otherwise read as a finished agent, even a success), ``bad_record`` (no action,
    or a turn number out of order).
    """
    path, whole = src.path, src.read_text()
    lines = whole.split("\n")
    gold_style = any(_GOLD.match(ln) for ln in lines)
    agents = list(_agents(lines))
    for k, (trial, section, first, block) in enumerate(agents):
        raw = "\n".join(t for _, t in block)
        if section is None:
            yield bad("no_section", "agent block outside a BEGIN CORRECT|INCORRECT|HALTED AGENTS section "
                      "(no outcome label)", path, first, raw)
            continue
        b = parse_block(block)
        why = _cut_short(section, b, gold_style, whole.endswith("\n")) if k == len(agents) - 1 else None
        if why:
            yield bad("truncated_record", f"last agent block is cut short: {why}", path, first, raw)
            continue
        steps = [Step(index=0, action=None, observation="", line=first)]
        thought, problem = None, None
        for i, kind, text, no in b["turns"]:
            text = text.strip()
            if kind == "Thought":
                thought = text
            elif kind == "Action":
                if i != len(steps):
                    problem = f"Action {i} where Action {len(steps)} was expected"
                    break
                steps.append(Step(index=0, action=search_env.normalise_action(text), observation="",
                                  thought=thought, line=no))
                thought = None
            elif len(steps) > 1 and i == len(steps) - 1:
                steps[-1].observation = text
            else:
                problem = f"Observation {i} does not follow Action {i}"
                break
        if problem or len(steps) < 2:
            yield bad("bad_record", problem or "agent block has no action", path, first, raw)
            continue
        outcome, reward = OUTCOME[section]
        if outcome == "success" or steps[-1].action.startswith("<answer>"):
            steps[-1].done = True
        steps[-1].reward = reward
        meta = {"section": section, "trial": trial, "gold_answer": b["gold"], "reflections": b["reflections"],
                "halted": section == "HALTED", "outcome_source": "section_label"}
        if thought:
            meta["trailing_thought"] = thought
        yield reader_trajectory(
            env="search", env_instance="q-" + content_hash(b["question"], n=12), task=b["question"],
            outcome=outcome, reward=reward, steps=steps, source_uri=src.source_uri, source_format=FORMAT,
            record_index=k, source_line=first, category_hint="hotpotqa", metadata=meta)

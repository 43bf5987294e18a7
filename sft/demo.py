"""A dozen literal SFT pairs written as an export-like artifact, for tests, the GPU benchmark and
smoke runs of the SFT job without running the LLM stages.

The rows follow ``records.SFT_PAIR_SCHEMA`` and the prompt layout of ``pipeline.prompts``
(system: header + task; user: ``## Current Progress`` block with the admissible list and the
turn instruction; assistant: ``<think>..</think>\\n<action>..</action>``). They are our own
ALFWorld-style examples, short so that a CPU step stays around a second.
"""
from __future__ import annotations

from pipeline.core.artifacts import ArtifactStore, StageArtifact
from pipeline.core.lineage import content_hash, step_id
from pipeline.core.recorder import counts
from pipeline.core.records import SFT_PAIR_SCHEMA, to_table

HEADER = "You are an expert agent operating in the ALFRED Embodied Environment."
TURN = "Now it's your turn to take an action. Reason in <think> </think>, then act in <action> </action>."
BANK_VERSION = "bank-demo-0001"

#: (task, observation, admissible actions, think, action)
STEPS = [
    ("put a mug in desk.", "You are in the middle of a room. You see a desk 1 and a shelf 1.",
     ["go to desk 1", "go to shelf 1"], "Mugs are often on shelves.", "go to shelf 1"),
    ("put a mug in desk.", "On the shelf 1, you see a mug 1.",
     ["take mug 1 from shelf 1", "go to desk 1"], "The mug is here.", "take mug 1 from shelf 1"),
    ("put a mug in desk.", "You pick up the mug 1 from the shelf 1.",
     ["go to desk 1", "go to shelf 1"], "Now bring it to the desk.", "go to desk 1"),
    ("put a mug in desk.", "On the desk 1, you see a pen 1.",
     ["move mug 1 to desk 1", "go to shelf 1"], "Place the mug.", "move mug 1 to desk 1"),
    ("heat some egg and put it in fridge.", "You see a fridge 1, a microwave 1 and a countertop 1.",
     ["go to countertop 1", "go to fridge 1"], "Eggs are on countertops.", "go to countertop 1"),
    ("heat some egg and put it in fridge.", "On the countertop 1, you see an egg 1.",
     ["take egg 1 from countertop 1", "go to microwave 1"], "Take the egg.", "take egg 1 from countertop 1"),
    ("heat some egg and put it in fridge.", "You pick up the egg 1 from the countertop 1.",
     ["go to microwave 1", "go to fridge 1"], "Heat it first.", "go to microwave 1"),
    ("heat some egg and put it in fridge.", "The microwave 1 is closed.",
     ["heat egg 1 with microwave 1", "open microwave 1"], "Heat the egg.", "heat egg 1 with microwave 1"),
    ("look at book under the desklamp.", "You see a bed 1, a desk 1 and a drawer 1.",
     ["go to bed 1", "go to desk 1"], "Books lie on beds.", "go to bed 1"),
    ("look at book under the desklamp.", "On the bed 1, you see a book 1.",
     ["take book 1 from bed 1", "go to desk 1"], "Take the book.", "take book 1 from bed 1"),
    ("look at book under the desklamp.", "You pick up the book 1 from the bed 1.",
     ["go to desk 1", "go to drawer 1"], "The lamp is on the desk.", "go to desk 1"),
    ("look at book under the desklamp.", "On the desk 1, you see a desklamp 1.",
     ["use desklamp 1", "go to bed 1"], "Turn on the lamp.", "use desklamp 1"),
]


def demo_rows() -> list[dict]:
    """The 12 pairs as ``SFT_PAIR_SCHEMA`` rows; the last task instance is the val split."""
    rows = []
    for n, (task, obs, adm, think, action) in enumerate(STEPS):
        instance = f"demo/{task.split()[0]}"
        trajectory_id = content_hash("demo", task)
        adm_line = "Your admissible actions of the current situation are: [" + "\n ".join(
            f"'{a}'" for a in adm) + "]."
        messages = [
            {"role": "system", "content": f"{HEADER} Your task is to: {task}"},
            {"role": "user", "content": f"## Current Progress\n\nYour current observation is: {obs}\n"
                                        f"{adm_line}\n\n{TURN}"},
            {"role": "assistant", "content": f"<think>{think}</think>\n<action>{action}</action>"},
        ]
        rows.append({
            "pair_id": content_hash("demo-pair", n), "trajectory_id": trajectory_id,
            "step_id": step_id(trajectory_id, n % 4 + 1), "step_index": n % 4 + 1, "env": "alfworld",
            "env_instance": instance, "category": "demo", "messages": messages,
            "instruction": messages[0]["content"] + "\n\n" + messages[1]["content"],
            "output": messages[2]["content"], "action": action, "think": think, "synthetic": False,
            "memory_ids": [], "skill_ids_used": [], "bank_version": BANK_VERSION,
            "source_uri": "sft/demo.py", "source_line": None, "model": "literal", "prompt_sha": "",
            "flags": [], "split": "val" if task.startswith("look") else "train", "usefulness": None})
    return rows


def write_demo_export(root: str, run_id: str = "sft-demo", repeat: int = 1) -> StageArtifact:
    """Write the demo pairs (each ``repeat`` times, for benchmarks) as the ``export`` stage of
    ``<root>/runs/<run_id>/``; returns the artifact (its manifest carries a ``fingerprint``)."""
    rows = [dict(r, pair_id=f"{r['pair_id']}-{k}") for k in range(repeat) for r in demo_rows()]
    store = ArtifactStore(root, run_id)
    manifest = {"stage": "export", "fingerprint": content_hash("demo-export", repeat, rows),
                "counts": counts(len(rows), len(rows), where="export")}
    return store.write("export", to_table(rows, SFT_PAIR_SCHEMA), [], manifest)

"""Bank exports (pipeline/bank/export.py) and the `skillpipe bank` CLI (pipeline/bank/cli.py):
SkillRL skill_bank.json that validates against schemas/skill_bank.schema.json and names every
skill's source memories, SKILL.md folders with front matter, and list/show/diff/restore output."""
from __future__ import annotations

import json
import os

import jsonschema
import yaml
from typer.testing import CliRunner

from pipeline.bank import rows as skillbank
from pipeline.bank.cli import app
from pipeline.bank.export import export_skill_md, export_skillrl, slug
from pipeline.bank.store import BankStore
from pipeline.llm.schemas import load_schema


def bank_rows() -> list[dict]:
    return [
        skillbank.make_row("general", "", {"title": "Explore Systematically", "principle": "Visit each place once.",
                                           "when_to_apply": "When the object is not in view."},
                           ["mem-2", "mem-1"], ["traj-2", "traj-1"], env="alfworld"),
        skillbank.make_row("task_specific", "cool", {"title": "Cool With Fridge", "principle": "Use the fridge.",
                                                     "when_to_apply": "When the goal says cool."},
                           ["mem-1"], ["traj-1"], env="alfworld"),
        skillbank.make_row("mistake", "", {"description": "Heating instead of cooling",
                                           "why_it_happens": "The agent confuses the appliances.",
                                           "how_to_avoid": "Read the goal verb first."},
                           ["mem-3"], ["traj-3"], env="alfworld"),
    ]


def test_skillrl_export_loads_in_the_bank_format(tmp_path):
    bank = BankStore(str(tmp_path)).register(bank_rows(), run_id="r1", stage="skills")
    [path] = export_skillrl(bank, str(tmp_path / "out"))
    assert os.path.basename(path) == "skill_bank.json"
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    jsonschema.Draft202012Validator(load_schema("skill_bank")).validate(data)
    assert data["general_skills"] == [{"skill_id": "gen_001", "title": "Explore Systematically",
                                       "principle": "Visit each place once.",
                                       "when_to_apply": "When the object is not in view.",
                                       "source_memory_ids": ["mem-1", "mem-2"]}]
    assert data["task_specific_skills"]["cool"][0]["skill_id"] == "coo_001"
    assert data["common_mistakes"][0]["mistake_id"] == "err_001"
    every = data["general_skills"] + data["task_specific_skills"]["cool"] + data["common_mistakes"]
    assert [e["source_memory_ids"] for e in every] == [["mem-1", "mem-2"], ["mem-1"], ["mem-3"]]
    assert (data["metadata"]["bank_version"], data["metadata"]["parent_version"]) == (bank.version, None)
    # and it reads back as the same skills
    assert [r["skill_id"] for r in skillbank.from_skillrl_json(data, "alfworld")] == [r["skill_id"] for r in bank.rows]


def test_skill_md_folders_with_front_matter(tmp_path):
    bank = BankStore(str(tmp_path)).register(bank_rows(), run_id="r1", stage="skills")
    paths = export_skill_md(bank, str(tmp_path / "skills"))
    assert [os.path.relpath(p, tmp_path / "skills") for p in paths] == [
        "gen_001-explore-systematically/SKILL.md", "coo_001-cool-with-fridge/SKILL.md",
        "err_001-avoid-heating-instead-of-cooling/SKILL.md"]
    text = open(paths[0], encoding="utf-8").read()
    front = yaml.safe_load(text.split("---\n")[1])
    assert front == {"name": "explore-systematically", "description": "Visit each place once.",
                     "when_to_apply": "When the object is not in view.", "source_memory_ids": ["mem-1", "mem-2"],
                     "source_trajectory_ids": ["traj-1", "traj-2"], "skill_id": bank.rows[0]["skill_id"],
                     "numbered_id": "gen_001", "kind": "general", "category": "", "env": "alfworld",
                     "bank_version": bank.version}
    assert text.endswith("# Explore Systematically\n\nVisit each place once.\n\n"
                         "**When to apply:** When the object is not in view.\n")
    mistake = yaml.safe_load(open(paths[2], encoding="utf-8").read().split("---\n")[1])
    assert (mistake["name"], mistake["when_to_apply"]) == ("avoid-heating-instead-of-cooling",
                                                           "The agent confuses the appliances.")
    assert slug("Heat It, Then Place!") == "heat-it-then-place" and slug("???") == "skill"


def test_cli_list_says_when_no_bank_is_registered(tmp_path):
    """On the shipped sample the skills stage keeps no skill, so no bank is stored: bank list used
    to print nothing at all (exit 0), which reads like a broken command."""
    out = CliRunner().invoke(app, ["list", "--root", str(tmp_path)], terminal_width=300)
    assert out.exit_code == 0
    assert " ".join(out.output.split()) == (f"no bank registered under {tmp_path / 'banks'} yet (the skills stage "
                                            "stores a bank only when it keeps a skill; rl grpo stores the bank it "
                                            "starts from)")


def test_cli_list_show_diff_restore_export(tmp_path):
    store = BankStore(str(tmp_path))
    rows = bank_rows()
    v1 = store.register(rows, run_id="r1", stage="skills")
    v2 = store.register(rows[:2], run_id="r2", stage="skills")
    cli = CliRunner()
    root = ["--root", str(tmp_path)]
    out = cli.invoke(app, ["list", *root], terminal_width=200)
    assert out.exit_code == 0
    created = [v.record["created_at"] for v in (v1, v2)]
    assert out.output.splitlines() == [
        f"  {v1.version}  parent=-  {created[0]}  r1/skills  general=1 task_specific=1 mistake=1",
        f"* {v2.version}  parent={v1.version}  {created[1]}  r2/skills  general=1 task_specific=1 mistake=0"]
    out = cli.invoke(app, ["diff", v1.version[:12], "HEAD", *root], terminal_width=200)
    assert out.output.splitlines() == [f"- {rows[2]['skill_id']}  mistake  Heating instead of cooling",
                                       "0 added, 1 removed, 0 re-sourced"]
    out = cli.invoke(app, ["show", v2.version, *root], terminal_width=200)
    assert f"{v2.version}  parent={v1.version}" in out.output and "Cool With Fridge" in out.output
    out = cli.invoke(app, ["restore", v1.version[:12], *root])
    assert out.output.strip() == f"HEAD -> {v1.version}" and store.head() == v1.version
    out = cli.invoke(app, ["export", "--out", str(tmp_path / "md"), "--format", "skill-md", *root])
    assert out.exit_code == 0 and len(os.listdir(tmp_path / "md")) == 3  # HEAD is v1 again: 3 skills
    out = cli.invoke(app, ["show", "bank-nope", *root])
    assert out.exit_code == 1 and "no bank version matches 'bank-nope'" in out.output

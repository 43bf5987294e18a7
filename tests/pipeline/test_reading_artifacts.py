"""README's "Reading a stage folder": the skills folder holds its SkillRL bank JSON under its
public name, so plain ``pd.read_parquet`` fails there, and the commands the README gives instead
read the folder's rows (run here as written, on a skills artifact in tmp_path)."""
from __future__ import annotations

import json
import os
import re

import pandas as pd
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.artifacts import ArtifactStore
from pipeline.core.records import SKILL_SCHEMA, to_table
from tests.helpers.build_pairs_data import SKILL
from tests.helpers.paths import REPO

SKILLS = [SKILL, dict(SKILL, skill_id="gen-2", title="Look Before Taking")]


def readme_block() -> str:
    """The Python block of README's "Reading a stage folder" paragraph."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("**Reading a stage folder.**"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def sample_run(tmp_path):
    """``tmp_path/runs/sample/skills`` with two skill rows and a ``skill_bank.json``, as the stage writes them."""
    ArtifactStore(str(tmp_path), "sample").write(
        "skills", to_table(SKILLS, SKILL_SCHEMA), [], {"stage": "skills", "fingerprint": "fp-skills"},
        extra_files={"skill_bank.json": json.dumps({"general_skills": [], "task_specific_skills": {},
                                                    "common_mistakes": []})})
    return tmp_path


def test_plain_read_parquet_stops_at_the_bank_json(sample_run):
    with pytest.raises(pa.ArrowInvalid, match="Could not open Parquet input source"):
        pd.read_parquet(os.path.join(sample_run, "runs", "sample", "skills"))


def test_the_documented_readers_give_the_skill_rows(sample_run):
    code = readme_block()
    assert code.count('"runs/sample/skills"') == 2
    first, second = code.split("\n\n")
    for part in (first, second):
        namespace: dict = {}
        exec(part.replace('"runs/sample/', f'"{sample_run}/runs/sample/'), namespace)  # noqa: S102 - README's code
        assert list(namespace["skills"]["skill_id"]) == ["gen-1", "gen-2"]
        assert list(namespace["skills"].columns) == SKILL_SCHEMA.names


def test_skillpipe_inspect_reads_the_skills_folder(sample_run):
    res = CliRunner().invoke(app, ["inspect", os.path.join(sample_run, "runs", "sample", "skills"), "--rows", "1"])
    assert res.exit_code == 0 and "rows: 2" in res.output and "gen-1" in res.output

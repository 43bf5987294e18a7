"""Shared pytest set-up for the whole suite.

Tests mirror the packages (``tests/pipeline/engine/test_runner.py`` tests ``pipeline/engine/runner.py``).
Shared helpers are plain modules in ``tests/helpers/``, imported one way:
``from tests.helpers.<module> import ...`` (``paths`` for REPO/FIXTURES, ``llm_faults`` and ``llm_stage_data`` for stage-level LLM tests).
Fixtures used across folders live here.
"""
from __future__ import annotations

import os
import shutil

import pytest

from tests.helpers.paths import REPO

# The tests start the embedded server many times: they use the small SmolLM2 (1 s to load, fast
# and weak), not the default 1.5B teacher, unless a test names a model itself. Subprocesses
# (the CLI, Airflow) inherit the variable.
os.environ.setdefault("SKILLPIPE_LLM_MODEL", "smollm2-135m-instruct")
# The usefulness gate loads a scorer model and scores every think and bank item (about a minute on
# the sample): tests about other stages run without it; the usefulness tests name their policy.
os.environ.setdefault("SKILLPIPE_USEFULNESS_POLICY", "off")


@pytest.fixture()
def sample_input(tmp_path):
    """A copy of the shipped real sample (``data/samples``) under ``tmp_path/in``: a test may
    add, break or remove files there without touching the repository. Returns the folder path."""
    dest = tmp_path / "in"
    shutil.copytree(os.path.join(REPO, "data", "samples"), dest)
    return dest

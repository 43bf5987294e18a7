"""`pip install .` (not editable) gives a working `skillpipe`, run from outside the clone.

The wheel must carry everything the stages open at run time: the JSON Schemas (``schemas/``),
the prompt templates (``pipeline/templates/``) and the accelerate configs. The test builds the
wheel, installs it into a new virtual environment whose only other packages are the project's
already-installed dependencies (a ``.pth`` line pointing at this interpreter's site-packages; the
``.pth`` files in there, the editable install among them, are not executed that way), then runs
``skillpipe run --stages parse,remove_loops,verify,memory`` with the embedded LLM from an empty folder and
checks that the modules came from the wheel, not from the clone.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "data" / "samples" / "eto-alfworld" / "alfworld_sft_sample.json"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # build from a copy: setuptools writes build/ and *.egg-info into the source folder
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("pipeline", "sft", "schemas"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
                   check=True, capture_output=True, text=True)
    (whl,) = out.glob("skillpipe-*.whl")
    return whl


def test_wheel_carries_schemas_templates_phrases_and_configs(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for schema in (REPO / "schemas").glob("*.json"):
        assert f"schemas/{schema.name}" in names
    for tpl in (REPO / "pipeline" / "templates").glob("*.txt"):
        assert f"pipeline/templates/{tpl.name}" in names
    data = list((REPO / "pipeline" / "quality" / "data").glob("*.toml"))
    assert data and all(f"pipeline/quality/data/{d.name}" in names for d in data)  # the content rules' phrase lists
    assert any(n.startswith("sft/configs/") and n.endswith(".yaml") for n in names)
    assert not any(n.startswith(("tests/", "data/")) for n in names)


def _fresh_venv(where: Path, wheel: Path) -> Path:
    venv.EnvBuilder(with_pip=True).create(where)
    py = where / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, text=True)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # the dependencies: this interpreter's site-packages, after the wheel's own files
    Path(site, "zz_project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return py


def test_installed_wheel_runs_llm_stages_from_another_folder(tmp_path, wheel):
    py = _fresh_venv(tmp_path / "venv", wheel)
    work = tmp_path / "elsewhere"
    (work / "in").mkdir(parents=True)
    # one real trajectory: a single memory call keeps the test short
    (work / "in" / "one.json").write_text(json.dumps(json.loads(SAMPLE.read_text())[:1]))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(py), "-c", "import pipeline, schemas, json; "
                            "print(json.dumps([pipeline.__file__, list(schemas.__path__)]))"],
                           cwd=work, env=env, check=True, capture_output=True, text=True).stdout
    for path in json.loads(where)[:1] + json.loads(where)[1]:
        assert str(tmp_path / "venv") in path and str(REPO) not in path
    # a short answer budget: this checks that the installed package finds its templates and
    # schemas and reaches the LLM, not the memory's quality (a cut answer is quarantined)
    (work / "small.yaml").write_text("llm:\n  max_tokens: 128\n  timeout_s: 900\n  max_retries: 1\n")
    skillpipe = tmp_path / "venv" / "bin" / "skillpipe"
    res = subprocess.run([str(skillpipe), "run", "--input", "in", "--run-id", "w", "--root", "out",
                          "--config", "small.yaml", "--stages", "parse,remove_loops,verify,memory"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    manifest = json.loads((work / "out" / "runs" / "w" / "memory" / "_manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["in"] == 1 and counts["in"] == counts["out"] + counts["quarantined"]
    assert manifest["llm"]["calls"] + manifest["llm"]["cache_hits"] >= 1  # the embedded LLM answered
    assert not (REPO / "out").exists()

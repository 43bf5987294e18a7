"""The documentation: rendered results are current, the docs site builds, the README's links resolve.

- ``docs/benchmarks.md`` and the README's results block are exactly what ``bench/render_results.py``
  renders from ``bench/results/*.json`` now (re-rendered in memory), and every result file has the
  fields the renderer reads;
- ``mkdocs build --strict`` builds ``docs/`` (``mkdocs.yml``) into a temporary folder: a link to a
  page or an anchor that does not exist, or a page left out of the nav, fails it;
- every relative link of ``README.md`` (outside ``docs/``, so mkdocs does not see it) resolves,
  anchors included;
- the README stays a guide: at most 350 lines, none over 200 characters, no commit hash.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from bench import render_results
from bench.render_kinds import KINDS
from bench.results import RESULTS_DIR, load_results
from tests.helpers.paths import REPO

README = os.path.join(REPO, "README.md")
#: ``[text](target)`` of a Markdown link (images too), target without spaces
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
#: a short or full commit hash: 7-40 hex digits with a digit and a letter a-f among them
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def readme_text() -> str:
    with open(README, encoding="utf-8") as f:
        return f.read()


def test_rendered_results_are_current():
    stale = []
    for path, content in render_results.rendered().items():
        with open(path, encoding="utf-8") as f:
            if f.read() != content:
                stale.append(os.path.relpath(path, REPO))
    assert not stale, f"out of date: {stale}; run `.venv/bin/python bench/render_results.py`"


def test_result_files_have_what_the_renderer_reads():
    names = sorted(os.listdir(RESULTS_DIR))
    assert names and all(re.fullmatch(r"\d{4}-\d\d-\d\d-\d{6}-[a-z_]+\.json", n) for n in names), names
    for doc in load_results():
        where = doc["file"]
        assert doc["name"] in KINDS and where.endswith(f"-{doc['name']}.json"), where
        assert re.fullmatch(r"\d{4}-\d\d-\d\d(T[\d:+.]+)?", doc["date"]) and doc["file"].startswith(doc["date"][:10]), where
        assert isinstance(doc["figures"], dict) and doc["figures"], where
        assert isinstance(doc["machine"], dict) and {"cpu", "cores", "ram_gb"} <= set(doc["machine"]), where
        assert "commit" in doc and isinstance(doc.get("notes", []), list), where


def test_readme_block_is_the_newest_make_run():
    newest = render_results.latest(load_results(), "make_run")
    assert newest is not None and f"bench/results/{newest['file']}" in readme_text()


def test_render_replaces_only_the_marked_block():
    text = "intro\n" + render_results.BEGIN + "\nold\n" + render_results.END + "\ntail\n"
    assert render_results.replace_block(text, "NEW") == "intro\nNEW\ntail\n"
    with pytest.raises(ValueError, match="results:make_run"):
        render_results.replace_block("no markers", "NEW")


def test_readme_is_a_guide():
    text = readme_text()
    lines = text.splitlines()
    assert len(lines) <= 350, len(lines)
    assert [i + 1 for i, line in enumerate(lines) if len(line) > 200] == []
    assert COMMIT_HASH.findall(text) == []


def test_commit_hash_pattern():
    assert COMMIT_HASH.findall("run of 770e976 and of c066c67ab") == ["770e976", "c066c67ab"]
    assert COMMIT_HASH.findall("2026-12-06-172100, deadbeef, 1234567, a fee") == []


def anchors(path: str) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub and MkDocs make them."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    return {render_results.slug(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)) for h in HEADING.findall(text)}


def broken_links(path: str) -> list[str]:
    """Relative links of the Markdown file ``path`` whose file or heading anchor does not exist."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto: ...
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            bad.append(f"{target}: no such file")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with that anchor")
    return bad


def test_link_check_catches_a_missing_file_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## A section: here\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md) [ok](a.md#a-section-here) [bad](c.md) [bad](a.md#nope) [web](https://x.org/y)\n"
                    "```\n[in code](skipped.md)\n```\n")
    assert broken_links(str(page)) == ["c.md: no such file", "a.md#nope: no heading with that anchor"]


def test_readme_links_resolve():
    assert broken_links(README) == []


def test_docs_links_resolve():
    """The same check on docs/ (mkdocs checks it too, below; this one also runs without mkdocs)."""
    docs = os.path.join(REPO, "docs")
    bad = {n: broken_links(os.path.join(docs, n)) for n in sorted(os.listdir(docs)) if n.endswith(".md")}
    assert {n: b for n, b in bad.items() if b} == {}


def test_docs_build_strict(tmp_path):
    """``mkdocs build --strict`` of ``mkdocs.yml`` into a temporary site folder."""
    pytest.importorskip("mkdocs", reason="mkdocs is in the dev extra (pip install -e '.[dev]')")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                           os.path.join(REPO, "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").exists() and (tmp_path / "site" / "benchmarks" / "index.html").exists()


def test_every_docs_page_is_in_the_nav():
    """mkdocs only warns about pages outside the nav with ``validation.omitted_files``: check it directly."""
    with open(os.path.join(REPO, "mkdocs.yml"), encoding="utf-8") as f:
        nav = set(re.findall(r":\s*([\w/-]+\.md)\s*$", f.read(), re.M))
    pages = {n for n in os.listdir(os.path.join(REPO, "docs")) if n.endswith(".md")}
    assert pages <= nav, f"add to the nav of mkdocs.yml: {sorted(pages - nav)}"


def test_result_json_is_plain():
    """Result files are JSON a reader can load without this project (no NaN, no custom types)."""
    for name in os.listdir(RESULTS_DIR):
        with open(os.path.join(RESULTS_DIR, name), encoding="utf-8") as f:
            json.loads(f.read(), parse_constant=lambda c: pytest.fail(f"{name}: {c} is not JSON"))

"""Render ``docs/benchmarks.md`` and the results block of ``README.md`` from ``bench/results/*.json``.

No figure in either is written by hand: each comes from a result file (``bench/results.py``
describes one). The README's block, between :data:`BEGIN` and :data:`END`, is the newest
``make_run`` result; ``docs/benchmarks.md`` has one section per kind of benchmark (:data:`KINDS`:
how to run it, then every run, oldest first). ``tests/test_docs.py`` renders both in memory and
fails when the files differ.

    .venv/bin/python bench/render_results.py           # rewrite both files
    .venv/bin/python bench/render_results.py --check   # exit 1 when either is out of date
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.render_kinds import KINDS, ORDER, Kind  # noqa: E402
from bench.results import RESULTS_DIR, latest, load_results  # noqa: E402

README = os.path.join(ROOT, "README.md")
BENCHMARKS = os.path.join(ROOT, "docs", "benchmarks.md")
BEGIN, END = "<!-- results:make_run -->", "<!-- /results:make_run -->"

HEAD = """# Benchmarks

<!-- Rendered by bench/render_results.py from bench/results/*.json: edit those, not this file. -->

Every figure on this page comes from a result file under `bench/results/`, one per run: the
benchmark writes it (`bench/results.py`), or, for runs made before the files existed, it was
transcribed from the project's run notes (`backfilled_from` in the file). Each file names the
commit and the machine. Runs are listed oldest first; a later run on other code or another host is
not comparable figure by figure. Where a run's figures led to a change, its notes say so. After a
new run, `python bench/render_results.py` rewrites this page and the README's results table.

Most benchmarks print a ratio on their last line; none is a timed test. They need the set-up of
`make install`; run them one at a time on an otherwise idle machine.
"""


def machine_text(doc: dict[str, Any]) -> str:
    """``2 cores, AMD EPYC (idle)``: cores, CPU model and the conditions note, where known."""
    m = doc.get("machine") or {}
    parts = [f"{m['cores']} cores" if m.get("cores") else "", m.get("cpu") or "",
             f"{m['ram_gb']:g} GiB" if m.get("ram_gb") else "",
             f"load average {m['load_avg_1m']:g}" if m.get("load_avg_1m") is not None else ""]
    text = ", ".join(p for p in parts if p) or "machine not recorded"
    return f"{text} ({m['note']})" if m.get("note") else text


def commit_text(doc: dict[str, Any], missing: str = "-") -> str:
    """The run's commit, or the run it started from, or ``missing``."""
    if doc.get("commit"):
        return f"`{doc['commit']}`"
    return f"artifacts of `{doc['base_commit']}`" if doc.get("base_commit") else missing


def run_label(doc: dict[str, Any]) -> str:
    """``2026-12-06, `770e976```: a run's date and commit, as headings and notes name it."""
    return f"{doc['date'][:10]}, {commit_text(doc, 'commit not recorded')}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table (``|`` in cells escaped)."""
    esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]


def notes_block(docs: list[dict[str, Any]]) -> list[str]:
    """One bullet per note, each led by its run's date and commit."""
    return [f"- **{run_label(d)}**: {n}" for d in docs for n in d.get("notes") or []]


def kind_section(kind: Kind, docs: list[dict[str, Any]]) -> list[str]:
    """The section of one kind: title, intro, then its runs as a table or one block per run."""
    out = [f"## {kind.title}", "", kind.intro.strip(), ""]
    if kind.render is not None:
        for d in docs:
            out += kind.render(d) + [""]
        return out
    rows = [[d["date"][:10], commit_text(d), *(cell(d) for _, cell in kind.columns), machine_text(d)] for d in docs]
    out += table(["date", "commit", *(h for h, _ in kind.columns), "machine"], rows) + [""]
    notes = notes_block(docs)
    return out + (notes + [""] if notes else [])


def render_benchmarks(docs: list[dict[str, Any]]) -> str:
    """The whole of ``docs/benchmarks.md`` for the results ``docs``."""
    names = [n for n in ORDER if any(d["name"] == n for d in docs)]
    names += sorted({d["name"] for d in docs} - set(ORDER))
    out = [HEAD, "Sections: " + ", ".join(f"[{KINDS.get(n, Kind.plain(n)).title}](#{slug(KINDS.get(n, Kind.plain(n)).title)})"
                                         for n in names) + ".", ""]
    for n in names:
        out += kind_section(KINDS.get(n, Kind.plain(n)), [d for d in docs if d["name"] == n])
    return "\n".join(out).rstrip() + "\n"


def slug(title: str) -> str:
    """The anchor of a heading, as GitHub and MkDocs make it for plain titles: lower case, inline
    code marks and punctuation dropped, spaces to hyphens."""
    keep = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return "-".join(keep.split())


def render_readme_block(doc: dict[str, Any] | None) -> str:
    """The README's results block (markers included) for the ``make_run`` result ``doc``."""
    from bench.render_kinds import make_run_summary
    if doc is None:
        body = "No `make run` result is recorded yet (`python bench/results.py make-run` after a `make run`)."
    else:
        body = make_run_summary(doc)
    return f"{BEGIN}\n{body}\n{END}"


def replace_block(text: str, block: str) -> str:
    """``text`` with the part from :data:`BEGIN` to :data:`END` replaced by ``block``. Raises
    ``ValueError`` when the markers are missing."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no {BEGIN} ... {END} block")
    return text[:start] + block + text[end + len(END):]


def rendered(folder: str = RESULTS_DIR, readme: str = README) -> dict[str, str]:
    """``{path: content}`` of both rendered files, as they should be now."""
    docs = load_results(folder)
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    return {BENCHMARKS: render_benchmarks(docs),
            readme: replace_block(text, render_readme_block(latest(docs, "make_run")))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only report whether the files are up to date")
    a = p.parse_args(argv)
    stale = []
    for path, content in rendered().items():
        with open(path, encoding="utf-8") as f:
            if f.read() == content:
                continue
        stale.append(os.path.relpath(path, ROOT))
        if not a.check:
            with open(path, "w", encoding="utf-8") as f:
                f.write(content)
    verb = "out of date" if a.check else "rewritten"
    print(f"{verb}: {', '.join(stale)}" if stale else "up to date")
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())

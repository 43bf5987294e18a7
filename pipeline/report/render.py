"""Assemble and write the run report: gather facts, draw charts, render the Jinja2 template.

Output: one self-contained HTML file (CSS, script and images inline; images as ``data:`` URIs,
nothing fetched over the network) and the same PNGs in a folder beside it
(``<stem>_png/<chart>.png``), for slides and issue threads.
"""
from __future__ import annotations

import base64
import collections
import datetime as _dt
import os
from typing import Any, Callable

import jinja2

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.fsutil import atomic_write
from pipeline.report import bankinfo, charts, explorer, runinfo, training, usefulnessinfo

#: The report's sections: (id of the <h2>, title). Tests and the nav bar use these ids.
SECTIONS = (("funnel", "Funnel"), ("verify", "Environment rules"), ("llm", "LLM"), ("skill-bank", "Skill bank"),
            ("data-quality", "Data quality"), ("training", "Training"), ("lineage", "Lineage explorer"))


def _num(v: Any) -> str:
    return "-" if v is None else f"{v:,}" if isinstance(v, int) else str(v)


def _fixed(v: Any, digits: int = 2) -> str:
    return "-" if not isinstance(v, (int, float)) or v != v else f"{v:.{digits}f}"


def _pct(v: Any) -> str:
    return "-" if not isinstance(v, (int, float)) else f"{100 * v:.1f} %"


def _val(v: Any) -> str:
    return _fixed(v, 4) if isinstance(v, float) else _num(v)


def environment() -> jinja2.Environment:
    """The Jinja2 environment over the package's ``templates/`` (autoescaped HTML), with the
    number filters ``num`` (thousands separators), ``fixed(d)``, ``pct`` (0.25 -> "25.0 %") and
    ``val``; ``None``/NaN show as "-"."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("pipeline.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=_num, fixed=_fixed, pct=_pct, val=_val)
    return env


def _bank_facts(bank_root: str, run_id: str, run_dir: str, stages: list[dict[str, Any]]) -> dict[str, Any]:
    skills = bankinfo.read_rows(run_dir, "skills")
    pair_stage = "export" if os.path.isdir(os.path.join(run_dir, "export")) else "build_pairs"
    pairs = bankinfo.read_rows(run_dir, pair_stage, ["skill_ids_used", "think"])
    agg = next((s["manifest"] for s in stages if s["stage"] == "skills"), {})
    run_versions = [(agg.get("counters") or {}).get("bank_version") or ""]
    run_versions += sorted({s.get("bank_version") for s in skills if s.get("bank_version")})
    with_skills, using = bankinfo.pairs_using_skills(skills, pairs)
    return {"composition": bankinfo.composition(skills), "history": bankinfo.history(bank_root, run_id, run_versions),
            "usage": bankinfo.skill_usage(skills, pairs), "pairs": len(pairs), "pairs_with_skills": with_skills,
            "pairs_using": using,
            "pair_stage": pair_stage, "ngram": bankinfo.NGRAM}


def gather(root: str, run_id: str, price_prompt: float = runinfo.DEFAULT_PRICE_PROMPT,
           price_completion: float = runinfo.DEFAULT_PRICE_COMPLETION, sample_rows: int = 3,
           price_cached: float = runinfo.DEFAULT_PRICE_CACHED, bank_root: str | None = None) -> dict[str, Any]:
    """Every fact the report shows, as plain data (no charts). ``bank_root``: where the bank
    history ``banks/`` lives when not under ``root`` (the object-storage URI of a run read from its
    local mirror). Raises ``FileNotFoundError`` when ``<root>/runs/<run_id>`` does not exist
    (``ValueError`` for an invalid run id)."""
    store = ArtifactStore(root, run_id)
    run_dir = store.run_dir
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"no run {run_id!r} under {os.path.join(store.root, 'runs')}")
    stages, notes = runinfo.stage_manifests(run_dir)
    funnel = runinfo.funnel(stages)
    samples = {s["stage"]: runinfo.quarantine_samples(s["path"], sample_rows) for s in stages}
    export = next((s["manifest"] for s in stages if s["stage"] == "export"), None)
    verified = next((s["manifest"] for s in stages if s["stage"] == "verify"), None)
    lineage, lineage_note = explorer.entries(run_dir)
    return {
        "run_id": run_id, "run_dir": run_dir, "notes": notes, "funnel": funnel, "samples": samples,
        "verify": runinfo.verify_facts(verified),
        "llm": runinfo.llm_usage(stages, price_prompt, price_completion, price_cached),
        "bank": _bank_facts(bank_root or root, run_id, run_dir, stages),
        "quality": training.quality_metrics(export),
        "usefulness": usefulnessinfo.facts(run_dir, stages),
        "sft": training.sft_curve(run_dir), "grpo": training.grpo_steps(run_dir),
        "eval": training.eval_results(run_dir), "outcome": training.outcome_arms(store.root, run_id),
        "lineage": lineage, "lineage_note": lineage_note,
    }


def draw(facts: dict[str, Any]) -> dict[str, bytes]:
    """``{chart name: PNG bytes}`` for every chart that has data."""
    todo: dict[str, Callable[[], bytes | None]] = {
        "funnel": lambda: charts.funnel(facts["funnel"]),
        "reasons": lambda: charts.reasons(facts["funnel"]),
        "verify": lambda: charts.verify(facts["verify"]["counters"]),
        "llm": lambda: charts.llm(facts["llm"]),
        "bank": lambda: charts.bank(facts["bank"]["composition"]),
        "usage": lambda: charts.usage(facts["bank"]["usage"]),
        "usefulness": lambda: charts.usefulness(facts["usefulness"]["gains"]),
        "sft_loss": lambda: charts.sft_loss(facts["sft"]),
        "grpo": lambda: charts.grpo(facts["grpo"]),
        "eval": lambda: charts.eval_rates(facts["eval"]["rows"]),
    }
    return {name: png for name, fn in todo.items() if (png := fn()) is not None}


def problems(facts: dict[str, Any]) -> list[str]:
    """One-line alerts shown at the top: quarantined rows, failed LLM calls, unreadable files."""
    out = []
    q = sum(r["quarantined"] for r in facts["funnel"])
    if q:
        out.append(f"{q} rows quarantined across {sum(1 for r in facts['funnel'] if r['quarantined'])} stage(s)")
    fails = facts["llm"]["total"].get("failures", 0)
    if fails:
        out.append(f"{fails} failed LLM call(s) (answers quarantined after retries and repair)")
    for r in facts["funnel"]:  # what the manifest records, in the words of every reader
        if r["failed_requests"]["sentence"]:
            out.append(f"stage {r['stage']} {r['failed_requests']['sentence']}")
    out += [f"unreadable: {n}" for n in facts["notes"]]
    return out


def build_report(root: str, run_id: str, out: str | None = None, *,
                 price_prompt: float = runinfo.DEFAULT_PRICE_PROMPT,
                 price_completion: float = runinfo.DEFAULT_PRICE_COMPLETION,
                 price_cached: float = runinfo.DEFAULT_PRICE_CACHED,
                 progress: Callable[[str], None] | None = None, bank_root: str | None = None) -> dict[str, Any]:
    """Write the report of run ``run_id`` to ``out`` (default ``<root>/runs/<run_id>/report.html``)
    and its PNGs to ``<out stem>_png/``. ``bank_root``: see :func:`gather`.

    Returns ``{"path", "png_dir", "pngs": [paths], "bytes": HTML size}``. Raises
    ``FileNotFoundError`` for a missing run, ``ValueError`` for an invalid run id, ``OSError``
    when ``out`` cannot be written.
    """
    say = progress or (lambda _m: None)
    say("reading manifests and artifacts")
    facts = gather(root, run_id, price_prompt, price_completion, price_cached=price_cached, bank_root=bank_root)
    say("drawing charts")
    pngs = draw(facts)
    out = os.path.abspath(out or os.path.join(facts["run_dir"], "report.html"))
    png_dir = os.path.splitext(out)[0] + "_png"
    os.makedirs(png_dir, exist_ok=True)
    paths = []
    for name, data in pngs.items():
        paths.append(os.path.join(png_dir, f"{name}.png"))
        with open(paths[-1], "wb") as f:
            f.write(data)
    say("rendering HTML")
    # a chart with no data is absent: the template's `{% if img.name %}` then shows the note
    images = collections.defaultdict(str, {k: "data:image/png;base64," + base64.b64encode(v).decode("ascii")
                                           for k, v in pngs.items()})
    html = environment().get_template("report.html.j2").render(
        f=facts, img=images, sections=SECTIONS, problems=problems(facts),
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    atomic_write(out, html)
    return {"path": out, "png_dir": png_dir, "pngs": paths, "bytes": os.path.getsize(out)}

"""Run reports: ``skillpipe report RUN_ID`` (one self-contained HTML file plus PNGs) and
``skillpipe inspect PATH --html`` (one artifact).

Modules: :mod:`runinfo` (funnel, quarantine samples, LLM use from the manifests),
:mod:`bankinfo` (skill-bank composition, version history, skill usage), :mod:`training` (SFT
loss, GRPO steps, eval, data-quality metrics), :mod:`explorer` (lineage of SFT pairs),
:mod:`charts` (matplotlib, Agg), :mod:`render` (Jinja2 template ``templates/report.html.j2``).
"""
from __future__ import annotations

__all__ = ["build_report"]


def build_report(*args, **kwargs):
    """See :func:`pipeline.report.render.build_report` (imported lazily: matplotlib is heavy)."""
    from pipeline.report.render import build_report as _build
    return _build(*args, **kwargs)

"""The report's charts: matplotlib (Agg backend, no display), each returned as PNG bytes.

Every function takes the plain dicts built by :mod:`runinfo`, :mod:`bankinfo` and
:mod:`training` and returns ``None`` when there is nothing to draw, so the template shows a
"not available" note instead of an empty axis. Figures are 8 x 3-4 inches at 90 dpi (~720 px
wide, 15-40 KB each), small enough to inline as data URIs.
"""
from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: never try to open a display (Airflow workers, CI)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

DPI = 90
COLORS = {"in": "#9bb7d4", "out": "#2e7d32", "quarantined": "#c62828"}


def _integer(*axes, axis: str = "y") -> None:
    """Count and step axes get whole-number ticks (a run of 3 rows must not show 0.5 rows)."""
    for ax in axes:
        (ax.yaxis if axis == "y" else ax.xaxis).set_major_locator(MaxNLocator(integer=True))


def _legend(ax, size: int = 8, outside: bool = False) -> None:
    """The legend of ``ax`` without a frame; ``outside``: right of the axes (long labels)."""
    where = {"loc": "upper left", "bbox_to_anchor": (1.0, 1.0)} if outside else {}
    ax.legend(fontsize=size, frameon=False, **where)


def _png(fig) -> bytes:
    """``fig`` as PNG bytes at :data:`DPI`, every axes without its top and right frame lines;
    closes the figure."""
    for ax in fig.axes:
        ax.spines[["top", "right"]].set_visible(False)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue()


def funnel(rows: list[dict[str, Any]]) -> bytes | None:
    """Grouped bars per stage: units in, out, quarantined (``runinfo.funnel`` rows)."""
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.2))
    x = range(len(rows))
    w = 0.27
    for i, (key, label) in enumerate((("units_in", "in"), ("units_out", "out"), ("quarantined", "quarantined"))):
        vals = [r.get(key) or 0 for r in rows]
        bars = ax.bar([p + (i - 1) * w for p in x], vals, w, label=label, color=COLORS[label])
        ax.bar_label(bars, fontsize=7, padding=1)
    ax.set_xticks(list(x), [r["stage"] for r in rows])
    ax.set_ylabel("rows / units")
    _integer(ax)
    ax.set_title("Rows in, out and quarantined per stage", fontsize=10)
    _legend(ax)
    return _png(fig)


def reasons(rows: list[dict[str, Any]]) -> bytes | None:
    """Stacked bars: quarantined rows per stage, one colour per reason."""
    stages = [r for r in rows if r["reasons"]]
    if not stages:
        return None
    names = sorted({k for r in stages for k in r["reasons"]})
    cmap = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(8, 2.6))
    bottom = [0] * len(stages)
    for i, name in enumerate(names):
        vals = [r["reasons"].get(name, 0) for r in stages]
        ax.bar([r["stage"] for r in stages], vals, bottom=bottom, label=name, color=cmap(i % 20))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("quarantined rows")
    _integer(ax)
    ax.set_title("Quarantine reasons per stage", fontsize=10)
    _legend(ax, 7, outside=True)
    return _png(fig)


def verify(counters: dict[str, Any] | None) -> bytes | None:
    """Stacked horizontal bars: the verify stage's findings per source (steps), one colour per
    rule (the ``by_source`` counters of verify's manifest)."""
    by_source = {s: c.get("rules") or {} for s, c in ((counters or {}).get("by_source") or {}).items()}
    by_source = {s: r for s, r in by_source.items() if r}
    if not by_source:
        return None
    names = sorted({k for r in by_source.values() for k in r})
    sources = sorted(by_source)
    cmap = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(sources)))
    left = [0] * len(sources)
    for i, name in enumerate(names):
        vals = [by_source[s].get(name, 0) for s in sources]
        ax.barh(sources, vals, left=left, label=name, color=cmap(i % 20))
        left = [a + v for a, v in zip(left, vals)]
    ax.set_xlabel("steps with a finding")
    _integer(ax, axis="x")
    ax.invert_yaxis()
    ax.set_title("verify: environment-rule findings per source and rule", fontsize=10)
    _legend(ax, 7, outside=True)
    return _png(fig)


def llm(usage: dict[str, Any]) -> bytes | None:
    """Two panels per LLM stage: tokens (prompt/completion, stacked) and calls/cache hits/failures."""
    rows = usage["rows"]
    if not rows:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.0))
    names = [r["stage"] for r in rows]
    a.bar(names, [r["prompt_tokens"] for r in rows], label="prompt", color="#5c6bc0")
    a.bar(names, [r["completion_tokens"] for r in rows], bottom=[r["prompt_tokens"] for r in rows],
          label="completion", color="#ffa726")
    a.set_title("Tokens per stage", fontsize=10)
    _legend(a)
    x = range(len(rows))
    for i, (key, color) in enumerate((("calls", "#5c6bc0"), ("cache_hits", "#66bb6a"), ("failures", "#c62828"))):
        b.bar([p + (i - 1) * 0.27 for p in x], [r[key] for r in rows], 0.27, label=key.replace("_", " "), color=color)
    b.set_xticks(list(x), names)
    b.set_title("Calls, cache hits, failures", fontsize=10)
    _legend(b)
    _integer(b)
    return _png(fig)


def bank(comp: dict[str, Any]) -> bytes | None:
    """Horizontal bars: skills by kind and by category."""
    if not comp["total"]:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.0))
    kinds = sorted(comp["by_kind"].items())
    a.barh([k for k, _ in kinds], [v for _, v in kinds], color="#7e57c2")
    a.set_title("Skills by kind", fontsize=10)
    cats = sorted(comp["by_category"].items(), key=lambda kv: kv[1])[-12:]
    b.barh([k for k, _ in cats], [v for _, v in cats], color="#26a69a")
    b.set_title("Skills by category", fontsize=10)
    _integer(a, b, axis="x")
    for ax in (a, b):
        ax.tick_params(labelsize=8)
    return _png(fig)


def usefulness(gains: list[float]) -> bytes | None:
    """Histogram of the exported thinks' usefulness gains, with the gate's threshold 0 marked."""
    if not gains:
        return None
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.hist(gains, bins=20, color="#5c6bc0")
    ax.axvline(0.0, color="#c62828", linewidth=1)
    ax.set_xlabel("gain of the expert action's share (think vs empty think)", fontsize=8)
    ax.set_title(f"Think usefulness ({len(gains)} scored)", fontsize=10)
    _integer(ax)
    ax.tick_params(labelsize=8)
    return _png(fig)


def usage(rows: list[dict[str, Any]], top: int = 15) -> bytes | None:
    """Horizontal bars for the ``top`` most shown skills: times shown and times its language was used."""
    rows = [r for r in rows if r["shown"]][:top]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.28 * len(rows)))
    labels = [(r["label"][:45] + "…") if len(r["label"]) > 46 else r["label"] for r in rows][::-1]
    y = range(len(rows))
    ax.barh([p + 0.2 for p in y], [r["shown"] for r in rows][::-1], 0.4, label="shown in prompt", color="#90a4ae")
    ax.barh([p - 0.2 for p in y], [r["used"] for r in rows][::-1], 0.4, label="language used in think", color="#ef6c00")
    ax.set_yticks(list(y), labels, fontsize=7)
    ax.set_xlabel("SFT pairs")
    ax.set_title("Skill usage in distilled pairs", fontsize=10)
    _legend(ax, outside=True)
    _integer(ax, axis="x")
    return _png(fig)


def sft_loss(curve: dict[str, Any]) -> bytes | None:
    """Line: SFT training loss per optimizer step."""
    if not curve.get("losses"):
        return None
    fig, ax = plt.subplots(figsize=(8, 2.8))
    ax.plot(curve["steps"], curve["losses"], marker="o", ms=3, color="#1565c0")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title("SFT training loss", fontsize=10)
    _integer(ax, axis="x")
    return _png(fig)


def grpo(data: dict[str, Any]) -> bytes | None:
    """Three panels per GRPO step: mean reward, KL, advantage mean with min-max range."""
    steps = data["steps"]
    if not steps:
        return None
    x = [s["step"] for s in steps]
    num = lambda k: [float("nan") if s.get(k) is None else s[k] for s in steps]  # noqa: E731
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(8, 2.6))
    a.plot(x, num("reward_mean"), marker="o", ms=3, color="#2e7d32")
    a.set_title("mean reward", fontsize=9)
    b.plot(x, num("kl"), marker="o", ms=3, color="#6a1b9a")
    b.set_title("KL to reference", fontsize=9)
    c.plot(x, num("adv_mean"), marker="o", ms=3, color="#ef6c00", label="mean")
    c.fill_between(x, num("adv_min"), num("adv_max"), alpha=0.25, color="#ef6c00", label="min-max")
    c.set_title("advantage", fontsize=9)
    _legend(c, 7)
    _integer(a, b, c, axis="x")
    for ax in (a, b, c):
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    return _png(fig)


def eval_rates(rows: list[dict[str, Any]]) -> bytes | None:
    """Bars: eval success rate per policy with its 95 % interval as an error bar."""
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.35 * len(rows)))
    rates = [r["success_rate"] for r in rows]
    err = [[max(0.0, r["success_rate"] - r["low"]) if r["low"] is not None else 0 for r in rows],
           [max(0.0, r["high"] - r["success_rate"]) if r["high"] is not None else 0 for r in rows]]
    ax.barh([r["name"][:40] for r in rows], rates, xerr=err, color="#42a5f5", capsize=4)
    ax.set_xlim(0, 1)
    ax.set_xlabel("success rate (95 % interval)")
    ax.set_title("Evaluation", fontsize=10)
    return _png(fig)

"""What ``bench/render_results.py`` shows of each kind of result: a title, an intro (how to run the
benchmark and what its figures mean; no figure), and either table columns or a renderer of its
own. Cells read the result's ``figures`` only; a figure a run did not record shows as ``-``."""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any, Callable

from bench.render_intros import INTROS

Doc = dict[str, Any]
Cell = Callable[[Doc], str]


def num(v: Any) -> str:
    """A figure as text: thousands separated, floats to at most 3 decimals, ``[a, b]`` with
    ``a < b`` as the range ``a-b``, other lists joined by `` / ``, missing as ``-``."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:g}" if 0 < abs(v) < 0.001 else f"{v:,.3f}".rstrip("0").rstrip(".")
    if isinstance(v, (list, tuple)):
        ascending = len(v) == 2 and all(isinstance(x, (int, float)) for x in v) and v[0] < v[1]
        return ("-" if ascending else " / ").join(num(x) for x in v)
    return str(v)


def get(doc: Doc, key: str) -> Any:
    """``figures[key]``, a dotted key reading nested dicts (``stage_s.memory``); ``None`` if absent."""
    v: Any = doc.get("figures") or {}
    for part in key.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    return v


def f(key: str, unit: str = "") -> Cell:
    """A cell showing one figure, with ``unit`` appended when it is present."""
    return lambda d: num(get(d, key)) + (f" {unit}" if unit and get(d, key) is not None else "")


def fixed(key: str, spec: str = ".3f") -> Cell:
    """A cell showing one figure in a fixed format (rates: ``.3f``)."""
    return lambda d: "-" if get(d, key) is None else format(get(d, key), spec)


def of(kept: str, total: str, extra: str = "") -> Cell:
    """``kept of total`` (and ``(extra)`` when recorded)."""
    def cell(d: Doc) -> str:
        if get(d, kept) is None:
            return "-"
        text = f"{num(get(d, kept))} of {num(get(d, total))}" if get(d, total) is not None else num(get(d, kept))
        return text + (f" ({num(get(d, extra))})" if extra and get(d, extra) is not None else "")
    return cell


def minutes(key: str) -> Cell:
    """Seconds shown as ``12 min 6 s``."""
    def cell(d: Doc) -> str:
        s = get(d, key)
        return "-" if s is None else f"{int(s) // 60} min {int(s) % 60} s"
    return cell


def tokens(d: Doc) -> str:
    total, cached, share = get(d, "tokens"), get(d, "cached_prompt_tokens"), get(d, "cached_prompt_share")
    if total is not None:
        return f"{num(total)} ({num(cached)} cached)" if cached is not None else num(total)
    return f"{share:.0%} of prompt tokens cached" if share is not None else "-"


@dataclass(frozen=True)
class Kind:
    title: str
    intro: str
    columns: tuple[tuple[str, Cell], ...] = ()
    #: a renderer of its own: one result -> Markdown lines (then ``columns`` is unused)
    render: Callable[[Doc], list[str]] | None = None

    @staticmethod
    def plain(name: str) -> "Kind":
        """A kind no entry of :data:`KINDS` describes: every figure listed."""
        return Kind(f"{name} (other results)", f"Results named `{name}`.", render=plain_run)


def plain_run(d: Doc) -> list[str]:
    """One run as a heading, its command, budget and every figure (nested keys dotted), then notes."""
    from bench.render_results import machine_text, run_label
    out = [f"### {run_label(d)}", "", f"`{d.get('command', '')}` on {machine_text(d)}."]
    if d.get("budget"):
        out += ["", "Settings: " + "; ".join(f"{k} = {num(v)}" for k, v in d["budget"].items()) + "."]
    out += [""] + [f"- {k}: {v}" for k, v in flat(d.get("figures") or {})]
    return out + ([""] + [f"- {n}" for n in d["notes"]] if d.get("notes") else [])


def flat(figs: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """``(dotted key, text)`` of every figure; lists of dicts are shown one dict per line."""
    out = []
    for k, v in figs.items():
        if isinstance(v, dict):
            out += flat(v, f"{prefix}{k}.")
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            out += [(f"{prefix}{k}[{i}]", "; ".join(f"{a} {num(b)}" for a, b in x.items())) for i, x in enumerate(v)]
        else:
            out.append((f"{prefix}{k}", num(v)))
    return out


def make_run_summary(d: Doc) -> str:
    """The README's table of one ``make_run`` result, and the line that says where it comes from."""
    from bench.render_results import machine_text
    rows = [("whole `make run` (data stages, SFT fit, GRPO, report)", minutes("make_run_s")(d)),
            ("data stages (`skillpipe run`)", f"{f('data_stages_s', 's')(d)}: memory {f('stage_s.memory', 's')(d)}, "
                                              f"skills {f('stage_s.skills', 's')(d)}, distill {f('stage_s.distill', 's')(d)}"),
            ("LLM calls; tokens (cached prompt tokens)", f"{f('llm_calls')(d)}; {tokens(d)}"),
            ("memory: trajectories kept", of("memory_kept", "memory_in")(d)),
            ("skill bank items", f("bank_items")(d)),
            ("distill: successes kept (with model-written thinks)", of("distill_kept", "distill_successes", "distill_model_written")(d)),
            ("SFT pairs exported", f("pairs")(d)),
            ("LLM calls of a second `skillpipe run`", f("second_run_llm_calls")(d))]
    lines = ["| `make run` on the shipped sample | measured |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    teacher = (d.get("budget") or {}).get("teacher", "the default teacher")
    where = textwrap.fill(f"Measured {d['date'][:10]} on {machine_text(d)}; teacher {teacher}. Rendered from "
                          f"`bench/results/{d['file']}`; every run: [docs/benchmarks.md](docs/benchmarks.md).", 100,
                          break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines) + "\n\n" + where



def ci(x: dict[str, Any]) -> str:
    lo, hi = x.get("success_ci95") or x.get("ci95") or (None, None)
    return "-" if lo is None else f"[{lo:.3f}, {hi:.3f}]"


def wins(x: dict[str, Any]) -> str:
    return f"{x['wins']}/{x['episodes']} = {x['wins'] / x['episodes']:.3f}"


#: (header, "eval" or "data", key, format) of the arms' table: an arm as bench/outcome.py writes it
ARM_COLUMNS = (("valid actions", "eval", "valid_action_rate", ".3f"), ("format errors", "eval", "format_error_rate", ".3f"),
               ("mean actions", "eval", "mean_steps", ".2f"), ("pairs", "data", "pairs", "d"),
               ("skill use", "data", "skill_use", ".3f"), ("think words", "data", "think_words", ".1f"),
               ("q distill", "data", "quarantine_distill", ".3f"), ("q pairs", "data", "quarantine_pairs", ".3f"))


def arm_row(a: dict[str, Any], cols: list[tuple[str, str, str, str]]) -> list[str]:
    """One arm's cells: name, success, interval, then ``cols`` (``-`` where not recorded)."""
    ev = a.get("eval") or {}
    cells = [(a.get(part) or {}).get(key) for _, part, key, _ in cols]
    return [a["name"], wins(ev) if ev else "(not evaluated)", ci(ev),
            *("-" if v is None else format(v, spec) for v, (_, _, _, spec) in zip(cells, cols))]


def outcome_run(d: Doc) -> list[str]:
    """One run of the outcome experiment: settings, the arms' table, citations, wall time, verdict, notes."""
    from bench.render_results import machine_text, run_label, table
    g = d.get("figures") or {}
    arms = g.get("arms", [])
    best = max((a for a in arms if a.get("eval")), key=lambda a: a["eval"]["wins"] / a["eval"]["episodes"], default=None)
    out = [f"### {run_label(d)}", "", f"`{d.get('command', '')}` on {machine_text(d)}; game `{g.get('game')}` "
           f"({g.get('game_params')}); most wins: **{best['name'] if best else '-'}**.", "",
           "Settings: " + "; ".join(f"{k} = {num(v)}" for k, v in (d.get("budget") or {}).items()) + ".", ""]
    cols = [c for c in ARM_COLUMNS if any(c[2] in (a.get(c[1]) or {}) for a in arms)]
    out += table(["arm", "success", "95 % CI", *(c[0] for c in cols)], [arm_row(a, cols) for a in arms])
    w = g.get("where_skills_used")
    if w:
        out += ["", f"Skills arm's evaluation steps citing a skill: {w['citing_steps']}/{w['steps']}; success of "
                    f"episodes with a citation {w['wins_citing']}/{w['episodes_citing']}, without "
                    f"{w['wins_not_citing']}/{w['episodes_not_citing']} (descriptive, not causal)."]
    if g.get("wall_s"):
        out += ["", "Wall time (s): " + "; ".join(f"{k} {num(v)}" for k, v in g["wall_s"].items()) + "."]
    if g.get("verdict"):
        out += ["", "```", *g["verdict"], "```"]
    return out + ([""] + [f"- {n}" for n in d["notes"]] if d.get("notes") else [])


def pilot_run(d: Doc) -> list[str]:
    """One run of the pilot: a row per candidate game setting (as bench/outcome_pilot.py writes them)."""
    from bench.render_results import machine_text, run_label, table
    out = [f"### {run_label(d)}", "", f"On {machine_text(d)}. Settings: " +
           "; ".join(f"{k} = {num(v)}" for k, v in (d.get("budget") or {}).items()) + ".", ""]
    rows = [[f"{c['game']} ({c['params']})", num(c.get("eval_max_steps")),
             wins(c) if c.get("episodes") else "no SFT pair", ci(c),
             "-" if c.get("valid_action_rate") is None else f"{c['valid_action_rate']:.3f}",
             "-" if c.get("mean_steps") is None else f"{c['mean_steps']:.2f}", num(c.get("pairs")), num(c.get("wall_s"))]
            for c in get(d, "candidates") or []]
    out += table(["setting", "max actions", "action-only SFT", "95 % CI", "valid actions", "mean steps", "pairs",
                  "wall s"], rows)
    return out + ([""] + [f"- {n}" for n in d["notes"]] if d.get("notes") else [])


def grpo_run(d: Doc) -> list[str]:
    """GRPO on an outcome checkpoint: a row per step, then its evaluation against the SFT one."""
    from bench.render_results import machine_text, run_label, table
    out = [f"### {run_label(d)}", "", f"On {machine_text(d)}. Settings: " +
           "; ".join(f"{k} = {num(v)}" for k, v in (d.get("budget") or {}).items()) + ".", ""]
    out += table(["step", "rollouts won", "no-signal groups", "loss", "KL", "step wall s"],
                 [[num(s["step"]), "/".join(map(str, s["won"])), " of ".join(map(str, s["no_signal_groups"])),
                   num(s["loss"]), f"{s['kl']:.5f}", num(s["wall_s"])] for s in get(d, "steps") or []])
    e, sft = get(d, "eval") or {}, get(d, "sft_eval") or {}
    if e:
        out += ["", f"Evaluated like the arms: {wins(e)} {ci(e)}, valid actions {num(e.get('valid_action_rate'))}, "
                    f"format errors {e['format_error_rate']:.3f}, mean actions {e['mean_steps']:.2f}; the SFT "
                    f"checkpoint: {wins(sft)} {ci(sft)}. GRPO {num(get(d, 'grpo_s'))} s, its evaluation "
                    f"{num(get(d, 'eval_s'))} s."]
    return out + ([""] + [f"- {n}" for n in d["notes"]] if d.get("notes") else [])


OUTCOME_KINDS = {
    "outcome": Kind("Outcome: does the skill bank make a better agent?", INTROS["outcome"], render=outcome_run),
    "outcome_pilot": Kind("Outcome pilot: which game setting", INTROS["outcome_pilot"], render=pilot_run),
    "outcome_grpo": Kind("GRPO on top of the skills arm", INTROS["outcome_grpo"], render=grpo_run),
    "outcome_speedup": Kind("Outcome evaluation speed-ups", INTROS["outcome_speedup"], render=plain_run),
}

KINDS: dict[str, Kind] = {
    "make_run": Kind("`make run` on the shipped sample", INTROS["make_run"], (
        ("variant", lambda d: str((d.get("budget") or {}).get("variant", "default"))),
        ("data stages", lambda d: f("data_stages_s", "s")(d) if get(d, "data_stages_s") is not None
         else f"about {num(get(d, 'data_stages_min_approx'))} min" if get(d, "data_stages_min_approx") else "-"), ("memory / skills / distill", lambda d: " / ".join(
            f(f"stage_s.{s}")(d) for s in ("memory", "skills", "distill")) + " s" if get(d, "stage_s") else "-"),
        ("whole make run", minutes("make_run_s")), ("LLM calls", f("llm_calls")), ("tokens (cached prompt)", tokens),
        ("memory kept", of("memory_kept", "memory_in")), ("bank items", f("bank_items")),
        ("distill kept (model-written)", of("distill_kept", "distill_successes", "distill_model_written")),
        ("pairs", f("pairs")))),
    "make_install": Kind("Installing from a fresh clone", INTROS["make_install"], (
        ("make install", minutes("install_s")), ("install and tests", minutes("ci_install_and_tests_s")),
        ("tests passed", f("tests_passed")))),
    "sample_rerun": Kind("Stage reruns of a sample run", INTROS["sample_rerun"], render=plain_run),
    "skills_experiment": Kind("Skills stage experiments", INTROS["skills_experiment"], render=plain_run),
    "embedded_engine": Kind("The embedded LLM server", INTROS["embedded_engine"], render=plain_run),
    "verify": Kind("Verify: precision and recall", INTROS["verify"], (
        ("min precision", fixed("min_precision")), ("min recall", fixed("min_recall")),
        ("findings on uncorrupted gold", f("gold_flags")))),
    "parse_dedupe": Kind("Parse and loop removal against the reference", INTROS["parse_dedupe"], (
        ("tree", lambda d: str((d.get("budget") or {}).get("tree", "-"))),
        ("against", lambda d: str((d.get("budget") or {}).get("reference", "-"))),
        ("ours s", f("ours_wall_s")), ("reference s", f("reference_wall_s")),
        ("ratio_to_reference", f("ratio_to_reference")), ("CPU ratio", f("cpu_ratio_to_reference")),
        ("peak RSS MB", f("peak_rss_mb")))),
    "soak": Kind("Soak: parse and loop removal, over and over", INTROS["soak"], (
        ("workers", lambda d: str((d.get("budget") or {}).get("workers", "default"))), ("runs", f("runs")),
        ("hangs", f("hangs")), ("failures", f("failures")), ("leftovers", f("leftovers")), ("p50 s", f("p50_s")),
        ("p99 s", f("p99_s")), ("max s", f("max_s")), ("p99/p50", f("p99_over_p50")))),
    **OUTCOME_KINDS,
}

def auroc_cell(kind: str) -> Cell:
    """``0.53 (0.54)``: AUROC of ``kind`` (thinks | skills), helps against harmful in brackets."""
    def cell(d: Doc) -> str:
        a, h = get(d, f"{kind}.auroc"), get(d, f"{kind}.auroc_harmful")
        return "-" if a is None else f"{a:.2f} ({h:.2f})" if h is not None else f"{a:.2f}"
    return cell


def keep_cell(kind: str, who: str) -> Cell:
    """``0.22 / 0.61``: precision / recall of keeping by ``who`` (score | rules) on ``kind``."""
    def cell(d: Doc) -> str:
        p, r = get(d, f"{kind}.{who}.precision"), get(d, f"{kind}.{who}.recall")
        return "-" if p is None else f"{p:.2f} / {r:.2f}"
    return cell


KINDS["usefulness_validation"] = Kind("Usefulness score against labels", INTROS["usefulness_validation"], (
    ("scorer", lambda d: str((d.get("budget") or {}).get("scorer", "-"))),
    ("thinks AUROC", auroc_cell("thinks")), ("skills AUROC", auroc_cell("skills")),
    ("thinks kept, score P / R", keep_cell("thinks", "score")),
    ("thinks kept, rules P / R", keep_cell("thinks", "rules")),
    ("skills kept, score P / R", keep_cell("skills", "score")),
    ("skills kept, rules P / R", keep_cell("skills", "rules"))))
KINDS["usefulness_overhead"] = Kind("Usefulness scoring cost", INTROS["usefulness_overhead"], (
    ("overhead", fixed("ratio", ".3f")), ("scoring s", f("scoring_s")), ("thinks s", f("thinks_s")),
    ("bank s", f("bank_s")), ("data stages s", f("data_stages_s"))))
KINDS.update({n: Kind(t, INTROS[n], render=plain_run) for n, t in (
    ("teacher", "Teacher comparison"), ("llm_cost", "LLM cost: rate limits, batch and cache"),
    ("llm_stage", "LLM stage throughput"), ("scale", "Scaling out"), ("reliability", "Reliability suite")) if n not in KINDS})

#: Section order of docs/benchmarks.md (kinds not listed follow, by name).
ORDER = ("make_run", "make_install", "sample_rerun", "skills_experiment", "embedded_engine", "teacher", "outcome",
         "outcome_pilot", "outcome_grpo", "outcome_speedup", "verify", "parse_dedupe", "soak", "llm_stage", "llm_cost",
         "scale", "reliability", "usefulness_validation", "usefulness_overhead")

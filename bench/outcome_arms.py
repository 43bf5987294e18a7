"""The four arms of the outcome experiment (bench/outcome.py) and the skill-use figures.

Every arm trains (or not) the same student on the same trajectories, memories and skill bank;
the arms differ in two switches only:

=============  ==================  =====================================  ===========================
arm            think in target     skills block (distill + SFT + eval)    run id
=============  ==================  =====================================  ===========================
base           (no SFT)            yes (the skills arm's prompts)          ``<run-id>``
actions        empty               yes                                     ``<run-id>-actions``
thinks         distilled by LLM    no (empty bank: ``prompt.skills``)      ``<run-id>-noskills``
skills         distilled by LLM    yes (SkillRL's setting)                 ``<run-id>``
=============  ==================  =====================================  ===========================

So actions vs skills isolates the distilled think (same prompt), thinks vs skills isolates the
skill bank (both distilled by the same LLM; the thinks arm's distill prompt reads ``(none)``
where the skills would be, and its SFT and eval prompts have no experience section), and base
vs any SFT arm is what training adds. The base model is evaluated with the skills arm's
prompts (the bank in the prompt, as SkillRL serves it).

Skill use is measured by wording (:func:`pipeline.quality.metrics.uses_skill`): a think uses a
skill when it shares at least ``min_shared`` content words with the skill's text (title,
principle, when-to-apply) that are not in the step's context (task, observation, action). Every
arm is measured against the skills the skills arm shows for the same category, so the thinks
arm's rate is the chance overlap of a think written without the bank.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any, Iterable

from pipeline import prompts
from pipeline.bank.merge import skill_text
from pipeline.core.config import PipelineConfig, PromptConfig
from pipeline.core.records import Trajectory
from pipeline.quality.metrics import uses_skill


@dataclasses.dataclass(frozen=True)
class Arm:
    """One arm: ``trained`` (SFT or the base model as is), ``reasoning`` (``distill.reasoning``:
    ``llm`` | ``none``), ``skills`` (``prompt.skills``: the bank in distill, SFT and eval
    prompts) and the suffix of its run id."""
    name: str
    label: str
    trained: bool
    reasoning: str
    skills: bool
    suffix: str

    def run_id(self, run_id: str) -> str:
        """The run whose artifacts and checkpoint hold this arm (base: the skills arm's run)."""
        return run_id + self.suffix


ARMS = (
    Arm("base", "base model", False, "llm", True, ""),
    Arm("actions", "action-only SFT", True, "none", True, "-actions"),
    Arm("thinks", "distilled thinks, no skills", True, "llm", False, "-noskills"),
    Arm("skills", "distilled thinks + skill bank", True, "llm", True, ""),
)
#: Arms by name.
BY_NAME = {a.name: a for a in ARMS}


def arm(name: str) -> Arm:
    """The arm called ``name``; ``ValueError`` naming the known arms otherwise."""
    if name not in BY_NAME:
        raise ValueError(f"unknown arm {name!r}; known: {', '.join(BY_NAME)}")
    return BY_NAME[name]


def arm_config(a: Arm, base: PipelineConfig | None = None) -> PipelineConfig:
    """The pipeline config of arm ``a``: a copy of ``base`` (the skills arm's config; default
    :class:`PipelineConfig`) with ``distill.reasoning``, ``prompt.skills`` and, for empty
    thinks, ``build_pairs.empty_think = flag`` (an empty think is the point of that arm, not a
    defect). ``base`` is not changed."""
    cfg = copy.deepcopy(base) if base is not None else PipelineConfig()
    cfg.distill.reasoning = a.reasoning
    cfg.prompt.skills = a.skills
    if a.reasoning == "none":
        cfg.build_pairs.empty_think = "flag"
    return cfg


def skills_shown(a: Arm, bank_rows: list[dict], env: str, category: str, cfg: PromptConfig) -> list[dict]:
    """The bank rows arm ``a`` shows for a task of ``category`` (none for an arm without skills)."""
    return prompts.select_skills(bank_rows, env, category, dataclasses.replace(cfg, skills=a.skills))


def sft_prompt(a: Arm, traj: Trajectory, k: int, bank_rows: list[dict], think: str,
               cfg: PromptConfig | None = None) -> dict[str, Any]:
    """What arm ``a`` trains on (and is evaluated with) at action ``k`` of ``traj``:
    ``{"messages": chat messages, "target": SFT target or None for the base model}``. The think
    of an arm with ``reasoning = none`` is empty, as distill writes it."""
    cfg = cfg or PromptConfig()
    block = prompts.render_skills_block(skills_shown(a, bank_rows, traj.env, traj.category, cfg))
    messages = prompts.render_step_messages(traj, k, block, dataclasses.replace(cfg, skills=a.skills))
    if not a.trained:
        return {"messages": messages, "target": None}
    action = traj.steps[k].action or ""
    return {"messages": messages,
            "target": prompts.render_target(think if a.reasoning == "llm" else "", action, traj.env)}


# ------------------------------------------------------------------------------- skill use

_THINK = re.compile(r"<think>(.*?)</think>", re.S | re.I)


def think_of(output: str) -> str:
    """The text inside the first ``<think>...</think>`` of a policy output ('' when none)."""
    m = _THINK.search(output or "")
    return m.group(1).strip() if m else ""


def bank_texts(bank_rows: list[dict], env: str, category: str, cfg: PromptConfig | None = None) -> list[str]:
    """Texts (:func:`pipeline.bank.merge.skill_text`) of the skills the skills arm shows for a
    task of ``category``: what a think's wording is compared with."""
    return [skill_text(r) for r in prompts.select_skills(bank_rows, env, category, cfg or PromptConfig())]


def skill_use(steps: Iterable[dict[str, str]], bank_rows: list[dict], env: str, min_shared: int = 2,
              cfg: PromptConfig | None = None) -> dict[str, Any]:
    """Skill-use rate of thinks. Each step is ``{"think", "category", "context"}`` (context: the
    task, observation and action, whose words do not count). Returns ``{"steps", "with_think",
    "using", "rate"}``: ``rate`` = using / steps with a non-blank think (None when there is none);
    an empty think never uses a skill."""
    texts: dict[str, list[str]] = {}
    n = with_think = using = 0
    for s in steps:
        n += 1
        think = (s.get("think") or "").strip()
        if not think:
            continue
        with_think += 1
        cat = s.get("category") or ""
        if cat not in texts:
            texts[cat] = bank_texts(bank_rows, env, cat, cfg)
        using += uses_skill(think, texts[cat], s.get("context") or "", min_shared)
    return {"steps": n, "with_think": with_think, "using": using,
            "rate": round(using / with_think, 4) if with_think else None}


def pair_steps(pairs: list[dict], trajs: dict[str, Trajectory]) -> list[dict[str, str]]:
    """:func:`skill_use` steps of exported SFT pairs: the think, the category, and as context the
    task, the observation of the pair's step and its action."""
    out = []
    for p in pairs:
        t = trajs.get(p["trajectory_id"])
        obs = t.steps[min(p["step_index"], len(t.steps)) - 1].observation if t and t.steps else ""
        out.append({"think": p.get("think") or "", "category": p.get("category") or "",
                    "context": " ".join([t.task if t else "", obs, p.get("action") or ""])})
    return out


def where_skills_used(episodes: list[dict], bank_rows: list[dict], env: str, min_shared: int = 2,
                      cfg: PromptConfig | None = None) -> dict[str, Any]:
    """Where the policy's thinks cite the bank, from eval episode rows (``sft.eval.EPISODE_SCHEMA``:
    ``outputs``, ``actions``, ``task``, ``category``, ``won``). A step cites a skill when its
    think uses one (:func:`skill_use`; context = task and action: eval rows keep no observation).
    Returns ``{"steps", "citing_steps", "step_rate", "episodes_citing", "wins_citing",
    "success_citing", "episodes_not_citing", "wins_not_citing", "success_not_citing"}`` (an
    episode cites when one of its steps does; rates None for no steps or episodes). Descriptive:
    an episode that cites is not shown to win because it cites."""
    steps = citing = 0
    groups = {True: [0, 0], False: [0, 0]}  # cites -> [episodes, wins]
    for ep in episodes:
        any_cite = False
        for out, act in zip(ep.get("outputs") or [], ep.get("actions") or []):
            r = skill_use([{"think": think_of(out), "category": ep.get("category") or "",
                            "context": f"{ep.get('task') or ''} {act or ''}"}], bank_rows, env, min_shared, cfg)
            steps += 1
            citing += r["using"]
            any_cite = any_cite or bool(r["using"])
        groups[any_cite][0] += 1
        groups[any_cite][1] += bool(ep.get("won"))

    def rate(k: bool) -> float | None:
        return round(groups[k][1] / groups[k][0], 4) if groups[k][0] else None
    return {"steps": steps, "citing_steps": citing, "step_rate": round(citing / steps, 4) if steps else None,
            "episodes_citing": groups[True][0], "wins_citing": groups[True][1], "success_citing": rate(True),
            "episodes_not_citing": groups[False][0], "wins_not_citing": groups[False][1],
            "success_not_citing": rate(False)}

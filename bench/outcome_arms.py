"""The five arms of the outcome experiment (bench/outcome.py) and the skill-use figures.

Every arm trains (or not) the same student on the same trajectories and memories; the arms
differ in three switches (the think, the skills block, the usefulness gate) and in how many SFT
seeds they get:

=======  ================  =================================  ==========  =====================  =====
arm      think in target   skills block (distill, SFT, eval)  usefulness  run id                 seeds
=======  ================  =================================  ==========  =====================  =====
base     (no SFT)          yes: the ungated bank              off         ``<run-id>``           -
actions  empty             yes: the ungated bank              off         ``<run-id>-actions``   N
thinks   distilled by LLM  no (``prompt.skills: false``)      off         ``<run-id>-noskills``  1
skills   distilled by LLM  yes: the ungated bank              off         ``<run-id>``           N
gated    distilled by LLM  yes: the gated bank                quarantine  ``<run-id>-gated``     N
=======  ================  =================================  ==========  =====================  =====

(N = ``--seeds``, default 3; the SFT seed changes data order and LoRA init.)

The question is decided by actions vs skills vs gated, all three with the same prompts shape:
actions vs skills isolates the distilled think, gated vs skills isolates the usefulness gate
(``usefulness.policy: quarantine``: the skills stage drops bank items with no measured gain
before distill writes thinks with the bank, and the usefulness stage drops thinks with no gain),
gated vs actions asks whether thinks and a bank that passed the gate beat plain demonstrations.
The other arms run with the gate off: the actions arm's thinks are empty (the usefulness stage
scores no empty think) and its bank only sits in the prompt, so the gate would change nothing but
the bank block, which would then differ from the ungated arm it is compared with; the thinks arm
has no bank and is kept as earlier runs had it (ungated thinks), so its figures stay comparable
with them and it loads no scorer; base is not trained. thinks vs skills isolates the bank (both
distilled by the same LLM; the thinks arm's distill prompt reads ``(none)`` where the skills
would be, and its SFT and eval prompts have no experience section), base vs any SFT arm is what
training adds. The base model is evaluated with the skills arm's prompts (the ungated bank).

Data: the skills arm runs every stage; actions and thinks copy its artifacts up to the skill
bank and run :data:`ARM_STAGES`; gated copies them up to ``memory`` (same trajectories and
memories) and runs ``skills`` and :data:`ARM_STAGES` with the gate on (:attr:`Arm.own_stages`).

Skill use is measured by wording (:func:`pipeline.quality.metrics.uses_skill`): a think uses a
skill when it shares at least ``min_shared`` content words with the skill's text (title,
principle, when-to-apply) that are not in the step's context (task, observation, action). Every
arm's pairs are measured against the skills the skills arm shows for the same category, so the
thinks arm's rate is the chance overlap of a think written without the bank.
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


#: The data stages an arm other than skills runs itself on its copy of the skills arm's artifacts.
ARM_STAGES = ("distill", "build_pairs", "usefulness", "export")


@dataclasses.dataclass(frozen=True)
class Arm:
    """One arm: ``trained`` (SFT or the base model as is), ``reasoning`` (``distill.reasoning``:
    ``llm`` | ``none``), ``skills`` (``prompt.skills``: the bank in distill, SFT and eval
    prompts), ``usefulness`` (``usefulness.policy``: ``off`` | ``quarantine``), the suffix of its
    run id, ``seeded`` (trained with ``--seeds`` SFT seeds, else one) and ``own_stages`` (the data
    stages it runs itself; the earlier ones are copied from the skills arm's run)."""
    name: str
    label: str
    trained: bool
    reasoning: str
    skills: bool
    suffix: str
    usefulness: str = "off"
    seeded: bool = False
    own_stages: tuple[str, ...] = ARM_STAGES

    def run_id(self, run_id: str) -> str:
        """The run whose artifacts and checkpoints hold this arm (base: the skills arm's run)."""
        return run_id + self.suffix

    def seeds(self, n: int) -> list[int]:
        """The SFT seeds this arm trains with when the deciding arms get ``n``: ``0..n-1`` for a
        seeded arm, ``[0]`` for another trained arm, ``[]`` for the base model (not trained)."""
        return list(range(n)) if self.seeded and self.trained else [0] if self.trained else []


ARMS = (
    Arm("base", "base model", False, "llm", True, "", own_stages=()),
    Arm("actions", "action-only SFT", True, "none", True, "-actions", seeded=True),
    Arm("thinks", "distilled thinks, no skills", True, "llm", False, "-noskills"),
    Arm("skills", "distilled thinks + ungated bank", True, "llm", True, "", seeded=True,
        own_stages=("parse", "remove_loops", "verify", "split", "memory", "skills", *ARM_STAGES)),
    Arm("gated", "distilled thinks + gated bank", True, "llm", True, "-gated", "quarantine", seeded=True,
        own_stages=("skills", *ARM_STAGES)),
)
#: Arms by name.
BY_NAME = {a.name: a for a in ARMS}
#: The arms whose comparison decides the question (each trained with ``--seeds`` seeds).
DECIDING = tuple(a.name for a in ARMS if a.seeded)


def arm(name: str) -> Arm:
    """The arm called ``name``; ``ValueError`` naming the known arms otherwise."""
    if name not in BY_NAME:
        raise ValueError(f"unknown arm {name!r}; known: {', '.join(BY_NAME)}")
    return BY_NAME[name]


def arm_config(a: Arm, base: PipelineConfig | None = None) -> PipelineConfig:
    """The pipeline config of arm ``a``: a copy of ``base`` (the skills arm's config; default
    :class:`PipelineConfig`) with ``distill.reasoning``, ``prompt.skills``,
    ``usefulness.policy`` (set in every arm: its default follows ``$SKILLPIPE_USEFULNESS_POLICY``)
    and, for empty thinks, ``build_pairs.empty_think = flag`` (an empty think is the point of that
    arm, not a defect). ``base`` is not changed."""
    cfg = copy.deepcopy(base) if base is not None else PipelineConfig()
    cfg.distill.reasoning = a.reasoning
    cfg.prompt.skills = a.skills
    cfg.usefulness.policy = a.usefulness
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

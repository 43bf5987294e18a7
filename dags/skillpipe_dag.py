"""
### skillpipe

Agent rollout traces → skill bank → distilled SFT pairs → SFT fit (SkillRL method), one task per stage.
`plan` cuts the input into shards (param `shards`, 0 = one per 256 MB); the map stages (parse,
remove_loops, verify, memory, distill, build_pairs) run as one mapped task per shard, each followed by
`<stage>_all`, which collects the shards (for parse: the cross-shard duplicate and cap pass);
split, skills and export run once over all shards. Clearing one shard's task reruns that shard.
Every task calls `pipeline.engine.runner.run_task`, the same entry point as `skillpipe run --stages X`,
and returns only `{uri, rows, fingerprint}`. Artifacts live under `<root>/runs/<run_id>/<stage>/`.
With no `llm_base_url`, a setup task starts the embedded llama.cpp server and a teardown task
stops it, whatever happens in between. `eval_sft` and `eval_grpo` play each checkpoint on
held-out TextWorld Express games (test fold) and return its success rate with a 95 % interval.
`sft_fit`, `grpo` and the evaluations take their settings from the `sft:`, `grpo:` and `eval:`
sections of param `config` (as `skillpipe sft fit / rl grpo / eval --config` do; without a file,
the CPU demo budget); params `sft_max_steps`, `grpo_max_steps`, `eval_episodes`, `eval_games`
override one key each when set.
"""
from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, setup, task, teardown

from pipeline.core.layout import GRPO_STEP, SFT_STEP, run_dir
from pipeline.core.manifest import XCOM_KEYS
from pipeline.stages import STAGES, get_stage


def _args(params: dict, llm: dict) -> dict:
    from pipeline.engine.runner import safe_run_id
    from airflow.sdk import get_current_context
    run_id = params["run_id"] or safe_run_id(get_current_context()["run_id"])
    return dict(root=params["root"] or os.getcwd(), run_id=run_id, input_path=params["input_path"],
                env=params["env"], config_path=params["config"] or None,
                llm_base_url=llm["base_url"], llm_model=llm["model"], llm_mode=params.get("llm_mode") or "")


@task
def plan(params=None) -> list[str]:
    """Plan the input into shards; returns their ids (what the map stages expand over)."""
    from pipeline.engine.runner import plan_task
    a = _args(params, {"base_url": "", "model": ""})
    return plan_task(root=a["root"], run_id=a["run_id"], input_path=a["input_path"], shards=int(params["shards"]))


ENV_RETRY_DELAY = "SKILLPIPE_RETRY_DELAY_S"
DEFAULT_RETRY_DELAY_S = 150.0


def retry_delay_s() -> float:
    """Seconds between tries of a stage or collect task: ``$SKILLPIPE_RETRY_DELAY_S`` when set
    (read when the DAG file is parsed, i.e. in the dag-processor's environment), else
    :data:`DEFAULT_RETRY_DELAY_S`. The default outlasts the object-storage lease a killed worker
    leaves behind (``SKILLPIPE_LEASE_S``, default 120 s); a shorter delay only makes sense with a
    shorter lease. Raises ``ValueError`` (a DAG import error) when the value is not a finite
    number of seconds >= 0."""
    raw = (os.environ.get(ENV_RETRY_DELAY) or "").strip()
    try:
        delay = float(raw) if raw else DEFAULT_RETRY_DELAY_S
    except ValueError:
        delay = -1.0
    if not 0 <= delay < float("inf"):
        raise ValueError(f"${ENV_RETRY_DELAY} must be a number of seconds >= 0 "
                         f"(default {DEFAULT_RETRY_DELAY_S:g}), got {raw!r}")
    return delay


ENV_STAGE_TIMEOUT = "SKILLPIPE_STAGE_TIMEOUT_S"
DEFAULT_STAGE_TIMEOUT_S = 48 * 3600.0


def stage_timeout_s() -> float:
    """Seconds a stage or collect task may run before Airflow fails it (``execution_timeout``;
    the failed try is retried like any other): ``$SKILLPIPE_STAGE_TIMEOUT_S`` when set (read when
    the DAG file is parsed), else :data:`DEFAULT_STAGE_TIMEOUT_S`, sized for an LLM stage of one
    shard on CPU. The stages' own waits have shorter deadlines; this one catches anything else
    that would hold a worker slot and the run's lease forever. Raises ``ValueError`` (a DAG import
    error) for anything but a number of seconds > 0."""
    from pipeline.core.waits import seconds_from_env
    return seconds_from_env(ENV_STAGE_TIMEOUT, DEFAULT_STAGE_TIMEOUT_S)


#: Stage and collect tasks are retried (a killed or lost worker, an endpoint outage): a retry
#: reuses every committed shard and every cached or checkpointed LLM answer.
STAGE_RETRIES = dict(retries=2, retry_delay=timedelta(seconds=retry_delay_s()),
                     execution_timeout=timedelta(seconds=stage_timeout_s()))


def stage_task(name: str):
    """The task running stage ``name`` (one shard of it when mapped with ``shard``)."""
    @task(task_id=name, **STAGE_RETRIES, doc_md=f"Run the `{name}` stage (pipeline/stages/{name}.py), per shard if it maps.")
    def _run(llm: dict, upstream: dict | None = None, shard: str | None = None, params=None) -> dict:
        from pipeline.engine.runner import run_task
        return run_task(name, shard=shard, **_args(params, llm))
    return _run


def collect_task(name: str):
    """The task collecting the shards of map stage ``name`` (``<name>_all``)."""
    @task(task_id=f"{name}_all", **STAGE_RETRIES, doc_md=f"Collect the shards of `{name}` into its stage manifest (summed counts)"
                                       + ("; the cross-shard duplicate and cap pass" if name == "parse" else ""))
    def _collect(llm: dict, params=None) -> dict:
        from pipeline.engine.runner import run_task
        return run_task(name, **_args(params, llm))
    return _collect


def training(params: dict, section: str, **overrides):
    """Training section ``section`` (``sft``, ``grpo``, ``eval``) of the run's config (param
    ``config``; empty = the defaults, the CPU budget) with the DAG params given in ``overrides``
    applied when set (``None`` = not set). The same function the CLI commands read ``--config``
    with (``pipeline.runconfig.training_config``), so the DAG and the CLI train alike.
    Raises ``ConfigError`` (a ``ValueError``) for a bad config or param value."""
    from pipeline.runconfig import training_config
    return training_config(params["config"] or None, section, overrides)


@task(task_id=SFT_STEP, doc_md="SFT fit (TRL SFTTrainer, LoRA) on the export artifact: sft/run_step.py.")
def sft_fit(export: dict, params=None) -> dict:
    """Train on the run's export (skipped when unchanged); XCom ``{uri, rows, fingerprint}``.
    With param ``train`` False the task is skipped, and with it GRPO and both evaluations."""
    if not params.get("train", True):
        from airflow.sdk.exceptions import AirflowSkipException
        raise AirflowSkipException("param train is False: the run stops after export")
    from sft.run_step import fit_for_run
    a = _args(params, {"base_url": "", "model": ""})
    m = fit_for_run(a["root"], a["run_id"], training(params, "sft", max_steps=params.get("sft_max_steps")))
    return {k: m[k] for k in XCOM_KEYS}  # rows: SFT pairs trained on; fingerprint: the step's


@task(task_id=GRPO_STEP, doc_md="Online GRPO on TextWorld Express from the SFT checkpoint: sft/rl/step.py.")
def grpo(sft: dict, params=None) -> dict:
    """GRPO from the run's SFT checkpoint (skipped when unchanged); XCom ``{uri, rows, fingerprint}``."""
    from sft.rl.step import grpo_for_run
    a = _args(params, {"base_url": "", "model": ""})
    m = grpo_for_run(a["root"], a["run_id"], training(params, "grpo", max_steps=params.get("grpo_max_steps")))
    return {k: m[k] for k in XCOM_KEYS}  # rows: training episodes; fingerprint: the step's


def eval_task(which: str, task_id: str):
    """The task evaluating checkpoint ``which`` (``sft_fit`` | ``grpo``) of the run."""
    @task(task_id=task_id, doc_md=f"Evaluate the `{which}` checkpoint on held-out TextWorld Express games "
                                  "(sft/eval.py): success with a 95 % Wilson interval, valid-action rate.")
    def _eval(ckpt: dict, params=None) -> dict:
        from sft.eval import eval_for_run
        a = _args(params, {"base_url": "", "model": ""})
        cfg = training(params, "eval", games=params.get("eval_games") or None, episodes=params.get("eval_episodes"))
        r = eval_for_run(a["root"], a["run_id"], which, cfg, progress=False)
        return {**{k: r[k] for k in XCOM_KEYS}, "success_rate": r["success_rate"],
                "success_ci95": r["success_ci95"]}
    return _eval


@dag(
    dag_id="skillpipe",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["skillpipe", "sft"],
    doc_md=__doc__,
    params={
        "input_path": Param("data/samples", type="string", description="trace file or folder"),
        "env": Param("auto", enum=["auto", "alfworld", "webshop", "search", "textworld"], description="environment"),
        "run_id": Param("", type="string", description="artifact run id (empty: the Airflow run id)"),
        "root": Param("", type="string", description="folder holding runs/ (empty: worker cwd)"),
        "config": Param("", type="string", description="YAML config path (empty: defaults)"),
        "llm_base_url": Param("", type="string", description="OpenAI-compatible endpoint (empty: embedded)"),
        "llm_model": Param("", type="string", description="model name at that endpoint"),
        "llm_mode": Param("", enum=["", "online", "batch"],
                          description="online or batch (the endpoint's Batch API; empty: llm.mode of the config)"),
        "shards": Param(0, type="integer", minimum=0, description="shards of the map stages (0: one per 256 MB)"),
        "train": Param(True, type="boolean", description="SFT, GRPO and eval after export (False: stop after export)"),
        # training settings come from the config's sft:, grpo:, eval: sections (defaults: the CPU
        # demo budget); these params override one key each when set
        "sft_max_steps": Param(None, type=["null", "integer"], minimum=1,
                               description="SFT optimizer steps (empty: sft.max_steps of the config, default 3)"),
        "grpo_max_steps": Param(None, type=["null", "integer"], minimum=1,
                                description="GRPO steps (empty: grpo.max_steps of the config, default 2)"),
        "eval_episodes": Param(None, type=["null", "integer"], minimum=1,
                               description="held-out TextWorld Express games (test fold) per checkpoint evaluation "
                                           "(empty: eval.episodes of the config, default 4)"),
        "eval_games": Param("", type="string", description="comma-separated TextWorld Express games to evaluate on "
                                                          "(empty: eval.games of the config, default twc)"),
    },
)
def skillpipe():
    """The run's DAG (see the module docstring): ``plan`` and ``start_llm`` feed the stages in
    ``STAGES`` order (map stages per shard, then ``<stage>_all``); ``export`` >> ``stop_llm`` and
    ``sft_fit``; ``sft_fit`` >> ``eval_sft`` and ``grpo`` >> ``eval_grpo``; both >> ``report``."""
    @setup
    @task
    def start_llm(params=None) -> dict:
        """Start the embedded LLM server unless an endpoint is configured."""
        if params["llm_base_url"]:
            return {"base_url": params["llm_base_url"], "model": params["llm_model"], "state_dir": ""}
        from pipeline.llm.server import start_detached
        from pipeline.engine.runner import safe_run_id
        from airflow.sdk import get_current_context
        run_id = params["run_id"] or safe_run_id(get_current_context()["run_id"])
        state_dir = os.path.join(run_dir(params["root"] or os.getcwd(), run_id), "_llm_server")
        # llm_model without llm_base_url names an embedded model ("" = the default teacher); the
        # alias passed on makes the stages record the embedded model's identity
        info = start_detached(state_dir, model=params["llm_model"] or "")
        return {"base_url": info["base_url"], "model": info["model"], "state_dir": state_dir}

    @teardown
    @task
    def stop_llm(llm: dict) -> None:
        """Stop the embedded LLM server (runs even when a stage failed)."""
        if llm["state_dir"]:
            from pipeline.llm.server import stop_detached
            stop_detached(llm["state_dir"])

    # A teardown: it runs when everything before it is done, failed or not (a failed run gets a
    # report too), and unlike an all_done leaf it never decides the DAG run's state.
    @teardown
    @task(task_id="report",
          doc_md="Write the run report (`skillpipe report`, pipeline/report/): one self-contained HTML page, "
                 "`<root>/runs/<run_id>/report.html`. Its `file://` URI is this task's XCom `uri` (XCom tab) "
                 "and the last line of its log. Runs after the last step whether it failed or not.")
    def report(params=None) -> dict:
        from pipeline.core.storage import is_remote
        from pipeline.engine.remote import pull_run
        from pipeline.report import build_report
        a = _args(params, {"base_url": "", "model": ""})
        root = a["root"]
        if is_remote(root):  # the report reads a local folder: this worker's mirror of the run
            root = os.path.dirname(os.path.dirname(pull_run(root, a["run_id"])))
        r = build_report(root, a["run_id"], progress=lambda m: print(f"[report] {m}", flush=True),
                         bank_root=a["root"])  # banks/ stays in the bucket of an object-storage root
        print(f"[report] {r['bytes'] / 1e6:.2f} MB: file://{r['path']}", flush=True)
        return {"uri": f"file://{r['path']}", "rows": len(r["pngs"]), "fingerprint": ""}

    llm = start_llm()
    shards = ref = plan()
    for name in STAGES:
        if get_stage(name).sharded:  # a map stage: one task per shard, then its collect step
            mapped = stage_task(name).partial(llm=llm).expand(shard=shards)
            ref >> mapped >> (ref := collect_task(name)(llm))
        else:
            ref = stage_task(name)(llm, ref)
    ref >> stop_llm(llm)
    sft = sft_fit(ref)
    done = [eval_task(SFT_STEP, "eval_sft")(sft), eval_task(GRPO_STEP, "eval_grpo")(grpo(sft))]
    done >> report()  # last: the report shows the eval numbers too


skillpipe()

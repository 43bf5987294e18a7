"""``skillpipe sft ...``: typer sub-app (mounted by ``pipeline.cli`` as ``app.add_typer(sft.cli.app,
name="sft")``).

Examples::

    skillpipe sft submit --pairs runs/sample/export --config cpu --output runs/sample/sft
    skillpipe sft submit --pairs runs/sample/export --run-config run.yaml --dry-run   # its sft: section
    skillpipe sft submit --pairs s3://b/runs/r/export --config zero3 --num-processes 8 --no-lora --dry-run
    skillpipe sft submit --pairs ... --config multinode --num-machines 4 --scheduler slurm
    skillpipe sft submit --scheduler k8s --pvc sft-data --pairs /data/runs/sample/export \
        --output /data/runs/sample/sft --config zero3 --num-processes 16 --num-machines 2 --dry-run

With ``--scheduler k8s``, --pairs and --output(-dir) are paths inside the pod, e.g.
/data/runs/sample/export on the PersistentVolumeClaim of --pvc (mounted at --mount); the pod runs
--python in --workdir of --image.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import typer

from pipeline.core.layout import ARTIFACT_MANIFEST
from sft import config as sft_config
from sft.manifest import ResumeError
from sft.submit import Launch, Pod, SCHEDULERS, config_names, submit as do_submit

app = typer.Typer(help="SFT fit on exported SFT pairs (TRL SFTTrainer under Accelerate/DeepSpeed).",
                  no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Keeps ``sft`` a command group (typer collapses a one-command app into that command)."""


def _train_config(path: Optional[str], overrides: dict | None = None,
                  base: sft_config.SFTFitConfig | None = None) -> sft_config.SFTFitConfig:
    """The SFT config of ``--train-config`` (or ``base``, default the defaults) with
    ``overrides``, checked; a bad file or value is a usage error (exit 2, one line), never a
    traceback. The file's keys are applied over ``base``."""
    try:
        cfg = base or sft_config.SFTFitConfig()
        if path:
            cfg = sft_config.from_dict(sft_config.read_yaml(path), cfg)
        return sft_config.from_dict(overrides or {}, cfg)
    except OSError as e:
        raise typer.BadParameter(f"cannot read {path}: {e.strerror or e}", param_hint="--train-config")
    except ValueError as e:  # ConfigError: unknown key, wrong type, out of range
        raise typer.BadParameter(str(e))


def run_config_section(path: Optional[str], section: str, overrides: dict | None = None, option: str = "--config"):
    """Section ``section`` (``sft``, ``grpo``, ``eval``) of the run config at ``path`` (``None``
    = defaults) with the given options (``None`` = not given) applied, as the DAG tasks read it
    (``pipeline.core.train_config``). A file that cannot be read or holds a bad value is a usage
    error of ``option`` (the command's name for the run config) naming the file and the key; a bad
    option value one naming the key."""
    import yaml
    from pipeline.core.train_config import with_overrides
    from pipeline.runconfig import training_config
    try:
        cfg = training_config(path, section)
    except (ValueError, TypeError, OSError, yaml.YAMLError) as e:
        raise typer.BadParameter(f"config {path}: {e}".replace("\n", " "), param_hint=option)
    try:
        return with_overrides(section, cfg, overrides or {})
    except ValueError as e:
        raise typer.BadParameter(str(e))


@app.command("fit")
def fit_cmd(
    run_id: str = typer.Option("default", "--run-id", help="run whose export artifact to train on"),
    root: str = typer.Option(".", help="folder that holds runs/"),
    config: Optional[str] = typer.Option(None, "--config", "-c", help="run config YAML (the file of skillpipe run "
                                         "--config): its sft: section; the options below override it"),
    train_config: Optional[str] = typer.Option(None, help="YAML of SFT config fields (sft.config.SFTFitConfig), "
                                               "applied over --config"),
    max_steps: Optional[int] = typer.Option(None, help="optimizer steps (default: sft.max_steps of the config, 3)"),
    force: bool = typer.Option(False, help="train even when the export and config are unchanged"),
) -> None:
    """Train in this process on runs/RUN_ID/export (the `sft_fit` step of `make run` and the DAG)."""
    from pipeline.core.artifacts import ArtifactError
    from sft.run_step import fit_for_run
    base = run_config_section(config, "sft")
    cfg = _train_config(train_config, {} if max_steps is None else {"max_steps": max_steps}, base)
    try:
        m = fit_for_run(root, run_id, cfg, force=force, log=typer.echo)
    except (ArtifactError, ResumeError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps({"checkpoint": m["uri"], "global_step": m["global_step"], "final_loss": m["final_loss"],
                           "export_fingerprint": m["export"]["fingerprint"],
                           "bank_versions": m["export"].get("bank_versions"), "skipped": m["skipped"]}))


@app.command("submit")
def submit_cmd(
    pairs: str = typer.Option(..., help="export artifact folder (with _manifest.json) or a Parquet file; "
                              "k8s: a path inside the pod, e.g. /data/runs/sample/export"),
    config: str = typer.Option("cpu", help=f"accelerate config of sft/configs: {', '.join(config_names())}"),
    output: str = typer.Option("runs/sft", "--output", "--output-dir",
                               help="output folder for checkpoints and the final model; k8s: a path inside "
                                    "the pod on the volume, e.g. /data/runs/sample/sft"),
    scheduler: str = typer.Option("local", help=f"one of {', '.join(SCHEDULERS)}"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the command / job script; run nothing"),
    max_steps: Optional[int] = typer.Option(None, help="optimizer steps (default: the SFT config's)"),
    lora: Optional[bool] = typer.Option(None, "--lora/--no-lora", help="LoRA adapter or full fine-tune"),
    num_processes: Optional[int] = typer.Option(None, min=1, help="total processes over all machines (a multiple "
                                                "of --num-machines)"),
    num_machines: Optional[int] = typer.Option(None, min=1, help="machines (scheduler scripts: nodes / pods)"),
    gpus_per_node: int = typer.Option(8, min=1, help="GPUs per node in Slurm / Kubernetes scripts"),
    run_config: Optional[str] = typer.Option(None, "--run-config", help="run config YAML (the file of skillpipe run "
                                             "--config): its sft: section, as `sft fit --config` and the DAG read "
                                             "it; --train-config and the options here override it"),
    train_config: Optional[str] = typer.Option(None, help="YAML of SFT config fields (sft.config.SFTFitConfig), "
                                               "applied over --run-config"),
    resume: str = typer.Option("", help="'' fresh, 'auto' latest checkpoint in --output, or a checkpoint path"),
    resume_mode: str = typer.Option("strict", help="strict | weights_only (fresh optimizer on topology change)"),
    base_model: str = typer.Option("", help="local HF model folder ('' = embedded SmolLM2-135M-Instruct)"),
    image: str = typer.Option("skillpipe:latest", help="container image for --scheduler k8s"),
    python: str = typer.Option("python", help="k8s: the image's python (with the project installed)"),
    workdir: str = typer.Option("/workspace", help="k8s: working dir inside the image (holds the project)"),
    pvc: Optional[str] = typer.Option(None, help="k8s: PersistentVolumeClaim with the pairs; checkpoints are "
                                                 "written there too (--pairs/--output are paths under --mount)"),
    mount: str = typer.Option("/data", help="k8s: where --pvc is mounted in the pod"),
    no_volume: bool = typer.Option(False, "--no-volume", help="k8s: mount nothing; the image already contains "
                                                              "the pairs (checkpoints are lost with the pod)"),
    job_file: Optional[str] = typer.Option(None, help="where to write the job file (default: Slurm "
                                                      "<output>/sft_job.sbatch, k8s ./sft_job.yaml)"),
) -> None:
    """Build the `accelerate launch` command for CONFIG and run it, or write a Slurm/Kubernetes job."""
    overrides = {"pairs": pairs, "output_dir": output, "resume": resume, "resume_mode": resume_mode}
    if max_steps is not None:
        overrides["max_steps"] = max_steps
    if lora is not None:
        overrides["lora"] = lora
    if base_model:
        overrides["base_model"] = base_model
    base = run_config_section(run_config, "sft", option="--run-config") if run_config else None
    cfg = _train_config(train_config, overrides, base)
    if scheduler != "k8s" and "://" not in pairs and not os.path.exists(pairs):
        # k8s paths are the container's; URLs are read by the job itself
        raise typer.BadParameter(f"{pairs} does not exist", param_hint="--pairs")
    if num_machines and not num_processes:  # one process per GPU on every machine
        num_processes = num_machines * gpus_per_node
    launch = Launch(config=config, train_args=sft_config.to_argv(cfg), num_processes=num_processes,
                    num_machines=num_machines, gpus_per_node=gpus_per_node)
    try:
        out = do_submit(launch, output, scheduler=scheduler, dry_run=dry_run, resume=resume,
                        resume_mode=resume_mode, export_fingerprint=_fingerprint(pairs), job_file=job_file,
                        pod=Pod(image=image, python=python, workdir=workdir, pvc=pvc, mount=mount,
                                no_volume=no_volume))
    except (ResumeError, FileNotFoundError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2)
    _report_submit(out, dry_run, scheduler)


def _report_submit(out: dict, dry_run: bool, scheduler: str) -> None:
    """Print what :func:`sft.submit.submit` made (the job script or where it went, the local
    command on a dry run); exit with the launched command's return code when it failed."""
    if out["script"] is not None and (dry_run or not out["path"]):
        typer.echo(out["script"])
    elif out["path"]:
        typer.echo(f"wrote {out['path']}")
    if dry_run and scheduler == "local":
        typer.echo(out["command"])
    if out["returncode"]:
        raise typer.Exit(out["returncode"])


def _fingerprint(pairs: str) -> Optional[str]:
    """Export fingerprint from ``<pairs>/_manifest.json`` when it is local; ``None`` otherwise
    (the resume check then trusts the checkpoint's own record, and the job re-checks it)."""
    path = os.path.join(pairs if os.path.isdir(pairs) else os.path.dirname(pairs), ARTIFACT_MANIFEST)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("fingerprint")

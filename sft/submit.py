"""Build, run or schedule the ``accelerate launch`` command of the SFT job (issue 5 item 4).

``build_command`` turns a config name of ``sft/configs/`` plus the trainer flags into an argv;
:func:`submit` checks resume compatibility *before* anything is launched, then

* ``local``: runs the command here (one machine; ``accelerate launch`` spawns the processes);
* ``slurm``: writes ``<output>/sft_job.sbatch`` (one task per node; ``srun`` starts one launcher
  per node with ``--machine_rank $SLURM_NODEID`` and the first node as rendezvous host);
* ``k8s``: writes ``<output>/sft_job.yaml``: an Indexed ``batch/v1`` Job (one pod per node,
  ``machine_rank = $JOB_COMPLETION_INDEX``) plus a headless Service giving pod 0 a DNS name.

``dry_run`` returns/prints the command or script and writes nothing, runs nothing.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import yaml

from . import manifest as mf

CONFIG_DIR = Path(__file__).parent / "configs"
SCHEDULERS = ("local", "slurm", "k8s")
PORT = 29500


def config_names() -> list[str]:
    """Names of the accelerate configs shipped in ``sft/configs`` (file stems)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def config_path(name: str) -> Path:
    """Path of config ``name`` (a stem of ``sft/configs`` or a path to a YAML file); raises
    ``FileNotFoundError`` naming the available configs."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    p = CONFIG_DIR / f"{name}.yaml"
    if not p.is_file():
        raise FileNotFoundError(f"unknown accelerate config {name!r}; available: {', '.join(config_names())}")
    return p


@dataclass
class Launch:
    """What to launch: config, topology overrides and the trainer's flags (``python -m sft.train``)."""
    config: str = "cpu"
    train_args: list[str] = field(default_factory=list)
    num_processes: int | None = None        # total processes (all machines); None = config's
    num_machines: int | None = None
    gpus_per_node: int = 8                  # scheduler scripts only
    python: str = sys.executable


def build_command(launch: Launch, machine_rank: str | None = None, main_process_ip: str | None = None) -> list[str]:
    """argv of ``python -m accelerate.commands.launch --config_file <cfg> [overrides] -m sft.train
    <train_args>``. ``machine_rank`` / ``main_process_ip`` may be shell variables (``$SLURM_NODEID``)
    for scheduler scripts; then the argv is meant for a shell, not for ``subprocess``."""
    cmd = [launch.python, "-m", "accelerate.commands.launch", "--config_file", str(config_path(launch.config))]
    if launch.num_processes:
        cmd += ["--num_processes", str(launch.num_processes)]
    if launch.num_machines:
        cmd += ["--num_machines", str(launch.num_machines)]
    if machine_rank is not None:
        cmd += ["--machine_rank", machine_rank, "--main_process_ip", main_process_ip or "127.0.0.1",
                "--main_process_port", str(PORT)]
    return cmd + ["-m", "sft.train", *launch.train_args]


def _shell(cmd: Sequence[str]) -> str:
    """Quote for a shell but leave ``$VARS`` expandable (they are our own, never user text)."""
    return " ".join(a if a.startswith("$") else shlex.quote(a) for a in cmd)


def slurm_script(launch: Launch, job_name: str = "skillpipe-sft") -> str:
    """An sbatch script: ``--nodes = num_machines``, one task per node, ``srun`` runs one
    ``accelerate launch`` per node; the first host of the allocation is the rendezvous host."""
    nodes = launch.num_machines or 1
    cmd = _shell(build_command(launch, machine_rank="$SLURM_NODEID", main_process_ip="$MASTER_ADDR"))
    return "\n".join([
        "#!/bin/bash", f"#SBATCH --job-name={job_name}", f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1", f"#SBATCH --gpus-per-node={launch.gpus_per_node}",
        "#SBATCH --output=%x-%j.out", "set -euo pipefail",
        "export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false",
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"cd {shlex.quote(os.getcwd())}",
        # single quotes: $SLURM_NODEID must expand on each node, not once on the batch host
        f"srun --ntasks-per-node=1 bash -c {shlex.quote(cmd)}", ""])


def k8s_manifest(launch: Launch, image: str, job_name: str = "skillpipe-sft") -> str:
    """Kubernetes YAML: a headless Service and an Indexed Job with one pod per machine."""
    nodes = launch.num_machines or 1
    head = f"{job_name}-0.{job_name}"  # DNS name of pod index 0 through the headless Service
    cmd = _shell(build_command(launch, machine_rank="$JOB_COMPLETION_INDEX", main_process_ip=head))
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": job_name},
               "spec": {"clusterIP": "None", "selector": {"job-name": job_name},
                        "ports": [{"port": PORT, "name": "rdzv"}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job_name},
           "spec": {"completions": nodes, "parallelism": nodes, "completionMode": "Indexed",
                    "backoffLimit": 0, "template": {"spec": {
                        "subdomain": job_name, "restartPolicy": "Never",
                        "containers": [{"name": "sft", "image": image, "workingDir": os.getcwd(),
                                        "command": ["bash", "-c", cmd],
                                        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
                                        "resources": {"limits": {"nvidia.com/gpu": launch.gpus_per_node}}}]}}}}
    return yaml.safe_dump_all([service, job], sort_keys=False)


def check_topology(launch: Launch, scheduler: str = "local") -> None:
    """Raise ``ValueError`` for a topology ``accelerate launch`` cannot run as asked.

    * counts must be >= 1 (a 0 used to be dropped silently, launching the config's count); a
      count not given is the accelerate config's (``num_processes``/``num_machines``);
    * ``num_processes`` must be a multiple of ``num_machines``: accelerate starts
      ``num_processes // num_machines`` processes on every machine, so a remainder is lost;
    * Slurm/Kubernetes scripts reserve ``gpus_per_node`` GPUs per node: more processes per node
      than that would share GPUs;
    * ``local`` runs one launcher on this machine without a machine rank, so it cannot be one of
      several machines (use ``slurm``/``k8s``).
    """
    for name in ("num_processes", "num_machines", "gpus_per_node"):
        value = getattr(launch, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    with open(config_path(launch.config), encoding="utf-8") as f:  # what the flags leave to the config
        cfg = yaml.safe_load(f) or {}
    procs = launch.num_processes or cfg.get("num_processes")
    machines = launch.num_machines or cfg.get("num_machines") or 1
    if procs and procs % machines:
        raise ValueError(f"--num-processes {procs} does not split evenly over --num-machines {machines} "
                         f"(accelerate starts num_processes / num_machines processes on each machine)")
    if scheduler != "local" and procs and procs // machines > launch.gpus_per_node:
        raise ValueError(f"{procs // machines} processes per node but the job reserves --gpus-per-node "
                         f"{launch.gpus_per_node}")
    if scheduler == "local" and machines > 1:
        raise ValueError(f"--scheduler local runs on this machine only; --num-machines {machines} needs "
                         "--scheduler slurm or k8s")


def check_before_launch(launch: Launch, output_dir: str, resume: str, export_fingerprint: str | None,
                        resume_mode: str = "strict") -> str | None:
    """Resume check with the topology the config *will* launch; raises ``ResumeError`` before
    any process starts. Returns the decision (``continue``/``weights_only``) or ``None``."""
    ckpt = mf.find_checkpoint(output_dir, resume)
    if not ckpt:
        return None
    world, zero = mf.config_topology(str(config_path(launch.config)), launch.num_processes)
    saved = mf.read_manifest(ckpt)
    fp = export_fingerprint if export_fingerprint is not None else (saved or {}).get("export", {}).get("fingerprint")
    return mf.check_resume(saved, world_size=world, zero_stage=zero, export_fingerprint=fp, mode=resume_mode)


def submit(launch: Launch, output_dir: str, scheduler: str = "local", dry_run: bool = False,
           resume: str = "", resume_mode: str = "strict", export_fingerprint: str | None = None,
           image: str = "skillpipe:latest") -> dict:
    """Check, then run or write the job. Returns ``{"command": str, "script": str|None,
    "path": str|None, "returncode": int|None, "resume": decision}``; raises ``ValueError`` for
    an unknown scheduler or a bad topology (:func:`check_topology`) and ``ResumeError`` for an
    incompatible checkpoint."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; use one of {SCHEDULERS}")
    check_topology(launch, scheduler)
    decision = check_before_launch(launch, output_dir, resume, export_fingerprint, resume_mode)
    command = _shell(build_command(launch))
    out = {"command": command, "script": None, "path": None, "returncode": None, "resume": decision}
    if scheduler != "local":
        script = slurm_script(launch) if scheduler == "slurm" else k8s_manifest(launch, image)
        out["script"] = script
        if not dry_run:
            path = Path(output_dir) / ("sft_job.sbatch" if scheduler == "slurm" else "sft_job.yaml")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(script, encoding="utf-8")
            out["path"] = str(path)
    elif not dry_run:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        out["returncode"] = subprocess.run(build_command(launch), env=env, check=False).returncode
    return out

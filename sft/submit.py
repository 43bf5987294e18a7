"""Build, run or schedule the ``accelerate launch`` command of the SFT job.

``build_command`` turns a config name of ``sft/configs/`` plus the trainer flags into an argv;
:func:`submit` checks resume compatibility *before* anything is launched, then

* ``local``: runs the command here (one machine; ``accelerate launch`` spawns the processes);
* ``slurm``: writes ``<output>/sft_job.sbatch`` (one task per node; ``srun`` starts one launcher
  per node with ``--machine_rank $SLURM_NODEID`` and the first node as rendezvous host);
* ``k8s``: writes ``sft_job.yaml`` (here, or ``job_file``): an Indexed ``batch/v1`` Job (one pod
  per node, ``machine_rank = $JOB_COMPLETION_INDEX``), a headless Service giving pod 0 a DNS name
  and a ConfigMap with the accelerate config. The pod runs the *image's* python in the image's
  working dir (:class:`Pod`), never this checkout's ``.venv``, and mounts a PersistentVolumeClaim
  (``Pod.pvc``, at ``Pod.mount``): ``--pairs`` and ``--output-dir`` are paths inside the pod, e.g.
  ``/data/runs/sample/export``, so the pairs are readable and checkpoints outlive the pod. A job
  without a volume is refused unless ``Pod.no_volume`` says the image already holds the data.

``dry_run`` returns/prints the command or script and writes nothing, runs nothing.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Sequence

import yaml

from sft import manifest as mf

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


@dataclass
class Pod:
    """Where a ``k8s`` job runs: paths and programs of the container, not of this machine.

    ``python``/``workdir`` are the image's (the image is expected to hold the project at
    ``workdir`` with its dependencies installed). ``pvc`` is a PersistentVolumeClaim mounted at
    ``mount``; ``--pairs``/``--output-dir`` must then lie under ``mount``. ``no_volume=True``
    declares that the image itself holds the pairs (checkpoints are lost with the pod)."""
    image: str = "skillpipe:latest"
    python: str = "python"
    workdir: str = "/workspace"
    pvc: str | None = None
    mount: str = "/data"
    no_volume: bool = False


#: Where the ConfigMap with the accelerate config is mounted in a ``k8s`` pod.
K8S_CONFIG_DIR = "/etc/skillpipe"


def build_command(launch: Launch, machine_rank: str | None = None, main_process_ip: str | None = None,
                  config_file: str | None = None) -> list[str]:
    """argv of ``python -m accelerate.commands.launch --config_file <cfg> [overrides] -m sft.train
    <train_args>``. ``machine_rank`` / ``main_process_ip`` may be shell variables (``$SLURM_NODEID``)
    for scheduler scripts; then the argv is meant for a shell, not for ``subprocess``.
    ``config_file`` replaces the local config path (a pod reads its own copy)."""
    cmd = [launch.python, "-m", "accelerate.commands.launch", "--config_file",
           config_file or str(config_path(launch.config))]
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


def _arg(argv: Sequence[str], flag: str) -> str | None:
    """Value following ``flag`` in ``argv`` (``None`` when absent)."""
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def check_k8s_paths(pod: Pod, pairs: str | None, output_dir: str, resume: str = "") -> None:
    """Raise ``ValueError`` when a ``k8s`` pod could not read the pairs or keep its checkpoints.

    * a volume is required: ``pod.pvc``, or ``pod.no_volume`` to say the image holds the data;
    * ``pairs``, ``output_dir`` and a ``resume`` checkpoint path are paths inside the pod: absolute,
      and under ``pod.mount`` when a PVC is mounted (URLs with ``://`` are read by the job itself).
    """
    if pod.pvc and pod.no_volume:
        raise ValueError("--pvc and --no-volume exclude each other")
    if not pod.pvc and not pod.no_volume:
        raise ValueError("--scheduler k8s needs --pvc NAME: a PersistentVolumeClaim with the pairs that also "
                         "keeps the checkpoints (mounted at --mount); pass --no-volume only when the image "
                         "already contains the pairs (checkpoints are then lost with the pod)")
    mount = PurePosixPath(pod.mount)
    if not mount.is_absolute():
        raise ValueError(f"--mount must be an absolute path in the pod, got {pod.mount!r}")
    named = [("--pairs", pairs), ("--output-dir", output_dir)]
    named += [("--resume", resume)] if resume not in ("", "auto") else []
    for flag, path in named:
        if not path or "://" in path:
            continue
        p = PurePosixPath(path)
        inside = p.is_absolute() and (not pod.pvc or (p.is_relative_to(mount) and ".." not in p.parts))
        if not inside:
            where = f"under the volume mount {pod.mount}" if pod.pvc else "absolute in the image"
            raise ValueError(f"{flag} {path!r} must be a path inside the pod, {where} "
                             f"(e.g. {pod.mount}/runs/sample/export): --pairs and --output-dir are paths "
                             "inside the pod")


def k8s_manifest(launch: Launch, pod: Pod, job_name: str = "skillpipe-sft") -> str:
    """Kubernetes YAML: a headless Service, a ConfigMap with the accelerate config and an Indexed
    Job with one pod per machine, running ``pod.python`` in ``pod.workdir`` of ``pod.image`` with
    ``pod.pvc`` mounted at ``pod.mount`` (paths: :func:`check_k8s_paths`)."""
    nodes = launch.num_machines or 1
    head = f"{job_name}-0.{job_name}"  # DNS name of pod index 0 through the headless Service
    cfg_map = f"{job_name}-accelerate"
    cmd = _shell(build_command(replace(launch, python=pod.python), machine_rank="$JOB_COMPLETION_INDEX",
                               main_process_ip=head, config_file=f"{K8S_CONFIG_DIR}/accelerate.yaml"))
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": job_name},
               "spec": {"clusterIP": "None", "selector": {"job-name": job_name},
                        "ports": [{"port": PORT, "name": "rdzv"}]}}
    # the config checked here (check_topology) is the one the pod runs, whatever the image ships
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cfg_map},
              "data": {"accelerate.yaml": config_path(launch.config).read_text(encoding="utf-8")}}
    volumes = [{"name": "accelerate-config", "configMap": {"name": cfg_map}}]
    mounts = [{"name": "accelerate-config", "mountPath": K8S_CONFIG_DIR, "readOnly": True}]
    if pod.pvc:
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": pod.pvc}})
        mounts.append({"name": "data", "mountPath": pod.mount})
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job_name},
           "spec": {"completions": nodes, "parallelism": nodes, "completionMode": "Indexed",
                    "backoffLimit": 0, "template": {"spec": {
                        "subdomain": job_name, "restartPolicy": "Never", "volumes": volumes,
                        "containers": [{"name": "sft", "image": pod.image, "workingDir": pod.workdir,
                                        "command": ["bash", "-c", cmd],
                                        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"},
                                                {"name": "TOKENIZERS_PARALLELISM", "value": "false"}],
                                        "volumeMounts": mounts,
                                        "resources": {"limits": {"nvidia.com/gpu": launch.gpus_per_node}}}]}}}}
    return yaml.safe_dump_all([service, config, job], sort_keys=False)


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
           pod: Pod | None = None, job_file: str | None = None) -> dict:
    """Check, then run or write the job. Returns ``{"command": str, "script": str|None,
    "path": str|None, "returncode": int|None, "resume": decision}``; raises ``ValueError`` for
    an unknown scheduler, a bad topology (:func:`check_topology`) or, for ``k8s``, pod paths
    the pod cannot use (:func:`check_k8s_paths`; ``pod`` defaults to ``Pod()``), and
    ``ResumeError`` for an incompatible checkpoint.

    The job file goes to ``job_file``, else ``<output_dir>/sft_job.sbatch`` (Slurm: a shared
    filesystem path) or ``./sft_job.yaml`` (k8s: ``output_dir`` is a path inside the pod). For
    k8s the local resume check runs only on checkpoints visible here; the trainer re-checks."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; use one of {SCHEDULERS}")
    check_topology(launch, scheduler)
    if scheduler == "k8s":
        pod = pod or Pod()
        check_k8s_paths(pod, _arg(launch.train_args, "--pairs"), output_dir, resume)
    if scheduler == "k8s" and resume not in ("", "auto") and not os.path.isdir(resume):
        decision = None  # a checkpoint on the pod's volume: the trainer checks it in the pod
    else:
        decision = check_before_launch(launch, output_dir, resume, export_fingerprint, resume_mode)
    command = _shell(build_command(launch))
    out = {"command": command, "script": None, "path": None, "returncode": None, "resume": decision}
    if scheduler != "local":
        script = slurm_script(launch) if scheduler == "slurm" else k8s_manifest(launch, pod)
        out["script"] = script
        if not dry_run:
            default = Path(output_dir) / "sft_job.sbatch" if scheduler == "slurm" else Path("sft_job.yaml")
            path = Path(job_file) if job_file else default
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(script, encoding="utf-8")
            out["path"] = str(path)
    elif not dry_run:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        out["returncode"] = subprocess.run(build_command(launch), env=env, check=False).returncode
    return out

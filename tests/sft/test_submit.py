"""`skillpipe sft submit`: dry-run commands that accelerate's own parser accepts; Slurm and
Kubernetes job files; the resume check happens before anything is launched."""
import shlex
import subprocess

import pytest
import yaml
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import launch_command_parser
from typer.testing import CliRunner

from sft import manifest as mf
from sft.cli import app
from sft.demo import write_demo_export
from sft.submit import Launch, Pod, build_command, config_names, k8s_manifest, slurm_script, submit
from sft.train import parse_args

runner = CliRunner()


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return write_demo_export(str(tmp_path_factory.mktemp("sft")))


def _accelerate_args(argv):
    """Parse the part after ``python -m accelerate.commands.launch`` with accelerate's parser."""
    assert argv[1:3] == ["-m", "accelerate.commands.launch"]
    return launch_command_parser().parse_args(argv[3:])


def test_shipped_configs_load_in_accelerate():
    assert config_names() == ["cpu", "ddp", "multinode", "zero2", "zero2_offload", "zero3", "zero3_offload"]
    cfg = load_config_from_file(str(build_command(Launch("zero3_offload"))[4]))
    assert (cfg.distributed_type, cfg.deepspeed_config["zero_stage"],
            cfg.deepspeed_config["offload_param_device"]) == ("DEEPSPEED", 3, "cpu")


@pytest.mark.parametrize("config,nproc", [("ddp", "4"), ("zero3", "8")])
def test_dry_run_prints_valid_launch_command(export, tmp_path, config, nproc):
    res = runner.invoke(app, ["submit", "--pairs", export.path, "--config", config, "--output",
                              str(tmp_path / "out"), "--num-processes", nproc, "--no-lora",
                              "--max-steps", "5", "--dry-run"])
    assert res.exit_code == 0, res.output
    argv = shlex.split(res.output.strip().splitlines()[-1])
    args = _accelerate_args(argv)
    assert (args.config_file.endswith(f"sft/configs/{config}.yaml"), args.num_processes, args.module,
            args.training_script) == (True, int(nproc), True, "sft.train")
    cfg = parse_args(args.training_script_args)
    assert (cfg.pairs, cfg.max_steps, cfg.lora, cfg.output_dir) == (export.path, 5, False, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()  # dry run writes nothing


def test_slurm_script_is_valid_bash_with_per_node_rank(tmp_path):
    script = slurm_script(Launch("multinode", ["--pairs", "p q"], num_machines=2, gpus_per_node=4))
    assert "#SBATCH --nodes=2" in script and "#SBATCH --gpus-per-node=4" in script
    (tmp_path / "job.sbatch").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")]).returncode == 0
    inner = shlex.split(shlex.split(script.splitlines()[-1])[-1])  # the command srun runs per node
    assert inner[inner.index("--machine_rank") + 1] == "$SLURM_NODEID"
    assert inner[inner.index("--main_process_ip") + 1] == "$MASTER_ADDR"
    assert inner[-2:] == ["--pairs", "p q"]


def test_k8s_manifest_is_indexed_job_with_headless_service():
    docs = list(yaml.safe_load_all(k8s_manifest(Launch("multinode", num_machines=3), Pod(image="img:1"))))
    assert [d["kind"] for d in docs] == ["Service", "ConfigMap", "Job"]
    spec = docs[2]["spec"]
    assert (spec["completions"], spec["completionMode"], spec["template"]["spec"]["subdomain"]) == (3, "Indexed", "skillpipe-sft")
    cmd = shlex.split(spec["template"]["spec"]["containers"][0]["command"][2])
    assert cmd[cmd.index("--machine_rank") + 1] == "$JOB_COMPLETION_INDEX"  # expanded by bash in the pod
    args = _accelerate_args([a.replace("$JOB_COMPLETION_INDEX", "2") for a in cmd])
    assert (args.num_machines, args.machine_rank, args.main_process_ip) == (3, 2, "skillpipe-sft-0.skillpipe-sft")


def test_resume_with_other_topology_fails_before_launch(export, tmp_path):
    out = tmp_path / "out"
    mf.write_checkpoint_manifest(str(out / "checkpoint-4"), {"export": {"fingerprint": export.fingerprint},
                                                  "world_size": 1, "zero_stage": 2, "global_step": 4})
    res = runner.invoke(app, ["submit", "--pairs", export.path, "--config", "zero3", "--num-processes", "1",
                              "--output", str(out), "--resume", "auto"])
    assert res.exit_code == 2
    assert "cannot resume step 4: ZeRO stage 2 -> 3." in res.output
    res = runner.invoke(app, ["submit", "--pairs", export.path, "--config", "zero2", "--num-processes", "1",
                              "--output", str(out), "--resume", "auto", "--dry-run"])
    assert res.exit_code == 0 and "--resume auto" in res.output


def test_local_submit_runs_the_built_command_and_writes_scheduler_files(tmp_path):
    # /bin/true stands in for python: proves the local path executes the argv it built
    out = submit(Launch("cpu", ["--max_steps", "1"], python="/bin/true"), str(tmp_path), scheduler="local")
    assert out["returncode"] == 0 and out["command"].startswith("/bin/true -m accelerate.commands.launch")
    out = submit(Launch("zero2"), str(tmp_path), scheduler="slurm")
    assert out["path"] == str(tmp_path / "sft_job.sbatch") and (tmp_path / "sft_job.sbatch").read_text() == out["script"]
    with pytest.raises(ValueError, match="unknown scheduler 'pbs'"):
        submit(Launch("cpu"), str(tmp_path), scheduler="pbs")


@pytest.mark.parametrize("args,msg", [
    (["--max-steps", "-5"], "max_steps: must be >= 1, got -5"),
    (["--resume-mode", "foo"], "resume_mode: must be one of strict, weights_only, got 'foo'"),
    (["--train-config", "missing.yaml"], "cannot read missing.yaml: No such file or directory"),
    (["--num-processes", "0"], "Input should be greater than or equal to 1"),
])
def test_bad_values_are_usage_errors_not_tracebacks(export, tmp_path, args, msg):
    res = runner.invoke(app, ["submit", "--pairs", export.path, "--output", str(tmp_path / "o"), "--dry-run", *args])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
    assert msg in " ".join(res.output.replace("│", " ").split())


def test_unknown_train_config_key_is_a_usage_error_for_submit_and_fit(export, tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("lora_rank: 3\n")
    for argv in (["submit", "--pairs", export.path, "--dry-run"], ["fit", "--run-id", "none", "--root", str(tmp_path)]):
        res = runner.invoke(app, [*argv, "--train-config", str(p)])
        assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
        assert "unknown SFT config keys ['lora_rank']" in res.output


def test_missing_pairs_is_refused_even_in_a_dry_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short relative path: the rich error box wraps long ones
    res = runner.invoke(app, ["submit", "--pairs", "nope", "--dry-run"])
    assert res.exit_code == 2 and "Invalid value for --pairs: nope does not exist" in res.output


@pytest.mark.parametrize("args,msg", [
    (["--num-processes", "3", "--num-machines", "2", "--scheduler", "slurm"],
     "error: --num-processes 3 does not split evenly over --num-machines 2"),
    (["--num-processes", "32", "--num-machines", "2", "--scheduler", "slurm"],
     "error: 16 processes per node but the job reserves --gpus-per-node 8"),
    # the config's own num_machines (multinode: 2) counts when no flag overrides it
    (["--config", "multinode"], "error: --scheduler local runs on this machine only; --num-machines 2"),
])
def test_topology_that_accelerate_cannot_split_is_refused(export, args, msg):
    res = runner.invoke(app, ["submit", "--pairs", export.path, "--dry-run", *args])
    assert res.exit_code == 2 and msg in res.output, res.output


def test_valid_multinode_slurm_dry_run_passes(export):
    res = runner.invoke(app, ["submit", "--pairs", export.path, "--dry-run", "--num-machines", "2",
                              "--scheduler", "slurm"])
    assert res.exit_code == 0 and "#SBATCH --nodes=2" in res.output
    assert "--num_processes 16 --num_machines 2" in res.output  # one process per GPU, 8 GPUs per node


# ------------------------------------------------------------------ Kubernetes: what the pod sees
# The job used to run this checkout's .venv python in this checkout's path inside the image, with
# relative local --pairs and no volume: nothing of it existed in the pod.
K8S = ["submit", "--config", "zero3", "--num-processes", "16", "--num-machines", "2", "--scheduler", "k8s",
       "--dry-run"]


def test_k8s_job_mounts_the_pvc_and_runs_the_image_python():
    res = runner.invoke(app, [*K8S, "--pvc", "sft-data", "--pairs", "/data/runs/sample/export",
                              "--output-dir", "/data/runs/sample/sft"])
    assert res.exit_code == 0, res.output
    service, config, job = yaml.safe_load_all(res.output)
    pod = job["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "accelerate-config", "configMap": {"name": "skillpipe-sft-accelerate"}},
                              {"name": "data", "persistentVolumeClaim": {"claimName": "sft-data"}}]
    (c,) = pod["containers"]
    assert (c["image"], c["workingDir"]) == ("skillpipe:latest", "/workspace")
    assert c["volumeMounts"] == [{"name": "accelerate-config", "mountPath": "/etc/skillpipe", "readOnly": True},
                                 {"name": "data", "mountPath": "/data"}]
    argv = shlex.split(c["command"][2])
    assert argv[:3] == ["python", "-m", "accelerate.commands.launch"]  # the image's python, not .venv
    args = _accelerate_args([a.replace("$JOB_COMPLETION_INDEX", "1") for a in argv])
    assert (args.config_file, args.num_processes, args.num_machines, args.machine_rank) == \
        ("/etc/skillpipe/accelerate.yaml", 16, 2, 1)
    train = parse_args(args.training_script_args)
    assert (train.pairs, train.output_dir) == ("/data/runs/sample/export", "/data/runs/sample/sft")
    # the config the pod reads is the one checked here
    assert yaml.safe_load(config["data"]["accelerate.yaml"])["deepspeed_config"]["zero_stage"] == 3


def test_k8s_options_for_python_workdir_and_mount(tmp_path):
    out = submit(Launch("ddp", ["--pairs", "/vol/e"], num_processes=8), "/vol/sft", scheduler="k8s",
                 pod=Pod(image="reg/sp:2", python="/opt/venv/bin/python", workdir="/app", pvc="c1", mount="/vol"),
                 job_file=str(tmp_path / "job.yaml"))
    assert out["path"] == str(tmp_path / "job.yaml") and not (tmp_path / "vol").exists()
    (c,) = list(yaml.safe_load_all(out["script"]))[2]["spec"]["template"]["spec"]["containers"]
    assert (c["image"], c["workingDir"], c["volumeMounts"][1]["mountPath"]) == ("reg/sp:2", "/app", "/vol")
    assert c["command"][2].startswith("/opt/venv/bin/python -m accelerate.commands.launch")


@pytest.mark.parametrize("args,msg", [
    (["--pairs", "/data/e"], "error: --scheduler k8s needs --pvc NAME"),
    (["--pvc", "c", "--pairs", "runs/sample/export", "--output", "/data/o"],
     "error: --pairs 'runs/sample/export' must be a path inside the pod, under the volume mount /data"),
    (["--pvc", "c", "--pairs", "/data/e"], "error: --output-dir 'runs/sft' must be a path inside the pod"),
    (["--pvc", "c", "--pairs", "/home/me/e", "--output", "/data/o"], "error: --pairs '/home/me/e' must be"),
    (["--pvc", "c", "--pairs", "/data/../etc/e", "--output", "/data/o"], "error: --pairs '/data/../etc/e' must be"),
    (["--pvc", "c", "--no-volume", "--pairs", "/data/e"], "error: --pvc and --no-volume exclude each other"),
])
def test_k8s_job_the_pod_cannot_use_is_refused(args, msg):
    res = runner.invoke(app, [*K8S, *args])
    assert res.exit_code == 2 and msg in res.output, res.output


def test_k8s_no_volume_means_data_in_the_image():
    res = runner.invoke(app, [*K8S, "--no-volume", "--pairs", "/workspace/runs/sample/export",
                              "--output", "/workspace/runs/sft"])
    assert res.exit_code == 0, res.output
    pod = list(yaml.safe_load_all(res.output))[2]["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["accelerate-config"]
    assert [m["name"] for m in pod["containers"][0]["volumeMounts"]] == ["accelerate-config"]


def test_submit_trains_with_the_run_configs_sft_section(export, tmp_path):
    """--run-config: the sft: section of the file `skillpipe run --config` and `sft fit --config`
    read, so a submitted job trains as the DAG's sft_fit does; options given here win, and a bad
    value is a usage error naming the option, the file and the key."""
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text("sft:\n  max_steps: 7\n  learning_rate: 3.0e-5\n")
    base = ["submit", "--pairs", export.path, "--output", str(tmp_path / "o"), "--run-config", str(run_yaml), "--dry-run"]
    for extra, steps in (([], 7), (["--max-steps", "5"], 5)):
        res = runner.invoke(app, [*base, *extra])
        assert res.exit_code == 0, res.output
        cfg = parse_args(_accelerate_args(shlex.split(res.output.strip().splitlines()[-1])).training_script_args)
        assert (cfg.max_steps, cfg.learning_rate) == (steps, 3.0e-5)
    run_yaml.write_text("sft:\n  max_steps: 0\n")
    res = runner.invoke(app, base, env={"COLUMNS": "400"})
    out = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2 and "Invalid value for --run-config: config" in out and "sft.max_steps: must be >= 1" in out

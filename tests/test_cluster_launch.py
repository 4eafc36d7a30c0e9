"""`autotrain launch`: the specs Slurm, Kubernetes, SkyPilot and each machine run, checked by the engines'
own parsers where they install from PyPI, and run for real on loopback (torchrun commands, and the sbatch
script under a fake `srun`)."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from test_cli import REPO_ROOT, STARTUP
from test_distributed import assert_trained_once, cli_env, free_port, write_config

CLUSTER = {
    "gpus_per_node": 8,
    "gpu_type": "H100",
    "image": "ghcr.io/example/autotrain:1",
    "volume_claim": "training",
    "partition": "gpu",
    "time_limit_minutes": 240,
    "stop_before_limit": 300,
}


def gpu_config(tmp_path: Path, **cluster) -> Path:
    dist = {"num_machines": 2, "main_process_ip": "10.0.0.1", "main_process_port": 29555}
    config = write_config(tmp_path, dist)
    data = yaml.safe_load(config.read_text())
    data["project_name"] = "runs/tiny"  # relative: on the Kubernetes volume
    data["cluster"] = {**CLUSTER, **cluster}
    config.write_text(yaml.safe_dump(data))
    return config


def rendered(cli, config: Path, target: str, *args) -> str:
    result = cli("launch", "--config", config, "--target", target, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def shell_ok(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# --- the specs, parsed ----------------------------------------------------------------------------------


def test_slurm_script(tmp_path, cli):
    script = rendered(cli, gpu_config(tmp_path), "slurm", "--nodes", "4")
    shell_ok(script)
    for line in (
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=h100:8",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=240",
        "#SBATCH --signal=TERM@300",
        "#SBATCH --requeue",
    ):
        assert line in script.splitlines(), line
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1' in script
    assert "srun --nodes=4 --ntasks-per-node=1" in script
    assert '"distributed.machine_rank=$SLURM_NODEID"' in script and "distributed.num_machines=4" in script
    assert "distributed.num_processes=8" in script  # one process per GPU
    # One task per machine runs its 8 processes: 4 cores each (Slurm's default is one for the whole task).
    assert "#SBATCH --cpus-per-task=32" in script.splitlines()
    assert "srun --nodes=4 --ntasks-per-node=1 --cpus-per-task=32" in script


@pytest.mark.parametrize(
    ("cluster", "dist", "workers", "cpus"),
    [
        ({"cpus_per_process": 10}, {}, 0, 80),  # the config's own count, per process
        ({}, {}, 2, 48),  # 4 + one per data-loading worker, per process
        ({"gpus_per_node": 0}, {"num_processes": 3}, 0, 12),  # a CPU run: the config's processes
    ],
)
def test_slurm_cpus_per_task_follow_the_processes(tmp_path, cli, cluster, dist, workers, cpus):
    config = gpu_config(tmp_path, **cluster)
    data = yaml.safe_load(config.read_text())
    data["distributed"].update(dist)
    data["training_args"]["dataloader_num_workers"] = workers
    config.write_text(yaml.safe_dump(data))
    script = rendered(cli, config, "slurm")
    assert f"#SBATCH --cpus-per-task={cpus}" in script.splitlines()
    assert f"--ntasks-per-node=1 --cpus-per-task={cpus} " in script


# A cluster's configuration as sbatch and srun read it before they ask the controller: enough for their option
# parsers, which print every option they took (`-v`) and then fail to reach a controller that is not there
# (at once: with the default timeouts they retry for 18 s).
SLURM_CONF = """ClusterName=check
SlurmctldHost=localhost
MessageTimeout=1
TCPTimeout=1
GresTypes=gpu
NodeName=node[1-4] CPUs=128 Gres=gpu:h100:8 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES
"""


def slurm_options(tool: list[str], conf: Path) -> dict[str, str]:
    """The options Slurm's own `tool` parsed, as it lists them under `-v`."""
    env = {**os.environ, "SLURM_CONF": str(conf)}
    done = subprocess.run([tool[0], "-v", *tool[1:]], env=env, capture_output=True, text=True, timeout=60)
    lines = done.stderr.splitlines()
    assert not any("nvalid" in line or "unrecognized" in line for line in lines), done.stderr
    assert "Unable to contact slurm controller" in done.stderr, done.stderr  # parsed; only the controller is missing
    listed = lines[
        lines.index(f"{tool[0]}: defined options") + 2 : lines.index(f"{tool[0]}: end of defined options") - 1
    ]
    return {k.split(": ", 1)[1].strip(): v.strip() for k, v in (line.rsplit(" : ", 1) for line in listed)}


def test_slurm_reads_the_script_as_written(tmp_path, cli):
    """sbatch's and srun's own parsers (Debian's slurm-client) take every option of the script and its srun line."""
    if not (shutil.which("sbatch") and shutil.which("srun")):
        pytest.skip("Slurm's parsers not checked: no sbatch/srun here (apt-get install slurm-client)")
    conf = tmp_path / "slurm.conf"
    conf.write_text(SLURM_CONF)
    script = tmp_path / "job.sbatch"
    script.write_text(rendered(cli, gpu_config(tmp_path), "slurm", "--nodes", "4"))
    batch = slurm_options(["sbatch", "--test-only", str(script)], conf)
    assert batch["cpus-per-task"] == "32" and batch["nodes"] == "4" and batch["ntasks-per-node"] == "1", batch
    assert batch["gpus-per-node"] == "h100:8", batch
    assert batch["partition"] == "gpu" and batch["time"] == "04:00:00" and batch["signal"] == "TERM@300", batch
    srun_line = next(line for line in script.read_text().splitlines() if line.startswith("srun "))
    words = shlex.split(srun_line)
    step = slurm_options([*words[: words.index("bash")], "true"], conf)
    assert step["cpus-per-task"] == "32" and step["nodes"] == "4" and step["kill-on-bad-exit"] == "1", step


def k8s_objects(text: str):
    from kubernetes import client

    api = client.ApiClient()

    def parse(obj, kind: str):  # what the client does with an API server's JSON answer
        text = json.dumps(obj)
        if "content_type" in inspect.signature(api.deserialize).parameters:  # kubernetes 37 on
            return api.deserialize(text, kind, "application/json")
        return api.deserialize(SimpleNamespace(data=text), kind)  # before: the response object

    documents = list(yaml.safe_load_all(text))
    return documents, parse(documents[0], "V1ConfigMap"), parse


def test_kubernetes_pytorchjob(tmp_path, cli):
    pytest.importorskip("kubernetes", reason="needs the kubernetes client (pip install -e '.[cluster]')")
    config = gpu_config(tmp_path)
    text = rendered(cli, config, "kubernetes", "--nodes", "3")
    documents, config_map, parse = k8s_objects(text)
    job = documents[1]
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 2
    # The config travels in the ConfigMap, unchanged and valid.
    copy = tmp_path / "from-configmap.yml"
    copy.write_text(config_map.data[config.name])
    assert cli("validate", copy).exit_code == 0
    for role in ("Master", "Worker"):
        pod = parse(replicas[role]["template"], "V1PodTemplateSpec")
        container = pod.spec.containers[0]
        assert container.name == "pytorch" and container.image == CLUSTER["image"]
        assert container.resources.limits == {"nvidia.com/gpu": "8"}
        assert container.ports[0].name == "pytorchjob-port" and container.ports[0].container_port == 29555
        volumes = {v.name: v for v in pod.spec.volumes}
        assert volumes["workspace"].persistent_volume_claim.claim_name == "training"
        assert volumes["config"].config_map.name == config_map.metadata.name
        assert container.working_dir == "/workspace"
        script = container.command[2]
        shell_ok(script)
        assert (
            '"distributed.main_process_ip=$MASTER_ADDR"' in script and '"distributed.machine_rank=$NODE_RANK"' in script
        )
        assert f"--config /etc/autotrain/{config.name}" in script


def test_kubernetes_parser_rejects_a_broken_pod(tmp_path, cli):
    """The model check is not vacuous: a container without its required name is refused."""
    pytest.importorskip("kubernetes", reason="needs the kubernetes client (pip install -e '.[cluster]')")
    text = rendered(cli, gpu_config(tmp_path), "kubernetes")
    documents, _, parse = k8s_objects(text)
    template = documents[1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    del template["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError, match="name"):
        parse(template, "V1PodTemplateSpec")


SKY_SCRIPT = """
import sys, sky
task = sky.Task.from_yaml(sys.argv[1])
resources = list(task.resources)[0]
print(task.num_nodes, resources.accelerators, sorted(task.file_mounts or {}))
"""


def test_skypilot_task(tmp_path, cli):
    # SkyPilot pins click < 8.2 and an older uvicorn, so it is not in the test extra; point
    # AUTOTRAIN_SKYPILOT_PYTHON at the python of a separate venv that has it.
    python = os.environ.get("AUTOTRAIN_SKYPILOT_PYTHON") or (
        sys.executable if importlib.util.find_spec("sky") else None
    )
    text = rendered(cli, gpu_config(tmp_path), "skypilot", "--nodes", "2")
    task = yaml.safe_load(text)
    assert task["num_nodes"] == 2 and task["resources"]["accelerators"] == "H100:8"
    shell_ok(task["run"])
    assert '"distributed.machine_rank=$SKYPILOT_NODE_RANK"' in task["run"] and "SKYPILOT_NODE_IPS" in task["run"]
    if python is None:
        pytest.skip("SkyPilot's own loader not checked: no skypilot here (set AUTOTRAIN_SKYPILOT_PYTHON)")
    path = tmp_path / "task.yaml"
    path.write_text(text)
    done = subprocess.run([python, "-c", SKY_SCRIPT, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[:2] == ["2", "{'H100':"] and "/tmp/autotrain/config.yml" in done.stdout, done.stdout


def test_launch_help_and_render_do_not_import_torch(tmp_path):
    config = gpu_config(tmp_path)
    for args in (["launch", "--help"], ["launch", "--config", str(config), "--target", "kubernetes"]):
        done = subprocess.run(
            [sys.executable, "-c", STARTUP, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
        )
        result = json.loads(done.stdout.rsplit("\nRESULT ", 1)[1])
        assert result["code"] in (0, None), done.stdout + done.stderr
        assert result["heavy"] == [], f"`autotrain {' '.join(args)}` imported {result['heavy']}"


# --- refusals: one line, exit 2 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, cluster, args, message",
    [
        ("kubernetes", {"image": None}, [], "kubernetes: `cluster.image` is needed"),
        ("kubernetes", {"volume_claim": None}, [], "kubernetes: `cluster.volume_claim` is needed"),
        ("skypilot", {"gpu_type": None}, [], "skypilot: `cluster.gpu_type` is needed"),
        ("slurm", {}, ["--set", "distributed.num_machines=1"], "slurm: how many machines?"),
        (
            "torchrun",
            {},
            ["--set", "distributed.num_machines=1", "--set", "distributed.main_process_ip=null"],
            "torchrun: `distributed.main_process_ip` is needed",
        ),
        ("slurm", {}, ["--set", "hub.token=hf_secret"], "a launch spec is a file others read"),
        ("mesos", {}, [], "--target mesos: choose one of slurm, kubernetes, skypilot, torchrun"),
        ("slurm", {}, ["--set", "distributed.machine_rank=2"], "must be below `distributed.num_machines` (2)"),
    ],
    ids=[
        "k8s-no-image",
        "k8s-no-volume",
        "sky-no-gpu-type",
        "slurm-no-nodes",
        "torchrun-no-address",
        "secret",
        "unknown-target",
        "machine-rank",
    ],
)
def test_a_target_without_what_it_needs_is_one_line(tmp_path, cli, target, cluster, args, message):
    result = cli("launch", "--config", gpu_config(tmp_path, **cluster), "--target", target, *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr, result.stderr
    assert "hf_secret" not in result.output and "Traceback" not in result.output
    assert result.stdout == ""


def test_output_file_is_not_overwritten_without_force(tmp_path, cli):
    config, out = gpu_config(tmp_path), tmp_path / "job.sbatch"
    out.write_text("mine\n")
    assert cli("launch", "--config", config, "--target", "slurm", "-o", out).exit_code == 2
    assert out.read_text() == "mine\n"
    assert cli("launch", "--config", config, "--target", "slurm", "-o", out, "--force").exit_code == 0
    assert out.read_text().startswith("#!/bin/bash") and os.access(out, os.X_OK)


# --- the Slurm script's requeue logic, under fake srun / scontrol (no training) ----------------------------

FAKE_SCONTROL = """#!/bin/bash
echo "$*" >> "$FAKE_LOG"
if [ "$1 $2" = "show hostnames" ]; then echo 127.0.0.1; echo 127.0.0.2; fi
"""


def fake_bin(folder: Path, srun: str) -> dict[str, str]:
    folder.mkdir(exist_ok=True)
    for name, text in {"srun": srun, "scontrol": FAKE_SCONTROL}.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    # `autotrain` on the nodes: this checkout's CLI with this interpreter
    (folder / "autotrain").write_text(f'#!/bin/bash\nexec {shlex.quote(sys.executable)} -m autotrain.cli.main "$@"\n')
    (folder / "autotrain").chmod(0o755)
    env = cli_env()
    env.update(PATH=f"{folder}:{env['PATH']}", FAKE_LOG=str(folder / "log"), SLURM_JOB_ID="4242")
    env.update(SLURM_JOB_NODELIST="node[1-2]", SLURM_JOB_NUM_NODES="2", PYTHONPATH=str(REPO_ROOT))
    return env


def cpu_slurm_script(tmp_path: Path, cli, **dist) -> Path:
    # A generous check-in window: four processes load the training stack at once on two cores.
    config = write_config(tmp_path, {"num_processes": 1, "rendezvous_timeout": 120, **dist})
    data = yaml.safe_load(config.read_text())
    data["cluster"] = {"gpus_per_node": 0}
    config.write_text(yaml.safe_dump(data))
    script = tmp_path / "job.sbatch"
    assert cli("launch", "--config", config, "--target", "slurm", "--nodes", "2", "-o", script).exit_code == 0
    return script


def test_a_job_stopped_before_the_limit_is_requeued_and_resumes(tmp_path, cli):
    script = cpu_slurm_script(tmp_path, cli, main_process_port=free_port())
    srun = '#!/bin/bash\necho "RESUME=[$RESUME] IP=$MAIN_PROCESS_IP" >> "$FAKE_LOG"\nexit 143\n'
    env = fake_bin(tmp_path / "bin", srun)
    first = subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert first.returncode == 143
    log = (tmp_path / "bin" / "log").read_text().splitlines()
    assert "RESUME=[] IP=127.0.0.1" in log and "requeue 4242" in log
    # The requeued job finds the complete checkpoint the stopped run left and resumes from it.
    (tmp_path / "run" / "checkpoint-1").mkdir(parents=True)
    (tmp_path / "run" / "checkpoint-1" / ".autotrain-complete").write_text("")
    subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert "RESUME=[--resume] IP=127.0.0.1" in (tmp_path / "bin" / "log").read_text().splitlines()


# --- real runs on loopback --------------------------------------------------------------------------------

# srun as Slurm runs it for `--ntasks-per-node=1`: the command once per node, SLURM_NODEID set, all at once.
FAKE_SRUN = """#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((node = 0; node < SLURM_JOB_NUM_NODES; node++)); do
  SLURM_NODEID=$node SLURM_PROCID=$node "$@" > "$FAKE_LOG.node$node" 2>&1 &
  pids+=($!)
done
code=0
for pid in "${pids[@]}"; do wait "$pid" || code=$?; done
exit $code
"""


@pytest.mark.slow
def test_the_slurm_script_trains_under_a_fake_srun(tmp_path, cli):
    script = cpu_slurm_script(tmp_path, cli, main_process_port=free_port())
    env = fake_bin(tmp_path / "bin", FAKE_SRUN)
    done = subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    logs = {p.name: p.read_text() for p in sorted((tmp_path / "bin").glob("log.node*"))}
    shown = "\n".join(f"--- {name}\n{text}" for name, text in logs.items())  # whole, not a dict's cut repr
    assert done.returncode == 0, shown
    assert "rendezvous: all 2 machines checked in" in logs["log.node0"], shown
    assert "this is machine 1" in logs["log.node1"], shown
    assert "requeue" not in (tmp_path / "bin" / "log").read_text()
    assert_trained_once(tmp_path / "run")


@pytest.mark.slow
def test_the_torchrun_commands_train_on_loopback(tmp_path, cli):
    port = free_port()
    dist = {"num_processes": 1, "num_machines": 2, "main_process_ip": "127.0.0.1", "main_process_port": port}
    config = write_config(tmp_path, dist)
    text = rendered(cli, config, "torchrun")
    commands = [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2 and all(c[:2] == ["autotrain", "llm"] for c in commands)
    machines = [
        subprocess.Popen(
            [sys.executable, "-m", "autotrain.cli.main", *c[1:]],
            cwd=tmp_path,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for c in commands
    ]
    results = [(p.wait(timeout=900), p.communicate()[1]) for p in machines]
    assert [code for code, _ in results] == [0, 0], [err for _, err in results]
    assert_trained_once(tmp_path / "run")


def test_num_processes_auto_validates_and_bounds_are_one_line(tmp_path, cli):
    # `auto` crashed validation (a TypeError, exit 1): the bounds applied to the string too.
    config = gpu_config(tmp_path)
    assert cli("validate", config, "--set", "distributed.num_processes=auto").exit_code == 0
    result = cli("validate", config, "--set", "distributed.num_processes=0")
    assert result.exit_code == 2 and "distributed.num_processes: must be from 1 to 1024, or `auto`" in result.stderr


def test_ray_backend_without_ray_is_one_line(tmp_path, cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    config = write_config(tmp_path, {"num_processes": 2, "backend": "ray"})
    result = cli("llm", "--config", config)
    assert result.exit_code == 2, result.output
    assert "distributed.backend: ray needs Ray Train: pip install 'autotrain[ray]'" in result.stderr
    assert not (tmp_path / "run").exists(), "a refused run leaves no project folder"

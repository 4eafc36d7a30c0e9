"""The four launch specs `autotrain launch` writes, and what they share: the `Spec` (node count, overrides,
the config path on the nodes), one machine's command line, and the YAML and shell quoting."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from autotrain.config.load import LoadedConfig

# The completion marker of a checkpoint (training/folder.py): a requeued or restarted job resumes only
# from a checkpoint that was fully written.
COMPLETE = ".autotrain-complete"
K8S_CONFIG_DIR = "/etc/autotrain"
K8S_WORKDIR = "/workspace"
CPUS_PER_PROCESS = 4  # cores a training process gets besides its data-loading workers (one each)


@dataclass(frozen=True)
class Spec:
    """What `render` needs besides the config: the node count, overrides and the config path on the nodes."""

    loaded: LoadedConfig
    nodes: int
    sets: tuple[str, ...]
    config_path: str  # as the machines see it

    @property
    def cfg(self):
        return self.loaded.config

    def processes(self) -> str | None:
        """One process per GPU when the machines have GPUs; else the config's own count (CPU runs)."""
        gpus = self.cfg.cluster.gpus_per_node
        return str(gpus) if gpus else None

    def cpus_per_machine(self) -> int:
        """CPU cores for one machine's processes: `cluster.cpus_per_process` (by default the rank itself, its
        CUDA / NCCL threads and the tokenizer: 4, and one per data-loading worker) times the processes."""
        per_process = (
            self.cfg.cluster.cpus_per_process or CPUS_PER_PROCESS + self.cfg.training_args.dataloader_num_workers
        )
        own = self.cfg.distributed.num_processes
        return per_process * int(self.processes() or (own if isinstance(own, int) else 1))

    def node_command(
        self, rank: str, address: str, port: str | None = None, resume: str = "", extra: Sequence[str] = ()
    ) -> str:
        """`autotrain TASK --config F --set ...` for one machine; `rank`, `address` and `port` may be shell
        expressions (`$SLURM_NODEID`), which are left for the shell to expand inside double quotes."""
        words = [_dq("autotrain"), _dq(self.cfg.task), "--config", _dq(self.config_path)]
        for item in self.sets:
            words += ["--set", _dq(item)]
        sets = [f"distributed.num_machines={self.nodes}"]
        if self.processes():
            sets.append(f"distributed.num_processes={self.processes()}")
        sets += [*extra, f"distributed.machine_rank={rank}", f"distributed.main_process_ip={address}"]
        sets.append(f"distributed.main_process_port={port or self.cfg.distributed.main_process_port}")
        for item in sets:
            words += ["--set", f'"{item}"' if "$" in item else _dq(item)]
        return " ".join(words) + (f" {resume}" if resume else "")

    def resume_test(self, variable: str = "RESUME", folder: str | None = None) -> str:
        """Shell that sets $RESUME to `--resume` when the project folder holds a complete checkpoint."""
        project = _dq(folder or self.cfg.project_name)
        return f'{variable}=""\nif ls {project}/checkpoint-*/{COMPLETE} >/dev/null 2>&1; then {variable}="--resume"; fi'


def _dq(text: str) -> str:
    """Double-quoted for the shell when needed (so it can sit inside a single-quoted `bash -c` string)."""
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", text):
        return text
    return '"' + re.sub(r'([\\"$`])', r"\\\1", text) + '"'


def job_name(cfg) -> str:
    """A DNS-1123 label from the project folder's name (Kubernetes objects, Slurm and SkyPilot job names)."""
    base = re.sub(r"[^a-z0-9-]+", "-", Path(cfg.project_name).name.lower()).strip("-")
    return (base or "autotrain")[:40].rstrip("-") or "autotrain"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (scripts, the config file) as `|` blocks, readable as they will run."""


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(*documents: dict) -> str:
    return "---\n".join(yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=1000) for d in documents)


def quoted(command: str) -> str:
    return shlex.quote(command)


def cwd() -> str:
    return os.getcwd()


# --- Slurm --------------------------------------------------------------------------------------------


def slurm(spec: Spec) -> str:
    """An sbatch script: one `autotrain` per machine through srun, requeued after a stop before the limit.

    `--signal=TERM@S` goes to the job steps (every machine's autotrain, which passes it to its ranks), so
    the run saves a checkpoint and exits 143 before the time limit; the script then requeues the job, and
    the next start finds the complete checkpoint and adds `--resume`.
    """
    cfg, cluster = spec.cfg, spec.cfg.cluster
    head = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name(cfg)}",
        f"#SBATCH --nodes={spec.nodes}",
        "#SBATCH --ntasks-per-node=1",
        # the one task runs every process of its machine: Slurm's default is one core for all of them
        f"#SBATCH --cpus-per-task={spec.cpus_per_machine()}",
    ]
    if cluster.gpus_per_node:
        kind = f"{cluster.gpu_type.lower()}:" if cluster.gpu_type else ""
        head.append(f"#SBATCH --gpus-per-node={kind}{cluster.gpus_per_node}")
    if cluster.partition:
        head.append(f"#SBATCH --partition={cluster.partition}")
    if cluster.account:
        head.append(f"#SBATCH --account={cluster.account}")
    if cluster.time_limit_minutes:
        head.append(f"#SBATCH --time={cluster.time_limit_minutes}")
        head.append(f"#SBATCH --signal=TERM@{cluster.stop_before_limit}")
    head += ["#SBATCH --requeue", "#SBATCH --open-mode=append", f"#SBATCH --chdir={cwd()}"]
    command = spec.node_command("$SLURM_NODEID", "$MAIN_PROCESS_IP", resume="$RESUME")
    body = [
        "",
        "# Machine 0 is the first host of the allocation; every machine checks in with it before training.",
        'MAIN_PROCESS_IP=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "# A requeued job continues from the last complete checkpoint.",
        spec.resume_test(),
        "export MAIN_PROCESS_IP RESUME",
        "",
        # srun is given the cores again: Slurm 22.05 stopped passing sbatch's --cpus-per-task on to it
        f"srun --nodes={spec.nodes} --ntasks-per-node=1 --cpus-per-task={spec.cpus_per_machine()} "
        f"--kill-on-bad-exit=1 bash -c {quoted('exec ' + command)}",
        "code=$?",
        "# 143: stopped by the signal before the time limit, with a checkpoint saved: queue the rest of the run.",
        'if [ "$code" -eq 143 ]; then scontrol requeue "$SLURM_JOB_ID"; fi',
        'exit "$code"',
        "",
    ]
    return "\n".join(head + body)


# --- Kubernetes -----------------------------------------------------------------------------------------

K8S_RENDEZVOUS_TIMEOUT = 600


def kubernetes(spec: Spec) -> str:
    """A ConfigMap with the config file and a Kubeflow PyTorchJob (kubeflow.org/v1, the training operator):
    one Master and nodes-1 Workers, each pod running autotrain, which starts one process per GPU."""
    cfg = spec.cfg
    name = job_name(cfg)
    namespace = cfg.cluster.namespace
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config", "namespace": namespace},
        "data": {Path(spec.config_path).name: Path(spec.loaded.source).read_text(encoding="utf-8")},
    }
    replicas = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": pod_template(spec, name)}}
    if spec.nodes > 1:
        worker = {"replicas": spec.nodes - 1, "restartPolicy": "OnFailure", "template": pod_template(spec, name)}
        replicas["Worker"] = worker
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runPolicy": {"backoffLimit": 3, "cleanPodPolicy": "None"}, "pytorchReplicaSpecs": replicas},
    }
    return dump_yaml(config_map, job)


def pod_template(spec: Spec, name: str) -> dict:
    cluster = spec.cfg.cluster
    # The operator sets RANK (this pod's replica index: 0 for the Master) and MASTER_ADDR / MASTER_PORT
    # (the Master's service). RANK and WORLD_SIZE are cleared before autotrain starts: the elastic agent
    # sets them per process.
    # Pods start minutes apart (scheduling, image pulls): wait longer for the others than on Slurm.
    wait = max(spec.cfg.distributed.rendezvous_timeout, K8S_RENDEZVOUS_TIMEOUT)
    extra = [f"distributed.rendezvous_timeout={wait}"]
    command = spec.node_command("$NODE_RANK", "$MASTER_ADDR", "$MASTER_PORT", resume="$RESUME", extra=extra)
    script = "\n".join(['NODE_RANK="$RANK"', spec.resume_test(), f"exec env -u RANK -u WORLD_SIZE {command}"])
    container = {
        "name": "pytorch",  # the container the training operator configures
        "image": cluster.image,
        "command": ["bash", "-c", script],
        "workingDir": K8S_WORKDIR,
        "ports": [{"name": "pytorchjob-port", "containerPort": spec.cfg.distributed.main_process_port}],
        "volumeMounts": [
            {"name": "workspace", "mountPath": K8S_WORKDIR},
            {"name": "config", "mountPath": K8S_CONFIG_DIR, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    if cluster.gpus_per_node:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(cluster.gpus_per_node)}}  # a quantity
    return {
        "spec": {
            # SIGTERM (eviction, deletion) reaches autotrain as PID 1: it saves a checkpoint in this time.
            "terminationGracePeriodSeconds": cluster.stop_before_limit,
            "securityContext": {"fsGroup": 1000},  # the image runs as uid 1000: the volume must be writable
            "containers": [container],
            "volumes": [
                {"name": "workspace", "persistentVolumeClaim": {"claimName": cluster.volume_claim}},
                {"name": "config", "configMap": {"name": f"{name}-config"}},
                {"name": "dshm", "emptyDir": {"medium": "Memory"}},  # what `docker run --ipc=host` gives
            ],
        }
    }


# --- SkyPilot ---------------------------------------------------------------------------------------------


def skypilot(spec: Spec) -> str:
    """A SkyPilot task: `num_nodes` machines, the config mounted on each, autotrain started on every node
    with SKYPILOT_NODE_RANK and the first of SKYPILOT_NODE_IPS as machine 0."""
    cfg, cluster = spec.cfg, spec.cfg.cluster
    command = spec.node_command("$SKYPILOT_NODE_RANK", "$MAIN_PROCESS_IP", resume="$RESUME")
    resources: dict = {}
    if cluster.gpus_per_node:
        resources["accelerators"] = f"{cluster.gpu_type}:{cluster.gpus_per_node}"
    if cluster.image:
        resources["image_id"] = f"docker:{cluster.image}"
    task: dict = {"name": job_name(cfg), "num_nodes": spec.nodes}
    if resources:
        task["resources"] = resources
    task["workdir"] = "."
    task["file_mounts"] = {spec.config_path: str(Path(spec.loaded.source).resolve())}
    setup = cluster.setup or ("" if cluster.image else "pip install -e .")
    if setup:
        task["setup"] = setup
    run = [
        'MAIN_PROCESS_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
        spec.resume_test(),
        command,
    ]
    task["run"] = "\n".join(run) + "\n"
    header = (
        "# SkyPilot task: sky launch -c NAME THIS_FILE (from the folder that `workdir: .` should upload).\n"
        "# The project folder must be shared by the nodes (a bucket mounted with `file_mounts`, or a shared\n"
        "# file system): machine 0 writes the checkpoints that every node resumes from.\n"
    )
    return header + dump_yaml(task)


# --- torchrun-style: one command per machine -----------------------------------------------------------


def torchrun(spec: Spec) -> str:
    dist = spec.cfg.distributed
    lines = [
        f"# {spec.nodes} machines; machine 0 ({dist.main_process_ip}) serves the rendezvous on port "
        f"{dist.main_process_port}.",
        "# Run one line on each machine. autotrain starts torch's elastic agent (the launcher torchrun is) with",
        "# one process per GPU there, after every machine has checked in (distributed.rendezvous_timeout).",
    ]
    for rank in range(spec.nodes):
        lines += [f"# machine {rank}", spec.node_command(str(rank), str(dist.main_process_ip))]
    return "\n".join(lines) + "\n"

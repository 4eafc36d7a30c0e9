"""`autotrain launch`: what Slurm, Kubernetes, SkyPilot or a shell runs on each machine, from one config.

Every target starts the same thing on each machine: `autotrain TASK --config F` with the machine's rank,
machine 0's address and the node count set on the command line. That process checks in with the others
(run/rendezvous.py), then starts torch's elastic agent through accelerate (the launcher torchrun is) with
one process per GPU, so the strategy flags, the check-in and the exit codes are the same under every
scheduler. What differs is only where the rank and the address come from:

  slurm       $SLURM_NODEID; the first host of the allocation (scontrol show hostnames)
  kubernetes  the PyTorchJob's $RANK (replica index) and $MASTER_ADDR / $MASTER_PORT (the master service)
  skypilot    $SKYPILOT_NODE_RANK; the first line of $SKYPILOT_NODE_IPS
  torchrun    written out, one command per machine

No torch here: rendering a spec is as light as `validate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autotrain.config.load import LoadedConfig
from autotrain.errors import UserInputError
from autotrain.run import cluster_specs
from autotrain.run.cluster_specs import K8S_CONFIG_DIR, K8S_WORKDIR, Spec

TARGETS = ("slurm", "kubernetes", "skypilot", "torchrun")
SKY_CONFIG_DIR = "/tmp/autotrain"  # where the SkyPilot task mounts the config file on each node


def make_spec(loaded: LoadedConfig, target: str, nodes: int | None, sets: Sequence[str]) -> Spec:
    """Check what `target` needs (one line, exit 2, for what is missing) and settle the node count."""
    from autotrain.config.interpolate import SECRET_KEYS

    for item in sets:
        if item.partition("=")[0].rsplit(".", 1)[-1].lower() in SECRET_KEYS:
            raise UserInputError(
                f"--set {item.partition('=')[0]}: a launch spec is a file others read; give secrets through the "
                "environment (`${HF_TOKEN}` in the config) instead"
            )
    cfg = loaded.config
    count = nodes or cfg.cluster.nodes or cfg.distributed.num_machines
    if target == "slurm" and not (nodes or cfg.cluster.nodes or cfg.distributed.num_machines > 1):
        raise UserInputError("slurm: how many machines? give --nodes N or `cluster.nodes` (1 for a single machine)")
    _check_target(loaded, target)
    path = Path(loaded.source)
    mounted = {"kubernetes": K8S_CONFIG_DIR, "skypilot": SKY_CONFIG_DIR}.get(target)
    where = f"{mounted}/{path.name}" if mounted else str(path.resolve())
    return Spec(loaded, count, tuple(sets), where)


def _check_target(loaded: LoadedConfig, target: str) -> None:
    cluster, dist = loaded.config.cluster, loaded.config.distributed
    if target == "kubernetes":
        if not cluster.image:
            raise UserInputError(
                "kubernetes: `cluster.image` is needed (an image with autotrain installed: "
                "docker build -t REGISTRY/autotrain . && docker push REGISTRY/autotrain)"
            )
        if not cluster.volume_claim:
            raise UserInputError(
                "kubernetes: `cluster.volume_claim` is needed (a PersistentVolumeClaim mounted at /workspace, "
                "where the data and the project folder live so checkpoints outlive the pods)"
            )
        project = Path(loaded.config.project_name)
        if project.is_absolute() and not project.is_relative_to(K8S_WORKDIR):
            raise UserInputError(
                f"kubernetes: project_name `{project}` is outside {K8S_WORKDIR}, the volume; give a relative "
                "project_name so the checkpoints outlive the pods"
            )
        _no_secret_in_file(loaded)
    if target == "skypilot" and cluster.gpus_per_node and not cluster.gpu_type:
        raise UserInputError("skypilot: `cluster.gpu_type` is needed to ask for GPUs (e.g. `A100`, `H100`, `L4`)")
    if target == "torchrun" and not dist.main_process_ip:
        raise UserInputError("torchrun: `distributed.main_process_ip` is needed (the address of machine 0)")


def _no_secret_in_file(loaded: LoadedConfig) -> None:
    text = Path(loaded.source).read_text(encoding="utf-8")
    if any(secret and secret in text for secret in loaded.secrets):
        raise UserInputError(
            f"{loaded.source} holds a secret in clear; the kubernetes spec copies the file into a ConfigMap. "
            "Write `${HF_TOKEN}` in the config and give the pods the variable instead"
        )


def render(loaded: LoadedConfig, target: str, nodes: int | None = None, sets: Sequence[str] = ()) -> str:
    spec = make_spec(loaded, target, nodes, sets)
    return {
        "slurm": cluster_specs.slurm,
        "kubernetes": cluster_specs.kubernetes,
        "skypilot": cluster_specs.skypilot,
        "torchrun": cluster_specs.torchrun,
    }[target](spec)

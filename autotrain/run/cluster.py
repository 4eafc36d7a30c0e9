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

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from autotrain.config.load import LoadedConfig
from autotrain.errors import UserInputError

TARGETS = ("slurm", "kubernetes", "skypilot", "torchrun")
# The completion marker of a checkpoint (training/folder.py): a requeued or restarted job resumes only
# from a checkpoint that was fully written.
COMPLETE = ".autotrain-complete"
K8S_CONFIG_DIR = "/etc/autotrain"
K8S_WORKDIR = "/workspace"
SKY_CONFIG_DIR = "/tmp/autotrain"  # where the SkyPilot task mounts the config file on each node


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
    from autotrain.run import cluster_specs

    spec = make_spec(loaded, target, nodes, sets)
    return {
        "slurm": cluster_specs.slurm,
        "kubernetes": cluster_specs.kubernetes,
        "skypilot": cluster_specs.skypilot,
        "torchrun": cluster_specs.torchrun,
    }[target](spec)


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

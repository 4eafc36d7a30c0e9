"""The four launch specs `autotrain launch` writes (see run/cluster.py for what they share)."""

from __future__ import annotations

from pathlib import Path

from autotrain.run.cluster import K8S_CONFIG_DIR, K8S_WORKDIR, Spec, cwd, dump_yaml, job_name, quoted

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
        f"srun --nodes={spec.nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c {quoted('exec ' + command)}",
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

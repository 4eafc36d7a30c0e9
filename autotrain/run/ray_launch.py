"""`distributed.backend: ray`: the same training in Ray Train workers (ray.train.torch.TorchTrainer).

The parent `autotrain` process (the Ray driver) claims the project folder as for any run, starts a local
Ray for the run or joins `distributed.ray_address`, and starts `num_processes x num_machines` workers.
Ray forms the torch process group (gloo on CPUs, NCCL on GPUs) and sets RANK / WORLD_SIZE / LOCAL_RANK in
each worker, so each worker runs the very path an accelerate rank runs (run/rank.py): the same plan, the
same Trainer, checkpoints written by the Trainer into the project folder, `--resume` from the newest
complete one. Ray keeps only its own run records, in `project_name/logs/ray`.

Signals cannot reach a Ray worker's training thread, so a SIGTERM / SIGINT to the driver becomes a stop
file in the project folder that every worker looks for at each step end (training/signals.py): all of
them finish the step, write one checkpoint and return 143 / 130, as under accelerate.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from autotrain.config.load import LoadedConfig
from autotrain.errors import EXIT_FAILURE, EXIT_SIGINT, EXIT_SIGTERM, UserInputError, eprint
from autotrain.run.process import BATCH_ENV

STOP_FILE = ".autotrain-stop"
EXIT_CODES = {signal.SIGINT: EXIT_SIGINT, signal.SIGTERM: EXIT_SIGTERM}


def run_on_ray(loaded: LoadedConfig, plan, resume: str | None = None, argv_sets=()) -> int:
    """Train in `plan.world_size` Ray Train workers; returns the run's exit code (rank 0's)."""
    try:
        import ray
        from ray.train.torch import TorchTrainer  # noqa: F401
    except ImportError:
        from autotrain.hints import install_hint

        raise UserInputError(f"distributed.backend: ray needs Ray Train: {install_hint(extra='ray')}") from None
    cfg = loaded.config
    folder = Path(cfg.project_name).resolve()
    stop_file = folder / STOP_FILE
    stop_file.unlink(missing_ok=True)
    started_here = _start_ray(ray, cfg.distributed.ray_address, plan.world_size)
    try:
        trainer = _trainer(loaded, plan, resume, list(argv_sets), folder, stop_file)
        previous = {s: signal.signal(s, _stop_handler(stop_file)) for s in EXIT_CODES}
        try:
            result = trainer.fit()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    finally:
        stop_file.unlink(missing_ok=True)
        if started_here:
            ray.shutdown()
    metrics = result.metrics or {}
    return int(metrics.get("exit_code", EXIT_FAILURE))


def _start_ray(ray, address: str | None, workers: int) -> bool:
    """Join the cluster at `address`, or start a local Ray with room for every worker; True if started."""
    import logging

    if ray.is_initialized():
        return False
    # Ray Train turns the workers' print() into log records by default: the progress lines and even
    # libraries' captured output (dill's disassembly, which datasets triggers) would then flood the driver.
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    if address:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
        return False
    cpus = max(workers, os.cpu_count() or 1)  # one logical CPU per worker, even on a small machine
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING)
    eprint(f"started a local Ray for this run ({cpus} CPUs)")
    return True


def _trainer(loaded: LoadedConfig, plan, resume, argv_sets, folder: Path, stop_file: Path):
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    use_gpu = ray.cluster_resources().get("GPU", 0) >= 1
    per_worker = {"CPU": 1, "GPU": 1} if use_gpu else {"CPU": 1}
    payload = worker_payload(loaded, argv_sets, resume, stop_file)
    eprint(f"launching {plan.world_size} Ray Train workers ({'GPU' if use_gpu else 'CPU'}, DDP)")
    return TorchTrainer(
        _worker,
        train_loop_config=payload,
        scaling_config=ScalingConfig(num_workers=plan.world_size, use_gpu=use_gpu, resources_per_worker=per_worker),
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        run_config=RunConfig(
            name="train",
            storage_path=str(folder / "logs" / "ray"),
            failure_config=FailureConfig(max_failures=0),
        ),
    )


def _stop_handler(stop_file: Path):
    def handle(signum, frame) -> None:
        name = signal.Signals(signum).name
        if stop_file.exists():
            eprint(f"\n{name} again: exiting now without saving")
            os._exit(EXIT_CODES[signum])
        stop_file.write_text(str(int(signum)), encoding="ascii")
        eprint(f"\n{name}: the Ray workers finish this step and save a checkpoint (send it again to exit at once)")

    return handle


def worker_payload(loaded: LoadedConfig, argv_sets: list[str], resume: str | None, stop_file: Path) -> dict:
    """What each Ray worker is given to load the run's config as the driver did (``worker_config``)."""
    from autotrain.training.lifetime import identity, to_env

    return {
        "source": os.path.abspath(loaded.source),
        "task": loaded.config.task,  # the command's, where the config leaves `task:` out
        "sets": argv_sets,
        "resume": resume,
        "cwd": os.getcwd(),  # relative paths in the config mean the same in every worker (shared or local disk)
        "stop_file": str(stop_file),
        "parent": to_env(identity()),  # the driver: run.json names it as the run's process
        "batch": os.environ.get(BATCH_ENV),  # `batch_size: auto` as the driver decided it (run/fit.py)
    }


def worker_config(payload: dict[str, Any]) -> LoadedConfig:
    """The run's config, loaded in a worker from ``worker_payload``'s payload (in the payload's ``cwd``)."""
    from autotrain.config.load import load_config

    return load_config(payload["source"], payload["sets"], expected_task=payload["task"])


def _worker(payload: dict[str, Any]) -> None:
    """One Ray Train worker: the rank path of run/rank.py; reports its exit code to the driver."""
    import ray.train

    from autotrain.run.process import LAUNCHED_ENV, PARENT_ENV, RAY_LAUNCHED
    from autotrain.run.rank import run_rank
    from autotrain.training.signals import STOP_FILE_ENV

    os.chdir(payload["cwd"])
    os.environ[LAUNCHED_ENV] = RAY_LAUNCHED
    os.environ[PARENT_ENV] = payload["parent"]
    os.environ[STOP_FILE_ENV] = payload["stop_file"]
    if payload.get("batch"):
        os.environ[BATCH_ENV] = payload["batch"]
    loaded = worker_config(payload)
    code = run_rank(loaded, resume=payload["resume"], argv_sets=payload["sets"])
    # Ray Train keeps only metrics that come with a checkpoint: rank 0 sends a one-line one (its exit code).
    if ray.train.get_context().get_world_rank() != 0:
        ray.train.report({"exit_code": code})
        return
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "exit_code").write_text(str(code), encoding="ascii")
        ray.train.report({"exit_code": code}, checkpoint=ray.train.Checkpoint.from_directory(folder))

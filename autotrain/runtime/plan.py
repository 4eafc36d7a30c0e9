"""`--dry-run`: print what a run would do, without loading a model or touching the project folder."""

from __future__ import annotations

import yaml

from autotrain.config.load import LoadedConfig


def visible_gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def processes_per_machine(num_processes: int | str) -> int:
    if num_processes == "auto":
        return max(1, visible_gpus())
    return int(num_processes)


def world_size(loaded: LoadedConfig) -> int:
    dist = loaded.config.distributed
    return processes_per_machine(dist.num_processes) * dist.num_machines


def print_plan(loaded: LoadedConfig, argv_sets: list[str] | tuple = ()) -> None:
    cfg = loaded.config
    args = cfg.training_args
    processes = world_size(loaded)
    effective = args.batch_size * args.gradient_accumulation * processes
    print(f"# resolved config ({loaded.source}); secrets shown as ***")
    print(yaml.safe_dump(loaded.redacted(), sort_keys=False, default_flow_style=False), end="")
    print("# plan")
    what = cfg.task + (f" / trainer {cfg.trainer}" if cfg.task == "llm" else "")
    print(f"task: {what}")
    print(
        f"effective batch size: {effective} = batch_size {args.batch_size} x gradient_accumulation "
        f"{args.gradient_accumulation} x processes {processes}"
    )
    print(f"output folder: {loaded.redacted()['project_name']}")
    if processes > 1:
        from autotrain.runtime.launch import display_command

        print("launch: " + display_command(loaded, list(argv_sets)))
    print("dry run: nothing was trained or written.")

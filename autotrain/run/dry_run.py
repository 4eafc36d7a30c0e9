"""`--dry-run`: print the resolved config and plan, without loading a model or touching the project folder."""

from __future__ import annotations

from collections.abc import Sequence

import yaml

from autotrain.config.load import LoadedConfig
from autotrain.training.plan import RunPlan


def print_plan(loaded: LoadedConfig, plan: RunPlan, argv_sets: Sequence[str] = ()) -> None:
    from autotrain.config.interpolate import redact

    cfg = loaded.config
    args = cfg.training_args
    print(f"# resolved config ({loaded.source}); secrets shown as ***")
    print(yaml.safe_dump(loaded.redacted(), sort_keys=False, default_flow_style=False), end="")
    print("# plan")
    what = cfg.task + (f" / trainer {cfg.trainer}" if cfg.task == "llm" else "")
    print(f"task: {what}")
    print(
        f"effective batch size: {plan.effective_batch_size} = batch_size {args.batch_size} x gradient_accumulation "
        f"{args.gradient_accumulation} x processes {plan.world_size}"
    )
    print(f"precision: {plan.precision.mode} on {plan.precision.device} (asked: {plan.asked_precision})")
    optimizer = plan.optimizer.record()
    print(f"optimizer: {optimizer['name']}" + (f" ({optimizer['class']})" if "class" in optimizer else ""))
    print(f"output folder: {loaded.redacted()['project_name']}")
    if plan.world_size > 1:
        from autotrain.run.launch import display_command

        print("launch: " + display_command(loaded, plan, list(argv_sets)))
    print(redact("dry run: nothing was trained or written.", loaded.secrets))

"""Settings every task shares: config -> TrainingArguments kwargs, and the optimizer hook-up."""

from __future__ import annotations

from typing import Any

from autotrain.config.base import TaskConfig
from autotrain.config.errors import UserInputError
from autotrain.runtime.precision import Precision


def load_error(cfg: TaskConfig, what: str, exc: Exception) -> UserInputError:
    """A failed `from_pretrained` of base_model as bad input (exit 2), with the library's first line."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return UserInputError(f"cannot load the {what} of base_model `{cfg.base_model}`: {first}")


def check_logger(log: str) -> None:
    """`log: tensorboard | wandb` needs its package; say so before any model is loaded."""
    import importlib.util

    if log != "none" and importlib.util.find_spec(log) is None:
        raise UserInputError(f"log: {log} needs the `{log}` package: pip install {log} (or set `log: none`)")


def check_optimizer(name: str) -> None:
    """`adamw_8bit` runs on bitsandbytes, which is not a dependency: say so before any model loads."""
    import importlib.util

    if name == "adamw_8bit" and importlib.util.find_spec("bitsandbytes") is None:
        raise UserInputError(
            "training_args.optimizer: adamw_8bit needs bitsandbytes: pip install bitsandbytes "
            "(or use `came_8bit`, which needs nothing extra)"
        )


def training_kwargs(cfg: TaskConfig, precision: Precision, has_eval: bool) -> dict[str, Any]:
    """The TrainingArguments fields autotrain controls, for any Trainer/TRL config class."""
    from autotrain.optimizers.registry import BUNDLED, hf_optimizer_settings

    args = cfg.training_args
    eval_strategy = args.eval_strategy if has_eval else "no"
    kwargs: dict[str, Any] = {
        "output_dir": cfg.project_name,
        "num_train_epochs": args.epochs,
        "max_steps": args.max_steps or -1,
        "per_device_train_batch_size": args.batch_size,
        "per_device_eval_batch_size": args.eval_batch_size or args.batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation,
        "learning_rate": args.lr,
        "warmup_steps": args.warmup_ratio,  # a float below 1 is a ratio of the total steps
        "weight_decay": args.weight_decay,
        "max_grad_norm": args.max_grad_norm or 0.0,
        "lr_scheduler_type": args.scheduler,
        "seed": args.seed,
        "data_seed": args.seed,
        "gradient_checkpointing": args.gradient_checkpointing,
        "logging_steps": args.logging_steps,
        "logging_first_step": True,
        "save_strategy": "steps" if args.save_steps else "epoch",
        "save_total_limit": args.save_total_limit,
        "eval_strategy": eval_strategy,
        "report_to": [] if cfg.log == "none" else [cfg.log],
        "dataloader_num_workers": args.dataloader_num_workers,
        "disable_tqdm": True,  # autotrain draws its own progress display
        **precision.training_args,
    }
    if args.save_steps:
        kwargs["save_steps"] = args.save_steps
    if eval_strategy == "steps":
        kwargs["eval_steps"] = args.eval_steps
    if args.gradient_checkpointing:
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if args.optimizer not in BUNDLED:
        kwargs.update(hf_optimizer_settings(args.optimizer, args.optimizer_args))
    return kwargs


def attach_optimizer(trainer, cfg: TaskConfig) -> None:
    """Hand a bundled optimizer to the Trainer through `optimizer_cls_and_kwargs`.

    The Trainer still builds the param groups (weight decay off for biases and norms) and the LR
    scheduler; it only calls our class instead of its own. Set after construction because not every TRL
    trainer takes the argument in its constructor.
    """
    from autotrain.optimizers.registry import BUNDLED, optimizer_cls_and_kwargs

    args = cfg.training_args
    if args.optimizer in BUNDLED:
        cls, kwargs = optimizer_cls_and_kwargs(args.optimizer, args.optimizer_args)
        trainer.optimizer_cls_and_kwargs = (cls, {**kwargs, "lr": args.lr})

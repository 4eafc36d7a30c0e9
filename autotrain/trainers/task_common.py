"""What the builders of the text tasks beyond classification share: the Trainer (with the planned optimizer
and early stopping) and a model whose head is made for the task's labels."""

from __future__ import annotations

from typing import Any

from autotrain.trainers.classification_common import early_stopping_callbacks, head_mismatch
from autotrain.trainers.common import load_pretrained, make_trainer
from autotrain.training.plan import RunPlan


def task_trainer(cfg, plan: RunPlan, callbacks: list, trainer_cls=None, args_cls=None, args=None, **kwargs: Any):
    """`trainer_cls` (transformers' Trainer) with `args_cls(**plan.training_args, **args)`, the planned
    optimizer, and early stopping when the config asks for it."""
    from transformers import Trainer, TrainingArguments

    trainer_cls, args_cls = trainer_cls or Trainer, args_cls or TrainingArguments
    return make_trainer(
        trainer_cls,
        plan,
        args=args_cls(**plan.training_args, **(args or {})),
        callbacks=[*callbacks, *early_stopping_callbacks(cfg)],
        **kwargs,
    )


def head_model(auto_cls, cfg, token: str | None, suffix: str, num_labels: int, **kwargs: Any):
    """`auto_cls` from base_model in fp32 with a head of `num_labels` outputs (a new one, with a notice, when
    the checkpoint's head has another size)."""
    import torch
    from transformers import AutoConfig

    config = load_pretrained(AutoConfig, cfg, "config", token)
    return load_pretrained(
        auto_cls,
        cfg,
        "weights",
        token,
        dtype=torch.float32,
        num_labels=num_labels,
        ignore_mismatched_sizes=head_mismatch(config, num_labels, suffix),
        **kwargs,
    )

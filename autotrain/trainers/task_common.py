"""What the builders of every task but llm share: the Trainer (with the planned optimizer and early stopping),
a model whose head is made for the task's labels or one with a LoRA adapter, and the rows a preview shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotrain.errors import eprint
from autotrain.trainers.common import load_pretrained, make_trainer
from autotrain.trainers.llm.model import build_lora_config, quantization_config
from autotrain.training.plan import RunPlan


def early_stopping_callbacks(cfg) -> list:
    stop = cfg.training_args.early_stopping
    if stop is None:
        return []
    from transformers import EarlyStoppingCallback

    return [EarlyStoppingCallback(early_stopping_patience=stop.patience, early_stopping_threshold=stop.threshold)]


def logits_to_predictions(logits, labels):
    """Keep only the predicted ids during evaluation, not every logit."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)


def task_trainer(
    cfg,
    plan: RunPlan,
    callbacks: list,
    model,
    train,
    valid,
    processor=None,
    collator=None,
    *,
    trainer_cls=None,
    args_cls=None,
    args: dict | None = None,
    **kwargs: Any,
):
    """`trainer_cls` (transformers' Trainer) training `model` on `train` and evaluating on `valid`, with
    `args_cls(**plan.training_args, **args)` (TrainingArguments), the planned optimizer, and early stopping
    when the config asks for it. The other keyword arguments go to `trainer_cls`."""
    from transformers import Trainer, TrainingArguments

    trainer_cls, args_cls = trainer_cls or Trainer, args_cls or TrainingArguments
    if processor is not None:
        kwargs["processing_class"] = processor
    if collator is not None:
        kwargs["data_collator"] = collator
    return make_trainer(
        trainer_cls,
        plan,
        args=args_cls(**plan.training_args, **(args or {})),
        callbacks=[*callbacks, *early_stopping_callbacks(cfg)],
        model=model,
        train_dataset=train,
        eval_dataset=valid,
        **kwargs,
    )


def head_mismatch(config, num_labels: int, suffix: str) -> bool:
    """True (and a notice) when the checkpoint already has a head (its architecture ends with `suffix`) for a
    different label count."""
    has_head = any(a.endswith(suffix) for a in (getattr(config, "architectures", None) or []))
    if not has_head or config.num_labels == num_labels:
        return False
    eprint(
        f"note: base_model has a {config.num_labels}-label classifier head; training a new "
        f"{num_labels}-label head (ignore_mismatched_sizes=True)"
    )
    return True


def label_kwargs(labels: list[str]) -> dict[str, Any]:
    """A head of one output per label, named as the model config saves them (`id2label`, `label2id`)."""
    return {
        "num_labels": len(labels),
        "id2label": dict(enumerate(labels)),
        "label2id": {name: i for i, name in enumerate(labels)},
    }


def head_model(auto_cls, cfg, token: str | None, suffix: str, *, num_labels: int, config=None, **kwargs: Any):
    """`auto_cls` from base_model in fp32 (mixed_precision runs the compute in half precision) with a head of
    `num_labels` outputs: a new one, with a notice, when the checkpoint's head has another size.
    `config` is base_model's config when the builder has read it already."""
    import torch
    from transformers import AutoConfig

    config = config if config is not None else load_pretrained(AutoConfig, cfg, "config", token)
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


def lora_model(auto_cls, cfg, plan: RunPlan, token: str | None, task_type: str, **kwargs: Any):
    """`auto_cls` from base_model (`kwargs`: its dtype), quantized when `peft.quantization` asks, with a LoRA
    adapter of `task_type` when `peft:` asks for one (seq2seq and vlm, whose Trainer takes the adapted model)."""
    quantized = quantization_config(cfg, plan.precision)
    if quantized is not None:
        kwargs["quantization_config"] = quantized
    model = load_pretrained(auto_cls, cfg, "weights", token, **kwargs)
    if cfg.training_args.gradient_checkpointing:
        model.config.use_cache = False
    if not cfg.uses_peft:
        return model
    from peft import get_peft_model, prepare_model_for_kbit_training

    if quantized is not None:
        model = prepare_model_for_kbit_training(model, cfg.training_args.gradient_checkpointing)
    return get_peft_model(model, build_lora_config(cfg, task_type))


def rows_preview(splits, count: int, example: Callable[[dict], dict], summary=None, warnings=()) -> dict:
    """What `--preview` shows of a task's data: `example(row)` of the first `count` training rows, the row
    counts of both splits with the task's own `summary` lines, and `warnings`."""
    rows = splits.train.select(range(min(count, len(splits.train))))
    return {
        "kind": "rows",
        "examples": [example(row) for row in rows],
        "summary": {"rows": len(splits.train), "validation_rows": len(splits.valid), **(summary or {})},
        "warnings": list(warnings),
    }

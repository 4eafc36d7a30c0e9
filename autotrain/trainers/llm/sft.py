"""Supervised fine-tuning on plain `text` or chat `messages` (TRL SFTTrainer)."""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.trainers.common import attach_optimizer
from autotrain.trainers.llm.base import prepare
from autotrain.trainers.llm.model import build_lora_config, build_model


def build_trainer(cfg: LLMConfig, callbacks: list, token: str | None = None):
    from trl import SFTConfig, SFTTrainer

    ready = prepare(cfg, token)
    args = cfg.training_args
    extra = {"max_length": args.max_length, "packing": args.packing, "dataset_text_field": "text"}
    if args.completion_only_loss is not None:
        extra["completion_only_loss"] = args.completion_only_loss
    trainer = SFTTrainer(
        model=build_model(cfg, ready.precision, token),
        args=SFTConfig(**ready.args_kwargs(cfg), **extra),
        train_dataset=ready.train,
        eval_dataset=ready.valid,
        processing_class=ready.tokenizer,
        peft_config=build_lora_config(cfg),
        callbacks=callbacks,
    )
    attach_optimizer(trainer, cfg)
    return trainer

"""Supervised fine-tuning on plain `text` or chat `messages` (TRL SFTTrainer)."""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.trainers.llm.base import llm_trainer, prepare
from autotrain.trainers.llm.model import build_model
from autotrain.training.plan import RunPlan


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    from trl import SFTConfig, SFTTrainer

    ready = prepare(cfg, plan, token)
    args = cfg.training_args
    extra = {"max_length": args.max_length, "packing": args.packing, "dataset_text_field": "text"}
    if args.completion_only_loss is not None:
        extra["completion_only_loss"] = args.completion_only_loss
    model = build_model(cfg, plan, token)
    trainer = llm_trainer(SFTTrainer, SFTConfig, cfg, plan, ready, callbacks, model=model, args=extra)
    if plan.padding_free:
        use_padding_free_batches(trainer)
    return trainer


def use_padding_free_batches(trainer) -> None:
    """Flatten each batch into one sequence, its samples kept apart by position ids (TRL's padding-free mode).

    Set after TRL has prepared the data, which it truncates to `max_length` only when not padding-free
    (TRL's own `padding_free=True` without packing would refuse `max_length`): the samples are the same,
    only their batching changes.
    """
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    collator = trainer.data_collator
    trainer.data_collator = DataCollatorForLanguageModeling(
        pad_token_id=collator.pad_token_id, padding_free=True, pad_to_multiple_of=collator.pad_to_multiple_of
    )
    trainer.padding_free = True

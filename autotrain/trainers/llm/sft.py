"""Supervised fine-tuning on plain `text` or chat `messages` (TRL SFTTrainer)."""

from __future__ import annotations

from typing import Any

import torch

from autotrain.config.llm import LLMConfig
from autotrain.trainers.llm.base import llm_trainer, prepare
from autotrain.trainers.llm.model import build_model
from autotrain.trainers.llm.sft_data import answered_splits, sft_arguments
from autotrain.training.plan import RunPlan


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None) -> tuple[Any, RunPlan]:
    from trl import SFTConfig, SFTTrainer

    ready = prepare(cfg, plan, token)
    # tokenized and labelled here (answers only unless train_on_inputs), so that the preview's marks are these
    train, valid = answered_splits(cfg, plan, ready.tokenizer, ready.train, ready.valid)
    model = build_model(cfg, plan, token)
    trainer_cls = counting_trained_tokens(length_grouped(SFTTrainer) if plan.length_grouped else SFTTrainer)
    if plan.padding_free == "rows":
        trainer_cls = counting_row_tokens(trainer_cls)
    trainer, plan = llm_trainer(
        trainer_cls,
        SFTConfig,
        cfg,
        plan,
        ready,
        callbacks,
        model=model,
        args=sft_arguments(cfg),
        train_dataset=train,
        eval_dataset=valid,
    )
    if plan.padding_free == "one sequence":
        use_padding_free_batches(trainer)
    elif plan.padding_free == "rows" and not use_row_packed_batches(trainer):
        plan = plan.refine("the loaded model was not seen to keep samples laid end to end apart", padding_free="")
    return trainer, plan


def counting_trained_tokens(trainer_cls: type) -> type:
    """`trainer_cls` logging `trained_tokens`: the tokens that carried loss so far, over every process (TRL's
    `num_tokens` counts every token of the batches, prompts and template markers included)."""

    class TrainedTokensTrainer(trainer_cls):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if model.training and "labels" in inputs:
                labels = inputs["labels"]
                count = self.accelerator.gather_for_metrics((labels[..., 1:] != -100).sum()[None]).sum()
                self._trained_tokens = getattr(self, "_trained_tokens", 0) + int(count)
                self._metrics["train"]["trained_tokens"] = [self._trained_tokens]
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    TrainedTokensTrainer.__name__ = TrainedTokensTrainer.__qualname__ = f"TrainedTokens{trainer_cls.__name__}"
    return TrainedTokensTrainer


def use_row_packed_batches(trainer) -> bool:
    """Pack each batch's samples into rows without padding (autotrain.training.batching.RowPackingCollator)
    where this model keeps packed samples apart; otherwise keep padded batches and say so once. The check
    runs on every rank and packs only where it passed on all: row-packed batches add a gather each step."""
    from autotrain.errors import eprint
    from autotrain.training.batching import RowPackingCollator, keeps_packed_samples_apart
    from autotrain.training.ranks import on_every_rank

    if not on_every_rank(keeps_packed_samples_apart(trainer.model)):
        eprint(
            "note: padding_free: this model was not seen to keep samples laid end to end apart (one check "
            "when training starts), so batches stay padded; `padding_free: false` skips the check"
        )
        return False
    trainer.data_collator = RowPackingCollator(trainer.data_collator)
    return True


def counting_row_tokens(trainer_cls: type) -> type:
    """`trainer_cls` whose `num_tokens` metric counts every row of a row-packed batch (TRL counts the tokens of
    a batch without an attention mask as one flattened sequence: a single row)."""

    class RowPackedTrainer(trainer_cls):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            tokens = inputs.pop("num_tokens", None)
            result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if tokens is not None and model.training and hasattr(self, "_total_train_tokens"):
                counted = torch.tensor([inputs["position_ids"].size(1), tokens], device=inputs["position_ids"].device)
                counted = self.accelerator.gather_for_metrics(counted[None]).sum(0)
                self._total_train_tokens += int(counted[1] - counted[0]) // getattr(self, "_tp_size", 1)
                self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
            return result

    RowPackedTrainer.__name__ = RowPackedTrainer.__qualname__ = f"RowPacked{trainer_cls.__name__}"
    return RowPackedTrainer


def length_grouped(trainer_cls: type) -> type:
    """`trainer_cls` drawing its training batches from autotrain.training.batching: samples of similar length,
    as many batches per epoch as `batch_size` gives, about as many tokens in each, in random order."""

    class LengthGroupedTrainer(trainer_cls):
        def get_train_dataloader(self):
            return length_grouped_dataloader(self)

    LengthGroupedTrainer.__name__ = LengthGroupedTrainer.__qualname__ = f"LengthGrouped{trainer_cls.__name__}"
    return LengthGroupedTrainer


def length_grouped_dataloader(trainer):
    """The Trainer's training DataLoader (same collator and loader settings) with a length-grouped batch sampler."""
    from functools import partial

    from torch.utils.data import DataLoader
    from transformers.trainer_utils import seed_worker

    from autotrain.training.batching import length_grouped_batches, sample_lengths

    args = trainer.args
    dataset = trainer._remove_unused_columns(trainer.train_dataset, description="Training")
    seed = args.data_seed if args.data_seed is not None else args.seed
    batches = length_grouped_batches(sample_lengths(dataset), args.per_device_train_batch_size, seed)
    loader = DataLoader(
        dataset,
        batch_sampler=batches,
        collate_fn=trainer.data_collator,
        num_workers=args.dataloader_num_workers,
        pin_memory=args.dataloader_pin_memory,
        persistent_workers=args.dataloader_persistent_workers and args.dataloader_num_workers > 0,
        worker_init_fn=partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index),
    )
    return trainer.accelerator.prepare(loader)


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

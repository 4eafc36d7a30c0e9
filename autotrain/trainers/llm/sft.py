"""Supervised fine-tuning on plain `text` or chat `messages` (TRL SFTTrainer, as autotrain's AutotrainSFTTrainer)."""

from __future__ import annotations

from typing import Any

from autotrain.config.llm import LLMConfig
from autotrain.trainers.common import make_trainer
from autotrain.trainers.llm.base import loss_for_model, on_training_device, prepare, with_data
from autotrain.trainers.llm.model import build_lora_config, build_model
from autotrain.trainers.llm.sft_data import answered_splits, sft_arguments
from autotrain.training.plan import RunPlan


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None) -> tuple[Any, RunPlan]:
    from trl import SFTConfig

    from autotrain.trainers.llm.sft_trainer import AutotrainSFTTrainer

    ready = prepare(cfg, plan, token)
    # tokenized and labelled here (answers only unless train_on_inputs), so that the preview's marks are these
    train, valid = answered_splits(cfg, plan, ready.tokenizer, ready.train, ready.valid)
    callbacks, plan = with_data(ready, callbacks, plan)  # a mixture's epochs; rows per source
    model = build_model(cfg, plan, token)
    args = SFTConfig(**{**plan.training_args, **sft_arguments(cfg)})  # sets up this process's device and group
    on_training_device(model, cfg, plan, args)
    plan = loss_for_model(batching_for_model(plan, model), model, cfg)
    return make_trainer(
        AutotrainSFTTrainer,
        plan,
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=valid,
        processing_class=ready.tokenizer,
        data_collator=sft_collator(plan.padding_free, ready.tokenizer, model),
        peft_config=build_lora_config(cfg),
        callbacks=callbacks,
        cross_entropy=plan.cross_entropy,
        length_grouped=plan.length_grouped,
    )


def batching_for_model(plan: RunPlan, model) -> RunPlan:
    """`plan`, with padded batches where it packs rows and the loaded model was not seen to keep the samples of a
    row apart (said once). The check runs on every rank and rows are packed only where it passed on all: row-packed
    batches add a gather each step."""
    from autotrain.errors import eprint
    from autotrain.training.batching import keeps_packed_samples_apart
    from autotrain.training.ranks import on_every_rank

    if plan.padding_free != "rows" or on_every_rank(keeps_packed_samples_apart(model)):
        return plan
    eprint(
        "note: padding_free: this model was not seen to keep samples laid end to end apart (one check "
        "when training starts), so batches stay padded; `padding_free: false` skips the check"
    )
    return plan.refine("the loaded model was not seen to keep samples laid end to end apart", padding_free="")


def sft_collator(batching: str, tokenizer, model):
    """The collator for the plan's padding-free batches: TRL's language-modelling collator flattening a batch into
    one sequence whose samples the position ids keep apart ("one sequence"), or autotrain.training.batching's
    RowPackingCollator around it ("rows"). None otherwise: TRL builds its own (padded batches, or its padding-free
    ones for packed blocks).

    The rows come prepared and cut to `max_length` (autotrain.trainers.llm.sft_data), so TRL's own `padding_free`
    stays off and the collator passed here lays the same samples out without padding. TRL gives the model the
    tokenizer's pad token when it builds its own collator; given this one, it is done here.
    """
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from autotrain.training.batching import RowPackingCollator

    if not batching:
        return None
    model.config.get_text_config().pad_token_id = tokenizer.pad_token_id
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    collator = DataCollatorForLanguageModeling(
        pad_token_id=tokenizer.pad_token_id, padding_free=batching == "one sequence"
    )
    return RowPackingCollator(collator) if batching == "rows" else collator

"""Plain causal-LM training on raw text, concatenated and cut into `max_length` blocks
(transformers Trainer): continued pre-training."""

from __future__ import annotations

from transformers import Trainer

from autotrain.config.llm import LLMConfig
from autotrain.trainers.common import make_trainer
from autotrain.trainers.llm.base import loss_for_model, on_training_device, prepare, with_data
from autotrain.trainers.llm.model import build_lora_config, build_model
from autotrain.training.lm_loss import causal_lm_loss, language_model
from autotrain.training.plan import RunPlan


class AutotrainCLMTrainer(Trainer):
    """transformers' Trainer whose loss is `cross_entropy`'s (autotrain.training.lm_loss; `full`: the model's own)."""

    def __init__(self, *args, cross_entropy: str = "chunked", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cross_entropy = cross_entropy
        self.loss_only = False  # an evaluation step that wants the loss and no logits (see prediction_step)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.cross_entropy == "full" or (return_outputs and not self.loss_only):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        inner = language_model(self.accelerator.unwrap_model(model))
        smoothing = self.args.label_smoothing_factor
        loss = causal_lm_loss(model, inner, inputs, self.cross_entropy, smoothing, num_items_in_batch).loss
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes  # as transformers' Trainer does: DDP averages
        return (loss, {}) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """The Trainer's step asks `compute_loss` for the model's outputs even when evaluation wants only the loss:
        then there are none to give, and no logits are made."""
        self.loss_only = prediction_loss_only
        try:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        finally:
            self.loss_only = False


def group_texts(cfg: LLMConfig, tokenizer, train, valid):
    """(training blocks, validation blocks or None): each split's documents tokenized with EOS appended, laid end
    to end and cut into full blocks of `max_length` tokens, a batch of 1,000 documents at a time (what is left
    of a batch is dropped; autotrain.data.blocks). Prepared once and cached like SFT data (or streamed, with
    `data.streaming`), for every source of a mixture."""
    from autotrain.trainers.llm.prepared_splits import prepared_splits, streamed_splits

    if cfg.data.streaming:
        return streamed_splits(cfg, tokenizer, valid is not None, _blocks_job)
    return prepared_splits(cfg, tokenizer, train, valid, _blocks_job, _blocks_inputs, _no_blocks)


def _blocks_job(cfg: LLMConfig, tokenizer, chat_template: str | None = None):
    from autotrain.data.blocks import BlockJob

    return BlockJob(tokenizer, cfg.training_args.max_length, trainer=cfg.trainer)


def _blocks_inputs(cfg: LLMConfig, tokenizer, job) -> dict:
    from autotrain.data.tokenizer_key import tokenizer_key

    return {"trainer": cfg.trainer, "tokenizer": tokenizer_key(tokenizer), "block": job.block}


def _no_blocks(cfg: LLMConfig, name: str, record: dict) -> None:
    if record["written"] == 0:
        from autotrain.errors import UserInputError

        raise UserInputError(
            f"the {name} text is shorter than one block of training_args.max_length={cfg.training_args.max_length} "
            "tokens; lower max_length or add data"
        )


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    from transformers import TrainingArguments, default_data_collator

    ready = prepare(cfg, plan, token)
    train, valid = group_texts(cfg, ready.tokenizer, ready.train, ready.valid)
    callbacks, plan = with_data(ready, callbacks, plan)  # a mixture's epochs; rows per source
    model = build_model(cfg, plan, token)
    args = TrainingArguments(**plan.training_args)  # sets up this process's device and process group
    on_training_device(model, cfg, plan, args)
    plan = loss_for_model(plan, model, cfg)
    lora = build_lora_config(cfg)
    if lora is not None:  # the plain Trainer takes no peft_config
        from peft import get_peft_model

        model = get_peft_model(model, lora)
    return make_trainer(
        AutotrainCLMTrainer,
        plan,
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=valid,
        processing_class=ready.tokenizer,
        data_collator=default_data_collator,
        callbacks=callbacks,
        cross_entropy=plan.cross_entropy,
    )

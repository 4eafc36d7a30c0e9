"""Plain causal-LM training on raw text, concatenated and cut into `max_length` blocks
(transformers Trainer): continued pre-training."""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.trainers.common import make_trainer
from autotrain.trainers.llm.base import prepare, with_data
from autotrain.trainers.llm.model import build_lora_config, build_model
from autotrain.training.plan import RunPlan


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
    from transformers import Trainer, TrainingArguments, default_data_collator

    ready = prepare(cfg, plan, token)
    train, valid = group_texts(cfg, ready.tokenizer, ready.train, ready.valid)
    callbacks, plan = with_data(ready, callbacks, plan)  # a mixture's epochs; rows per source
    model = build_model(cfg, plan, token)
    lora = build_lora_config(cfg)
    if lora is not None:  # the plain Trainer takes no peft_config
        from peft import get_peft_model

        model = get_peft_model(model, lora)
    return make_trainer(
        Trainer,
        plan,
        model=model,
        args=TrainingArguments(**plan.training_args),
        train_dataset=train,
        eval_dataset=valid,
        processing_class=ready.tokenizer,
        data_collator=default_data_collator,
        callbacks=callbacks,
    )

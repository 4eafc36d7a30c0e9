"""Plain causal-LM training on raw text, concatenated and cut into `max_length` blocks
(transformers Trainer): continued pre-training."""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.trainers.common import make_trainer
from autotrain.trainers.llm.base import prepare
from autotrain.trainers.llm.model import build_lora_config, build_model
from autotrain.training.plan import RunPlan


def group_texts(dataset, tokenizer, block: int):
    """Tokenize, append EOS to every document, concatenate and split into full blocks of `block` tokens."""
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []

    def tokenize(batch):
        return {"input_ids": [ids + eos for ids in tokenizer(batch["text"], add_special_tokens=True)["input_ids"]]}

    def chunk(batch):
        flat = [t for ids in batch["input_ids"] for t in ids]
        usable = len(flat) // block * block
        blocks = [flat[i : i + block] for i in range(0, usable, block)]
        return {
            "input_ids": blocks,
            "labels": [list(b) for b in blocks],
            "attention_mask": [[1] * block for _ in blocks],
        }

    tokens = dataset.map(tokenize, batched=True, remove_columns=dataset.column_names)
    grouped = tokens.map(chunk, batched=True, batch_size=1000, remove_columns=tokens.column_names)
    if len(grouped) == 0:
        from autotrain.errors import UserInputError

        raise UserInputError(
            f"the text is shorter than one block of training_args.max_length={block} tokens; "
            "lower max_length or add data"
        )
    return grouped


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    from transformers import Trainer, TrainingArguments, default_data_collator

    ready = prepare(cfg, plan, token)
    block = cfg.training_args.max_length
    train = group_texts(ready.train, ready.tokenizer, block)
    valid = group_texts(ready.valid, ready.tokenizer, block) if ready.valid is not None else None
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

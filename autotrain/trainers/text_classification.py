"""Text classification: a sequence-classification head on a hub or local checkpoint (transformers Trainer).

Order keeps mistakes cheap: the tokenizer and the data (bad columns, labels, encodings fail here) come
before the model weights.
"""

from __future__ import annotations

from autotrain.config.classification import TextClassificationConfig
from autotrain.data.classification import load_text_splits
from autotrain.errors import eprint
from autotrain.trainers.classification_common import base_config, classification_trainer
from autotrain.trainers.common import build_tokenizer
from autotrain.trainers.task_common import head_model, label_kwargs
from autotrain.training.plan import RunPlan


def max_tokens(cfg: TextClassificationConfig, tokenizer, config) -> int:
    """`training_args.max_length`, capped by what the model's position embeddings can take."""
    limits = [cfg.training_args.max_length]
    if getattr(config, "max_position_embeddings", None):
        limits.append(config.max_position_embeddings)
    if 0 < tokenizer.model_max_length < 1_000_000:  # tokenizers without a limit report a huge number
        limits.append(tokenizer.model_max_length)
    length = min(limits)
    if length < cfg.training_args.max_length:
        from autotrain.training.model_shape import capped_length_note

        eprint(f"note: {capped_length_note(cfg.training_args.max_length, length)}")
    return length


def tokenize(dataset, tokenizer, length: int):
    """Truncate to `length` tokens; padding happens per batch in the collator (shorter batches)."""
    return dataset.map(
        lambda batch: tokenizer(batch["text"], truncation=True, max_length=length),
        batched=True,
        remove_columns=["text"],
    )


def build_trainer(cfg: TextClassificationConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, set_seed

    set_seed(cfg.training_args.seed)
    config = base_config(cfg, token)
    tokenizer = build_tokenizer(cfg, token)
    splits = load_text_splits(cfg, token)
    length = max_tokens(cfg, tokenizer, config)
    train, valid = tokenize(splits.train, tokenizer, length), tokenize(splits.valid, tokenizer, length)
    model = head_model(
        AutoModelForSequenceClassification,
        cfg,
        token,
        "ForSequenceClassification",
        config=config,
        **label_kwargs(splits.labels),
    )
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id  # last-token pooling models need it
    if cfg.training_args.gradient_checkpointing:
        model.config.use_cache = False
    collator = DataCollatorWithPadding(tokenizer)
    return classification_trainer(cfg, plan, callbacks, model, train, valid, tokenizer, collator)

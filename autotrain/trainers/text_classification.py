"""Text classification: a sequence-classification head on a hub or local checkpoint (transformers Trainer).

Order keeps mistakes cheap: the tokenizer and the data (bad columns, labels, encodings fail here) come
before the model weights.
"""

from __future__ import annotations

from autotrain.config.classification import TextClassificationConfig
from autotrain.data.classification import ClassificationSplits, load_text_splits
from autotrain.runtime.precision import Precision, resolve_precision
from autotrain.trainers.classification_common import (
    base_config,
    classification_training_kwargs,
    compute_metrics,
    early_stopping_callbacks,
    head_mismatch,
    label_kwargs,
    logits_to_predictions,
)
from autotrain.trainers.common import attach_optimizer, load_error


def build_tokenizer(cfg: TextClassificationConfig, token: str | None = None):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            cfg.base_model, revision=cfg.revision, token=token, trust_remote_code=cfg.trust_remote_code
        )
    except (OSError, ValueError) as exc:
        raise load_error(cfg, "tokenizer", exc) from None
    if tokenizer.pad_token is None:
        # Decoder-only checkpoints have no pad token; padding is masked out, so EOS (or UNK) serves.
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer


def max_tokens(cfg: TextClassificationConfig, tokenizer, config) -> int:
    """`training_args.max_length`, capped by what the model's position embeddings can take."""
    limits = [cfg.training_args.max_length]
    if getattr(config, "max_position_embeddings", None):
        limits.append(config.max_position_embeddings)
    if 0 < tokenizer.model_max_length < 1_000_000:  # tokenizers without a limit report a huge number
        limits.append(tokenizer.model_max_length)
    length = min(limits)
    if length < cfg.training_args.max_length:
        from autotrain.cli.common import eprint

        eprint(
            f"note: training_args.max_length {cfg.training_args.max_length} is more than base_model takes; "
            f"using {length}"
        )
    return length


def tokenize(dataset, tokenizer, length: int):
    """Truncate to `length` tokens; padding happens per batch in the collator (shorter batches)."""
    return dataset.map(
        lambda batch: tokenizer(batch["text"], truncation=True, max_length=length),
        batched=True,
        remove_columns=["text"],
    )


def build_model(
    cfg: TextClassificationConfig, splits: ClassificationSplits, config, tokenizer, token: str | None = None
):
    import torch
    from transformers import AutoModelForSequenceClassification

    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            cfg.base_model,
            revision=cfg.revision,
            token=token,
            trust_remote_code=cfg.trust_remote_code,
            dtype=torch.float32,  # fp32 master weights; mixed_precision runs the compute in half precision
            ignore_mismatched_sizes=head_mismatch(config, len(splits.labels), "ForSequenceClassification"),
            **label_kwargs(splits.labels),
        )
    except (OSError, ValueError) as exc:
        raise load_error(cfg, "weights", exc) from None
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id  # last-token pooling models need it
    if cfg.training_args.gradient_checkpointing:
        model.config.use_cache = False
    return model


def build_trainer(cfg: TextClassificationConfig, callbacks: list, token: str | None = None):
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments, set_seed

    set_seed(cfg.training_args.seed)
    precision: Precision = resolve_precision(cfg.training_args.mixed_precision)
    config = base_config(cfg, token)
    tokenizer = build_tokenizer(cfg, token)
    splits = load_text_splits(cfg, token)
    length = max_tokens(cfg, tokenizer, config)
    train, valid = tokenize(splits.train, tokenizer, length), tokenize(splits.valid, tokenizer, length)
    model = build_model(cfg, splits, config, tokenizer, token)
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**classification_training_kwargs(cfg, precision)),
        train_dataset=train,
        eval_dataset=valid,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=logits_to_predictions,
        callbacks=[*callbacks, *early_stopping_callbacks(cfg)],
    )
    attach_optimizer(trainer, cfg)
    return trainer

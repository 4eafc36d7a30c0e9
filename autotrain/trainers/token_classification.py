"""Token classification (named entities and other tags per word): a token-classification head trained
with transformers' Trainer.

Words are split into the tokenizer's sub-words (`is_split_into_words`); each word's first sub-word carries
its tag, the others and the special tokens carry none (-100), as in transformers' examples. Each evaluation
reports seqeval's entity-level precision, recall and F1 and the token accuracy, on the words' tags.
"""

from __future__ import annotations

from autotrain.data.tokens import load_token_splits
from autotrain.errors import UserInputError
from autotrain.trainers.common import build_tokenizer
from autotrain.trainers.task_common import head_model, label_kwargs, logits_to_predictions, rows_preview, task_trainer
from autotrain.trainers.text_classification import max_tokens
from autotrain.training.plan import RunPlan


def fast_tokenizer(cfg, token: str | None = None):
    tokenizer = build_tokenizer(cfg, token)
    if not tokenizer.is_fast:
        raise UserInputError(
            f"base_model `{cfg.base_model}` has no fast tokenizer (tokenizer.json): token classification needs "
            "its word ids to give each word's first sub-word the word's tag"
        )
    return tokenizer


def aligned(tokenizer, words: list[list[str]], tags: list[list[int]] | None, length: int) -> dict:
    """Sub-word ids, and with `tags` a label per sub-word: the tag on each word's first one, -100 elsewhere."""
    encoded = tokenizer(words, is_split_into_words=True, truncation=True, max_length=length)
    if tags is None:
        return encoded
    labels = []
    for i, row_tags in enumerate(tags):
        previous, row = None, []
        for word in encoded.word_ids(i):
            row.append(-100 if word is None or word == previous else row_tags[word])
            previous = word
        labels.append(row)
    encoded["labels"] = labels
    return encoded


def tag_sequences(predictions, label_ids, names: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """(predicted, true) tag names of the labelled positions (each word's first sub-word) of every row."""
    predicted, true = [], []
    for row_predictions, row_labels in zip(predictions, label_ids, strict=True):
        kept = [(p, t) for p, t in zip(row_predictions, row_labels, strict=True) if t != -100]
        predicted.append([names[p] for p, _ in kept])
        true.append([names[t] for _, t in kept])
    return predicted, true


def seqeval_metrics(predicted: list[list[str]], true: list[list[str]]) -> dict[str, float]:
    """seqeval's entity-level precision, recall and F1 (micro, CoNLL's rules) and token accuracy."""
    from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score

    return {
        "precision": float(precision_score(true, predicted, zero_division=0)),
        "recall": float(recall_score(true, predicted, zero_division=0)),
        "f1": float(f1_score(true, predicted, zero_division=0)),
        "accuracy": float(accuracy_score(true, predicted)),
    }


def build_trainer(cfg, plan: RunPlan, callbacks: list, token: str | None = None):
    from transformers import AutoModelForTokenClassification, DataCollatorForTokenClassification, set_seed

    set_seed(cfg.training_args.seed)
    tokenizer = fast_tokenizer(cfg, token)
    splits = load_token_splits(cfg, token)
    names = splits.labels
    model = head_model(AutoModelForTokenClassification, cfg, token, "ForTokenClassification", **label_kwargs(names))
    length = max_tokens(cfg, tokenizer, model.config)

    def encode(batch):
        return aligned(tokenizer, batch["tokens"], batch["tags"], length)

    train, valid = (
        s.map(encode, batched=True, remove_columns=["tokens", "tags"]) for s in (splits.train, splits.valid)
    )

    def compute_metrics(eval_pred):
        return seqeval_metrics(*tag_sequences(eval_pred.predictions, eval_pred.label_ids, names))

    collator = DataCollatorForTokenClassification(tokenizer)
    metrics = {"compute_metrics": compute_metrics, "preprocess_logits_for_metrics": logits_to_predictions}
    return task_trainer(cfg, plan, callbacks, model, train, valid, tokenizer, collator, **metrics)


def preview(cfg, count: int, token: str | None = None) -> dict:
    """The first training rows as `word/TAG` (the words whose tag is O plain), and how often each tag occurs."""
    from collections import Counter

    splits = load_token_splits(cfg, token)
    names = splits.labels

    def example(row: dict) -> dict:
        marked = [w if names[t] == "O" else f"{w}/{names[t]}" for w, t in zip(row["tokens"], row["tags"], strict=True)]
        return {"words": " ".join(marked)}

    counts = Counter(names[t] for row in splits.train["tags"] for t in row)
    unused = [n for n in names if n not in counts]
    warnings = [f"tag(s) never seen in training: {', '.join(unused)}"] if unused else []
    return rows_preview(splits, count, example, {"tags": dict(counts.most_common())}, warnings)

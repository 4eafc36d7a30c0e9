"""A finished text-regression run: predict a number per text, evaluate MSE / MAE / R2 / correlations."""

from __future__ import annotations

from pathlib import Path

from autotrain.inference.inputs import Rows


def read_rows(cfg, path: Path, labels: bool) -> Rows:
    from autotrain.data.regression import load_regression_rows

    dataset, name = load_regression_rows(cfg, str(path), labels)
    return Rows("text", list(dataset["text"]), list(dataset["target"]) if labels else None, name)


def load(folder: Path, cfg, device: str):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from autotrain.inference.load import saved_model

    model, tokenizer = saved_model(folder, cfg, AutoModelForSequenceClassification, AutoTokenizer)
    return model.to(device), tokenizer


def max_tokens(cfg, model, processor) -> int:
    from autotrain.trainers.text_classification import max_tokens as capped

    return capped(cfg, processor, model.config)


def predict(run, values: list, batch_size: int, advance) -> list[dict]:
    from autotrain.inference.classify import text_logits

    return [{"value": float(v)} for v in text_logits(run, values, batch_size, advance)[:, 0]]


def evaluate(run, rows: Rows, batch_size: int, advance) -> dict:
    from autotrain.inference.classify import text_logits
    from autotrain.trainers.text_regression import regression_metrics

    predictions = text_logits(run, rows.values, batch_size, advance)[:, 0]
    return {"rows": len(rows), **regression_metrics(predictions, rows.labels)}

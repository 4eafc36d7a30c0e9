"""Text regression: one number per text, from a one-output sequence-classification head trained with MSE
(transformers' `problem_type: regression`). Each evaluation reports MSE, MAE, R2 and the Pearson and
Spearman correlations of predictions and targets (scipy)."""

from __future__ import annotations

from autotrain.data.regression import load_regression_splits
from autotrain.trainers.common import build_tokenizer
from autotrain.trainers.task_common import head_model, rows_preview, task_trainer
from autotrain.trainers.text_classification import max_tokens, tokenize
from autotrain.training.plan import RunPlan


def regression_metrics(predictions, targets) -> dict[str, float]:
    """MSE, MAE, R2 (1 - residual / total sum of squares) and scipy's Pearson and Spearman correlations;
    a correlation with a constant side is 0 (it is undefined: nothing varies with anything)."""
    import numpy as np
    from scipy import stats

    predictions = np.asarray(predictions, dtype=np.float64).reshape(-1)
    targets = np.asarray(targets, dtype=np.float64).reshape(-1)
    errors = predictions - targets
    total = float(((targets - targets.mean()) ** 2).sum())
    varied = predictions.std() > 0 and targets.std() > 0 and len(targets) > 1
    return {
        "mse": float((errors**2).mean()),
        "mae": float(np.abs(errors).mean()),
        "r2": 1.0 - float((errors**2).sum()) / total if total > 0 else 0.0,
        "pearson": float(stats.pearsonr(predictions, targets)[0]) if varied else 0.0,
        "spearman": float(stats.spearmanr(predictions, targets)[0]) if varied else 0.0,
    }


def compute_metrics(eval_pred) -> dict[str, float]:
    predictions = eval_pred.predictions[0] if isinstance(eval_pred.predictions, tuple) else eval_pred.predictions
    return regression_metrics(predictions, eval_pred.label_ids)


def build_trainer(cfg, plan: RunPlan, callbacks: list, token: str | None = None):
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, set_seed

    set_seed(cfg.training_args.seed)
    tokenizer = build_tokenizer(cfg, token)
    splits = load_regression_splits(cfg, token)
    model = head_model(
        AutoModelForSequenceClassification,
        cfg,
        token,
        "ForSequenceClassification",
        num_labels=1,
        problem_type="regression",
    )
    length = max_tokens(cfg, tokenizer, model.config)
    train, valid = (
        tokenize(s, tokenizer, length).rename_column("target", "labels") for s in (splits.train, splits.valid)
    )
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id  # last-token pooling models need it
    collator = DataCollatorWithPadding(tokenizer)
    return task_trainer(cfg, plan, callbacks, model, train, valid, tokenizer, collator, compute_metrics=compute_metrics)


def target_preview(splits, count: int, column: str, shown=lambda value: value) -> dict:
    """The first training rows (`shown` input in `column`, and target) and the targets' range, for `--preview`
    of a regression task."""
    import numpy as np

    targets = np.asarray(splits.train["target"], dtype=np.float64)
    return rows_preview(
        splits,
        count,
        lambda row: {column: shown(row[column]), "target": round(float(row["target"]), 6)},
        {"target": f"min {targets.min():.4g}, mean {targets.mean():.4g}, max {targets.max():.4g}"},
        [] if targets.std() > 0 else ["every training target is the same: there is nothing to learn"],
    )


def preview(cfg, count: int, token: str | None = None) -> dict:
    return target_preview(load_regression_splits(cfg, token), count, "text")

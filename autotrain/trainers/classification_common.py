"""What text and image classification share: metrics, best-model / early-stopping settings, the new-head
notice, and the final evaluation written to `eval_results.json`."""

from __future__ import annotations

from typing import Any

from autotrain.config.classification import ImageClassificationConfig, TextClassificationConfig
from autotrain.config.errors import UserInputError
from autotrain.runtime.precision import Precision
from autotrain.trainers.common import load_error, training_kwargs

ClassificationConfig = TextClassificationConfig | ImageClassificationConfig
METRICS = ("accuracy", "f1", "precision", "recall")


def classification_metrics(predictions, labels) -> dict[str, float]:
    """Accuracy and macro F1 / precision / recall over the labels seen in either array (as scikit-learn's
    `average="macro"` does); a class never predicted has precision 0."""
    import numpy as np

    predictions, labels = np.asarray(predictions).reshape(-1), np.asarray(labels).reshape(-1)
    classes = np.union1d(labels, predictions)
    confusion = np.zeros((len(classes), len(classes)), dtype=np.int64)
    np.add.at(confusion, (np.searchsorted(classes, labels), np.searchsorted(classes, predictions)), 1)
    hits = np.diag(confusion).astype(np.float64)
    predicted, actual = confusion.sum(axis=0), confusion.sum(axis=1)
    precision = np.divide(hits, predicted, out=np.zeros_like(hits), where=predicted > 0)
    recall = np.divide(hits, actual, out=np.zeros_like(hits), where=actual > 0)
    both = precision + recall
    f1 = np.divide(2 * precision * recall, both, out=np.zeros_like(hits), where=both > 0)
    return {
        "accuracy": float(hits.sum() / max(len(labels), 1)),
        "f1": float(f1.mean()),
        "precision": float(precision.mean()),
        "recall": float(recall.mean()),
    }


def compute_metrics(eval_pred) -> dict[str, float]:
    return classification_metrics(eval_pred.predictions, eval_pred.label_ids)


def logits_to_predictions(logits, labels):
    """Keep only the predicted ids during evaluation, not every logit."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)


def classification_training_kwargs(cfg: ClassificationConfig, precision: Precision) -> dict[str, Any]:
    """`training_kwargs` plus what keeping the best model and early stopping need.

    The Trainer only restores the best model from checkpoints saved at evaluation points, so saving
    follows the evaluation schedule whenever the best model is kept.
    """
    args = cfg.training_args
    kwargs = training_kwargs(cfg, precision, has_eval=True)
    evaluating = kwargs["eval_strategy"] != "no"
    if args.early_stopping is not None and not evaluating:
        raise UserInputError(
            "training_args.early_stopping needs evaluations; set training_args.eval_strategy to `epoch` or `steps`"
        )
    if args.early_stopping is not None or (args.load_best_model and evaluating):
        metric = args.early_stopping.metric if args.early_stopping is not None else "eval_loss"
        kwargs["metric_for_best_model"] = metric
        kwargs["greater_is_better"] = metric != "eval_loss"
    if args.load_best_model and evaluating:
        kwargs["load_best_model_at_end"] = True
        kwargs["save_strategy"] = kwargs["eval_strategy"]
        if kwargs["eval_strategy"] == "steps":
            save_steps = kwargs.get("save_steps") or args.eval_steps
            kwargs["save_steps"] = save_steps if save_steps % args.eval_steps == 0 else args.eval_steps
        else:
            kwargs.pop("save_steps", None)
    return kwargs


def early_stopping_callbacks(cfg: ClassificationConfig) -> list:
    stop = cfg.training_args.early_stopping
    if stop is None:
        return []
    from transformers import EarlyStoppingCallback

    return [EarlyStoppingCallback(early_stopping_patience=stop.patience, early_stopping_threshold=stop.threshold)]


def base_config(cfg: ClassificationConfig, token: str | None):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(
            cfg.base_model, revision=cfg.revision, token=token, trust_remote_code=cfg.trust_remote_code
        )
    except (OSError, ValueError) as exc:
        raise load_error(cfg, "config", exc) from None


def head_mismatch(config, num_labels: int, suffix: str) -> bool:
    """True (and a notice) when the checkpoint already has a classifier head for a different label count."""
    has_head = any(a.endswith(suffix) for a in (getattr(config, "architectures", None) or []))
    if not has_head or config.num_labels == num_labels:
        return False
    from autotrain.cli.common import eprint

    eprint(
        f"note: base_model has a {config.num_labels}-label classifier head; training a new "
        f"{num_labels}-label head (ignore_mismatched_sizes=True)"
    )
    return True


def label_kwargs(labels: list[str]) -> dict[str, Any]:
    return {
        "num_labels": len(labels),
        "id2label": dict(enumerate(labels)),
        "label2id": {name: i for i, name in enumerate(labels)},
    }


def evaluate_and_report(trainer) -> dict[str, float]:
    """Evaluate the final (or best) model, write `eval_results.json`, show the metrics as a table."""
    metrics = trainer.evaluate()
    trainer.save_metrics("eval", metrics)
    if trainer.is_world_process_zero():
        from rich.console import Console
        from rich.table import Table

        table = Table(title="validation")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for name in ("loss", *METRICS):
            if f"eval_{name}" in metrics:
                table.add_row(name, f"{metrics[f'eval_{name}']:.4f}")
        Console().print(table)
    return metrics

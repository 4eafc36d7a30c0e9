"""What text and image classification share: metrics, early stopping, the model with its new head, the
Trainer, and the final evaluation written to `eval_results.json` (every task but llm ends with it)."""

from __future__ import annotations

from typing import Any

from autotrain.config.classification import ImageClassificationConfig, TextClassificationConfig
from autotrain.errors import eprint
from autotrain.trainers.common import load_pretrained, make_trainer
from autotrain.training.plan import RunPlan

ClassificationConfig = TextClassificationConfig | ImageClassificationConfig
_TIMING = {"eval_runtime", "eval_samples_per_second", "eval_steps_per_second"}


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


def early_stopping_callbacks(cfg: ClassificationConfig) -> list:
    stop = cfg.training_args.early_stopping
    if stop is None:
        return []
    from transformers import EarlyStoppingCallback

    return [EarlyStoppingCallback(early_stopping_patience=stop.patience, early_stopping_threshold=stop.threshold)]


def base_config(cfg: ClassificationConfig, token: str | None):
    from transformers import AutoConfig

    return load_pretrained(AutoConfig, cfg, "config", token)


def build_model(auto_cls, cfg: ClassificationConfig, labels: list[str], config, token: str | None, suffix: str):
    """A classifier with one output per label, in fp32 (mixed_precision runs the compute in half precision)."""
    import torch

    return load_pretrained(
        auto_cls,
        cfg,
        "weights",
        token,
        dtype=torch.float32,
        ignore_mismatched_sizes=head_mismatch(config, len(labels), suffix),
        **label_kwargs(labels),
    )


def classification_trainer(cfg: ClassificationConfig, plan: RunPlan, callbacks: list, **kwargs: Any):
    """The transformers Trainer both classifiers use: metrics as predicted ids, early stopping if asked."""
    from transformers import Trainer, TrainingArguments

    extra = kwargs.pop("args", {})
    return make_trainer(
        Trainer,
        plan,
        args=TrainingArguments(**plan.training_args, **extra),
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=logits_to_predictions,
        callbacks=[*callbacks, *early_stopping_callbacks(cfg)],
        **kwargs,
    )


def head_mismatch(config, num_labels: int, suffix: str) -> bool:
    """True (and a notice) when the checkpoint already has a classifier head for a different label count."""
    has_head = any(a.endswith(suffix) for a in (getattr(config, "architectures", None) or []))
    if not has_head or config.num_labels == num_labels:
        return False
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
    """Evaluate the final (or best) model, write `eval_results.json`, show the metrics as a table.

    When the last evaluation of training already measured the final weights (at the last step, no best
    model reloaded), its metrics are the final ones: reused, not computed and shown a second time.
    """
    metrics = _last_step_evaluation(trainer) or trainer.evaluate()
    trainer.save_metrics("eval", metrics)
    if trainer.is_world_process_zero():
        from rich.console import Console
        from rich.table import Table

        table = Table(title="validation")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for key, value in metrics.items():  # the loss and the task's metrics, not the evaluation's timing
            if key.startswith("eval_") and key not in _TIMING and isinstance(value, (int, float)):
                table.add_row(key.removeprefix("eval_"), f"{value:.4f}")
        Console().print(table)
    return metrics


def _last_step_evaluation(trainer) -> dict[str, float] | None:
    state = trainer.state
    best = state.best_model_checkpoint
    if trainer.args.load_best_model_at_end and (not best or not best.endswith(f"checkpoint-{state.global_step}")):
        return None  # earlier weights were reloaded: measure them
    if not state.log_history:
        return None
    last = state.log_history[-1] if "eval_loss" in state.log_history[-1] else None
    if last is None:  # the Trainer logs the train summary after the last evaluation
        evals = [e for e in state.log_history if "eval_loss" in e]
        last = evals[-1] if evals else None
    if last is None or last.get("step") != state.global_step:
        return None
    return {k: v for k, v in last.items() if k.startswith("eval_") or k == "epoch"}

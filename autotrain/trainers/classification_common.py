"""What text and image classification share: metrics, the base model's config, the Trainer, and the final
evaluation written to `eval_results.json` (every task but llm ends with it)."""

from __future__ import annotations

from typing import Any

from autotrain.config.classification import ImageClassificationConfig, TextClassificationConfig
from autotrain.trainers.common import load_pretrained
from autotrain.trainers.task_common import logits_to_predictions, task_trainer
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


def base_config(cfg: ClassificationConfig, token: str | None):
    from transformers import AutoConfig

    return load_pretrained(AutoConfig, cfg, "config", token)


def classification_trainer(
    cfg: ClassificationConfig, plan: RunPlan, callbacks: list, model, train, valid, processor, collator, **kwargs: Any
):
    """The task Trainer (`task_trainer`) both classifiers use, with metrics computed from the predicted ids."""
    kwargs.update(compute_metrics=compute_metrics, preprocess_logits_for_metrics=logits_to_predictions)
    return task_trainer(cfg, plan, callbacks, model, train, valid, processor, collator, **kwargs)


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

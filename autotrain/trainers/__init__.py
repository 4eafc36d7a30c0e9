"""One builder per task / trainer: (validated config, resolved plan) in, ready transformers/TRL Trainer out."""

from __future__ import annotations


def build_trainer(cfg, plan, callbacks, token=None):
    """Dispatch on the task (and the LLM trainer) to the matching builder module."""
    if cfg.task == "llm":
        from autotrain.config.trainers import TRAINERS

        return TRAINERS[cfg.trainer].load_builder()(cfg, plan, callbacks, token)
    if cfg.task == "text-classification":
        from autotrain.trainers.text_classification import build_trainer as build
    else:
        from autotrain.trainers.image_classification import build_trainer as build
    return build(cfg, plan, callbacks, token)

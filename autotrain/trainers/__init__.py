"""One builder per task / trainer: (validated config, resolved plan) in, ready transformers/TRL Trainer out."""

from __future__ import annotations


def build_trainer(cfg, plan, callbacks, token=None):
    """Dispatch on the task (and the LLM trainer) to the matching builder module.

    Every builder returns `(trainer, plan)`: the plan it ran, which is `plan` itself unless a check on the
    loaded model refined it (`RunPlan.refine`, recorded in run.json).
    """
    if cfg.task == "llm":
        return llm_builder(cfg.trainer)(cfg, plan, callbacks, token)
    if cfg.task == "text-classification":
        from autotrain.trainers.text_classification import build_trainer as build
    else:
        from autotrain.trainers.image_classification import build_trainer as build
    return build(cfg, plan, callbacks, token)


def llm_builder(trainer: str):
    """The builder function the trainer table names for `trainer` (imports its module, and torch with it)."""
    from importlib import import_module

    from autotrain.config.trainers import TRAINERS

    module, _, function = TRAINERS[trainer].builder.partition(":")
    if not module.startswith(__name__ + "."):  # builders live in this layer (tests/test_architecture.py)
        raise ValueError(f"trainer `{trainer}`: builder {TRAINERS[trainer].builder!r} is not in {__name__}")
    return getattr(import_module(module), function)

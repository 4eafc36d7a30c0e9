"""One builder per task / trainer: (validated config, resolved plan) in, ready transformers/TRL Trainer out."""

from __future__ import annotations


def build_trainer(cfg, plan, callbacks, token=None):
    """Dispatch on the task (and the LLM trainer) to the matching builder module.

    Every builder returns `(trainer, plan)`: the plan it ran, which is `plan` itself unless a check on the
    loaded model refined it (`RunPlan.refine`, recorded in run.json).
    """
    if cfg.task == "llm":
        return llm_builder(cfg.trainer)(cfg, plan, callbacks, token)
    return task_builder(cfg.task)(cfg, plan, callbacks, token)


def task_builder(task: str):
    """The builder function the task table names for `task` (imports its module, and torch with it)."""
    from autotrain.config.tasks import TASKS

    return _function(TASKS[task].builder, f"task `{task}`")


def task_preview(cfg, count: int, token=None) -> dict:
    """The first `count` training rows as the task's builder module reads them (its `preview`), for
    `--preview` and the dry run: {"kind": "rows", "examples", "summary", "warnings"}."""
    from importlib import import_module

    builder = task_builder(cfg.task)
    return import_module(builder.__module__).preview(cfg, count, token)


def llm_builder(trainer: str):
    """The builder function the trainer table names for `trainer` (imports its module, and torch with it)."""
    from autotrain.config.trainers import TRAINERS

    return _function(TRAINERS[trainer].builder, f"trainer `{trainer}`")


def _function(reference: str, owner: str):
    from importlib import import_module

    module, _, function = reference.partition(":")
    if not module.startswith(__name__ + "."):  # builders live in this layer (tests/test_architecture.py)
        raise ValueError(f"{owner}: builder {reference!r} is not in {__name__}")
    return getattr(import_module(module), function)

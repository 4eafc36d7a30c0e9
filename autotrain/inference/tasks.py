"""Inference for the tasks whose table entry names an inference module (autotrain/config/tasks.py).

Each such module has `read_rows(cfg, path, labels)`, `load(folder, cfg, device)` -> (model, processor),
`max_tokens(cfg, model, processor)`, `predict(run, values, batch_size, advance)` -> one dict per value, and
`evaluate(run, rows, batch_size, advance)` -> the metrics; `load_run`, `predict` and `evaluate` call them.
"""

from __future__ import annotations

from types import ModuleType

from autotrain.errors import UserInputError


def task_module(task: str) -> ModuleType | None:
    """The inference module of `task`, or None for the tasks inference handles itself (llm, classifiers)."""
    from importlib import import_module

    from autotrain.config.tasks import TASKS

    name = TASKS[task].inference
    if not name:
        return None
    if not name.startswith(__package__ + "."):  # inference modules live in this layer (tests/test_architecture.py)
        raise ValueError(f"task `{task}`: inference module {name!r} is not in {__package__}")
    require_extra(task)
    return import_module(name)


def require_extra(task: str) -> None:
    """A task whose packages are missing: one line saying which extra brings them (exit 2)."""
    from autotrain.config.tasks import missing_extra

    problem = missing_extra(task)
    if problem:
        raise UserInputError(problem)

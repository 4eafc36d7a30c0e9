"""The shipped template configs (`configs/`, inside the package as `autotrain/templates`) and each task's
JSON Schema: read by `autotrain init` / `autotrain schema` and by the app."""

from __future__ import annotations

from pathlib import Path

from autotrain.config.tasks import TASKS as TASK_TABLE
from autotrain.config.trainers import TRAINERS

TASKS = tuple(TASK_TABLE)
# (task, trainer) -> the template `autotrain init` writes: LLMs one per trainer, every other task its first.
TEMPLATES = {
    **{("llm", name): spec.template for name, spec in TRAINERS.items()},
    **{(name, None): spec.templates[0] for name, spec in TASK_TABLE.items() if spec.templates},
}


def templates_dir() -> Path:
    """`configs/` of the repository (shipped inside the package as `autotrain/templates`)."""
    return Path(__file__).resolve().parent.parent / "templates"


def schema_path(task: str) -> Path:
    return templates_dir() / "schemas" / f"{task}.schema.json"


def task_schema(task: str) -> dict:
    from autotrain.config.load import TASK_MODELS
    from autotrain.config.schema import task_json_schema

    return task_json_schema(TASK_MODELS[task], f"autotrain {task} config")

"""`autotrain init` and `autotrain schema`: template configs and their JSON Schemas."""

from __future__ import annotations

import json
import re
from pathlib import Path

import typer

from autotrain.cli.common import fail
from autotrain.config.templates import TASKS, TEMPLATES, schema_path, task_schema, templates_dir
from autotrain.config.trainers import DEFAULT as DEFAULT_TRAINER
from autotrain.config.trainers import TRAINERS
from autotrain.errors import EXIT_BAD_INPUT

_SCHEMA_COMMENT = re.compile(r"^# yaml-language-server: \$schema=(\S+)", re.MULTILINE)


def _check_task(task: str) -> None:
    if task not in TASKS:
        from autotrain.config.suggest import did_you_mean

        raise fail(f"unknown task `{task}`{did_you_mean(task, TASKS)}; choose one of: {', '.join(TASKS)}")


def init(
    task: str = typer.Argument(..., help=" | ".join(TASKS), show_default=False),
    trainer: str = typer.Option(None, "--trainer", "-t", help=f"llm only: {' | '.join(TRAINERS)}."),
    output: Path = typer.Option(None, "--output", "-o", help="Where to write it (default: ./TASK[-TRAINER].yml)."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUTPUT if it exists."),
) -> None:
    """Write a commented template config to edit."""
    _check_task(task)
    if task == "llm":
        trainer = trainer or DEFAULT_TRAINER
        if ("llm", trainer) not in TEMPLATES:
            from autotrain.config.suggest import did_you_mean

            hint = did_you_mean(trainer, TRAINERS)
            raise fail(f"unknown trainer `{trainer}`{hint}; choose one of: {', '.join(TRAINERS)}")
    elif trainer is not None:
        raise fail(f"--trainer applies to `llm` only, not `{task}`")
    key = (task, trainer if task == "llm" else None)
    source = templates_dir() / TEMPLATES[key]
    output = output or Path(f"{task}{'-' + trainer if trainer else ''}.yml")
    if output.exists() and not force:
        raise fail(f"{output} exists; choose another -o PATH or add --force", EXIT_BAD_INPUT)
    text = source.read_text(encoding="utf-8")
    # The template's schema comment is relative to configs/; point it at the installed schema instead.
    text = _SCHEMA_COMMENT.sub(f"# yaml-language-server: $schema={schema_path(task).as_uri()}", text, count=1)
    # ...and its "run:" line at the copy, not at the template.
    text = text.replace(f"--config configs/{TEMPLATES[key]}", f"--config {output}", 1)
    _write(output, text)
    print(
        f"wrote {output}; check it with `autotrain validate {output}`, run it with `autotrain {task} --config {output}`"
    )


def schema(
    task: str = typer.Argument(..., help=" | ".join(TASKS), show_default=False),
    output: Path = typer.Option(None, "--output", "-o", help="Write to a file instead of stdout."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUTPUT if it exists."),
) -> None:
    """Print the task's JSON Schema (for editor completion and checking)."""
    _check_task(task)
    text = json.dumps(task_schema(task), indent=2) + "\n"
    if output is None:
        print(text, end="")
        return
    if output.exists() and not force:
        raise fail(f"{output} exists; choose another -o PATH or add --force", EXIT_BAD_INPUT)
    _write(output, text)
    print(f"wrote {output}")


def _write(output: Path, text: str) -> None:
    """Write `output` (its folder made if missing); a folder or file that cannot be written is bad input."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot write {output}: {exc.strerror or exc}", EXIT_BAD_INPUT) from None

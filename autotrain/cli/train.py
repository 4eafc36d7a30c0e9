"""`autotrain llm | text-classification | image-classification --config F`: validate, plan, train."""

from __future__ import annotations

import inspect
from pathlib import Path

import typer

from autotrain.cli.common import (
    AcceptChangesOption,
    ConfigOption,
    DryRunOption,
    OverwriteOption,
    PreviewOption,
    ResumeOption,
    SetOption,
    fail,
    report_config_error,
)
from autotrain.config.tasks import TASKS
from autotrain.config.trainers import TRAINERS
from autotrain.errors import EXIT_BAD_INPUT, eprint


def run_training(
    config_path: Path | None,
    sets: list[str] | None,
    dry_run: bool,
    resume: str | None = None,
    overwrite: bool = False,
    expected_task: str | None = None,
    preview: int | None = None,
    accept_changes: bool = False,
) -> None:
    """Shared body of every training command; raises typer.Exit with the documented code."""
    from autotrain.config.load import load_config
    from autotrain.errors import ConfigError

    if config_path is None:
        raise fail("missing --config FILE (try `autotrain init llm` for a template)", EXIT_BAD_INPUT)
    if accept_changes and not resume:
        raise fail("--accept-changes goes with --resume: it accepts a resumed run's changed config", EXIT_BAD_INPUT)
    try:
        loaded = load_config(config_path, sets or [], expected_task=expected_task)
    except ConfigError as exc:
        raise report_config_error(exc, config_path) from None
    for notice in loaded.notices:
        eprint(f"note: {notice}")

    if preview is not None:
        _preview(loaded, preview)
    if dry_run:
        _dry_run(loaded, sets or [])

    benchmark = _benchmark_here(loaded.config)
    if benchmark:
        _check_benchmark(loaded.config)
    from autotrain.run.runner import run

    code = run(loaded, resume=resume, overwrite=overwrite, argv_sets=sets or [], accept_changes=accept_changes)
    if benchmark and code == 0:
        from autotrain.inference.benchmark import benchmark_after_training

        code = benchmark_after_training(Path(loaded.config.project_name), loaded.config, eprint)
    # Exempt the (large) heap of torch/transformers objects from the collector's final passes: it saves
    # about a second of interpreter shutdown. Exit handlers still run.
    import gc

    gc.freeze()
    raise typer.Exit(code)


def _options(
    config: Path = ConfigOption,
    set_: list[str] = SetOption,
    dry_run: bool = DryRunOption,
    resume: str = ResumeOption,
    overwrite: bool = OverwriteOption,
    preview: int = PreviewOption,
    accept_changes: bool = AcceptChangesOption,
) -> None:
    """The training commands' options, listed once: `with_training_options` gives them to a command."""


def with_training_options(command):
    """`command(own parameters..., **options)` as typer reads it: its own parameters, then every training
    option; `options` arrives with the names of `_options` (`autotrain --config F` and `autotrain llm` take
    the same ones)."""
    own = inspect.signature(command, eval_str=True).parameters.values()
    shared = inspect.signature(_options, eval_str=True).parameters.values()
    command.__signature__ = inspect.Signature([p for p in own if p.kind is not p.VAR_KEYWORD] + list(shared))
    return command


def train_with(options: dict, task: str | None) -> None:
    """Run a training command's `options` (`task`: the command's task; None: the config's `task:`)."""
    run_training(
        options["config"],
        options["set_"],
        options["dry_run"],
        options["resume"],
        options["overwrite"],
        task,
        options["preview"],
        options["accept_changes"],
    )


def make_command(task: str):
    @with_training_options
    def command(**options) -> None:
        train_with(options, task)

    spec = TASKS[task]
    choices = TRAINERS if task == "llm" else spec.trainers
    command.__doc__ = spec.help + (f" (trainer: {', '.join(choices)})." if choices else ".")
    return command


def _benchmark_here(cfg) -> bool:
    """The config asks for benchmarks and this process runs them: the one the user started on machine 0, not
    a rank a launcher started (it ends before the trained model is saved whole)."""
    import os

    from autotrain.run.launch import LAUNCHED_ENV

    launched = os.environ.get(LAUNCHED_ENV) is not None
    return getattr(cfg, "benchmark", None) is not None and not launched and cfg.distributed.machine_rank == 0


def _check_benchmark(cfg) -> None:
    """Before training: the benchmark extra is installed and its tasks exist (exit 2 otherwise)."""
    from autotrain.errors import UserInputError
    from autotrain.inference.benchmark import check_config

    try:
        check_config(cfg)
    except UserInputError as exc:
        raise fail(str(exc)) from None


def _dry_run(loaded, sets: list[str]) -> None:
    """Resolve the plan and run every check that needs no weights; print the plan, then every problem (exit 2)."""
    from autotrain.config.interpolate import redact
    from autotrain.errors import UserInputError
    from autotrain.run.dry_run import print_plan
    from autotrain.run.fit import planned
    from autotrain.run.preflight import preflight

    try:
        plan = planned(loaded.config, loaded.config.hub.token)
    except UserInputError as exc:  # early stopping without evaluations, ...
        raise fail(str(exc), EXIT_BAD_INPUT) from None
    found = preflight(loaded.config, plan)
    # a line may name a path or a repository a `${SECRET}` went into
    problems = [redact(line, loaded.secrets) for line in found.problems]
    for note in found.notes:
        eprint(f"note: {redact(note, loaded.secrets)}")
    print_plan(loaded, plan, sets, problems)
    for problem in problems:
        eprint(f"error: {problem}")
    raise typer.Exit(EXIT_BAD_INPUT if problems else 0)


def _preview(loaded, count: int) -> None:
    """Print the first `count` training examples as the trainer will see them; exit 0 (2: bad data)."""
    from autotrain.config.interpolate import redact
    from autotrain.errors import UserInputError
    from autotrain.run.fit import planned
    from autotrain.run.preview import preview_lines, preview_record

    cfg = loaded.config
    try:
        record = preview_record(cfg, planned(cfg, cfg.hub.token), count, cfg.hub.token)
    except UserInputError as exc:
        raise fail(redact(str(exc), loaded.secrets), EXIT_BAD_INPUT) from None
    print(redact("\n".join(preview_lines(record)), loaded.secrets))
    raise typer.Exit(0)

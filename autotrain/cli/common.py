"""Helpers shared by the commands: printing config errors and exit codes."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.core import TyperCommand, TyperGroup

from autotrain.errors import EXIT_BAD_INPUT, eprint
from autotrain.hints import missing_path_hint


def _bare_flags(params: list) -> list:
    """On/off options take no value: list them in help as `--dry-run`, not `--dry-run <bool>` (which reads
    as if `--dry-run true` were needed)."""
    for param in params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    return params


class Command(TyperCommand):
    def get_params(self, ctx):
        return _bare_flags(super().get_params(ctx))


class Group(TyperGroup):
    def get_params(self, ctx):
        return _bare_flags(super().get_params(ctx))


def with_mount_hint(issue, path: Path | None):
    """`issue`, and where it is about the config file `path` that is missing in the Docker image with no folder
    mounted at /workspace, why: the user's folder was not mounted (autotrain.hints)."""
    hint = missing_path_hint(path) if path is not None and issue.source == str(path) else None
    if hint:
        issue.message = f"{issue.message}; {hint}"
    return issue


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print `error: message` and return the Exit to raise."""
    eprint(f"error: {message}")
    return typer.Exit(code)


def report_config_error(error, path: Path | None = None) -> typer.Exit:
    """Print each issue of a ConfigError (of the config file `path`) and return the Exit to raise."""
    for issue in error.issues:
        eprint(with_mount_hint(issue, path).format())
    count = len(error.issues)
    eprint(f"{count} problem{'s' if count != 1 else ''} found; nothing was run.")
    return typer.Exit(EXIT_BAD_INPUT)


def _valued(*flags: str, help: str, metavar: str, **kwargs):
    """An option that takes a value and has no default to show (None when not given)."""
    return typer.Option(None, *flags, help=help, show_default=False, metavar=metavar, **kwargs)


ConfigOption = _valued("--config", "-c", help="Path to the YAML config.", metavar="FILE")
SetOption = _valued(
    "--set", help="Override a config value: --set training_args.lr=1e-4 (repeatable).", metavar="KEY=VALUE"
)
DryRunOption = typer.Option(False, "--dry-run", help="Validate, print the resolved plan and exit without training.")
ResumeOption = _valued(
    "--resume",
    help="Resume from the latest complete checkpoint in the project folder, or from the checkpoint PATH given.",
    metavar="[PATH]",
)
OverwriteOption = typer.Option(False, "--overwrite", help="Replace an existing run in project_name.")
AcceptChangesOption = typer.Option(
    False,
    "--accept-changes",
    help="With --resume: continue although the config differs from the run's (each difference is listed); the "
    "new values apply from the resumed step and run.json records them.",
)
PreviewOption = _valued(
    "--preview",
    help="Print the first N training examples as the trainer sees them (loss marks, truncation) and exit "
    "(N defaults to 5).",
    metavar="[N]",
    min=1,
    max=1000,
)

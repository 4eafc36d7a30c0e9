"""Entry point: `autotrain COMMAND ...` or `autotrain --config F` (dispatch on the config's `task:`)."""

from __future__ import annotations

import sys

import typer

from autotrain import __version__
from autotrain.cli import app as webapp
from autotrain.cli import env, export, inference, launch, migrate, templates, train, validate
from autotrain.cli.common import (
    Command,
    Group,
)
from autotrain.cli.ending import skip_teardown
from autotrain.config.tasks import TASKS
from autotrain.errors import EXIT_FAILURE, debug_enabled, eprint

app = typer.Typer(
    name="autotrain",
    help="Fine-tune LLMs, text and image classifiers from one checked YAML file.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    cls=Group,
)

for _task in TASKS:  # one training command per task of the task table
    app.command(_task, cls=Command)(train.make_command(_task))
app.command("validate", cls=Command)(validate.validate)
app.command("init", cls=Command)(templates.init)
app.command("schema", cls=Command)(templates.schema)
app.command("migrate", cls=Command)(migrate.migrate)
app.command("env", cls=Command)(env.env)
app.command("chat", cls=Command)(inference.chat)
app.command("predict", cls=Command)(inference.predict)
app.command("evaluate", cls=Command)(inference.evaluate)
app.command("export", cls=Command)(export.export)
app.command("app", cls=Command)(webapp.app)
app.command("launch", cls=Command)(launch.launch)


def _version(value: bool) -> None:
    if value:
        print(f"autotrain {__version__}")
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
@train.with_training_options
def root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    **options,
) -> None:
    """Fine-tune LLMs, text and image classifiers from one checked YAML file.

    `autotrain --config F` runs the task named by the config's `task:` key.
    """
    if ctx.invoked_subcommand is not None:
        if options["config"] is not None:
            raise typer.BadParameter("give --config after the command: autotrain llm --config F", param_hint="--config")
        return
    if options["config"] is None:
        print(ctx.get_help())
        raise typer.Exit(0)
    train.train_with(options, None)


BARE_VALUES = {"--resume": "latest", "--preview": "5"}  # what these options mean standing alone
# Commands that write nothing: once they are done, the process may end without tearing down the
# interpreter's modules, which after importing torch, transformers and TRL takes about a second by itself.
READ_ONLY = {"--dry-run", "--preview"}


def _launched_rank() -> bool:
    """Whether this process is a rank of a run `autotrain` launched. Its run is over (results written, its
    process group torn down), and the C++ teardown at the interpreter's exit now and then aborted a finished
    rank (gloo / the rendezvous store's threads: `terminate called without an active exception`, exit -6),
    which failed a run that had trained; so a rank ends as the read-only commands do (`skip_teardown`)."""
    import os

    from autotrain.run.process import ACCELERATE_LAUNCHED, LAUNCHED_ENV

    return os.environ.get(LAUNCHED_ENV) == ACCELERATE_LAUNCHED


def _is_the_program() -> bool:
    """Whether this `main` is the program's entry (the console script's or `python -m`'s `__main__` holds it),
    not one called by other code in a process that goes on (a test), whose exit is its own."""
    return getattr(sys.modules.get("__main__"), "main", None) is main


def _resume_value(argv: list[str]) -> list[str]:
    """Let `--resume` stand alone (= latest checkpoint) as well as take a PATH; `--preview` alone is 5."""
    out = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg in BARE_VALUES and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            out.append(BARE_VALUES[arg])
    return out


def main() -> None:
    """Console-script entry: turns any unexpected exception into one line and exit code 1."""
    argv = _resume_value(sys.argv[1:])
    try:
        app(args=argv, prog_name="autotrain")
    except KeyboardInterrupt:
        eprint("interrupted")
        sys.exit(130)
    except SystemExit as done:
        if "torch" in sys.modules and (READ_ONLY & set(argv) or _launched_rank()) and _is_the_program():
            skip_teardown(done.code)
        raise
    except Exception as exc:  # the last line of defence: never a traceback for the user
        if debug_enabled():
            raise
        eprint(f"error: {type(exc).__name__}: {exc}")
        eprint("(set AUTOTRAIN_DEBUG=1 for the full traceback)")
        sys.exit(EXIT_FAILURE)


if __name__ == "__main__":
    main()

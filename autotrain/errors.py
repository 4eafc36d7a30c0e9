"""Exit codes and the errors a user sees: the bottom of the package, importing nothing from autotrain.

Every layer raises these; only the command line turns them into output and an exit code.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

# Documented exit codes (README, "Exit codes").
EXIT_OK = 0
EXIT_FAILURE = 1  # failure during training; the traceback goes to project_name/logs/
EXIT_BAD_INPUT = 2  # config mistake, bad usage or bad input data
EXIT_DIVERGED = 3  # a non-finite loss with nan_policy: halt
EXIT_PARITY = 4  # `autotrain export`: the exported model does not answer like the trained one
EXIT_OUT_OF_MEMORY = 5  # the run ran out of memory (GPU or CPU); a checkpoint is saved when one can be
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


@dataclass
class ConfigIssue:
    """One mistake in a config: where it is and what is wrong."""

    path: tuple[str | int, ...]
    message: str
    line: int | None = None  # 1-based
    col: int | None = None  # 1-based
    source: str | None = None  # file name, or "--set" for command-line overrides

    @property
    def dotted(self) -> str:
        return ".".join(str(p) for p in self.path) or "<root>"

    def format(self) -> str:
        where = self.source or "<config>"
        if self.line is not None:
            where += f":{self.line}:{self.col or 1}"
        elif where == "--set" or where == f"--set {self.dotted}":
            # From the command line: `--set training_args.lr: message`, the path said once.
            return f"--set {self.dotted}: {self.message}" if self.path else f"{where}: {self.message}"
        return f"{where}: {self.dotted}: {self.message}"


@dataclass
class ConfigError(Exception):
    """Raised with every issue found in one config; the CLI prints them and exits 2."""

    issues: list[ConfigIssue] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(issue.format() for issue in self.issues)


class UserInputError(Exception):
    """Bad input that is not a config mistake (missing data column, unreadable file, ...): exit code 2."""

    @property
    def lines(self) -> list[str]:
        """What the user is told, one `error:` line each."""
        return [str(self)]


class UserInputErrors(UserInputError):
    """Several problems found at once (the preflight's): one line each, as the dry run prints them."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = list(problems)

    @property
    def lines(self) -> list[str]:
        return self.problems


class ParityError(Exception):
    """An export whose parity check failed: the artifact is kept under a `.failed` name, exit code 4."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in commands that clean up on the way out as they do for Ctrl-C (an export's lock and
    staging folder, predict's partial file): exit code 143 (cli/inference.py)."""

    exit_code = EXIT_SIGTERM


def debug_enabled() -> bool:
    """`AUTOTRAIN_DEBUG=1`: show tracebacks and library logs."""
    return os.environ.get("AUTOTRAIN_DEBUG", "") not in ("", "0", "false", "False")


def eprint(message: str) -> None:
    """A line for the user on stderr (stdout stays for results: `--dry-run`'s config, `schema`, ...)."""
    print(message, file=sys.stderr, flush=True)

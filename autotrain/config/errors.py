"""Config errors that point at a file, a line and a field, all reported at once."""

from __future__ import annotations

from dataclasses import dataclass, field


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
        return f"{where}: {self.dotted}: {self.message}"


@dataclass
class ConfigError(Exception):
    """Raised with every issue found in one config; the CLI prints them and exits 2."""

    issues: list[ConfigIssue] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(issue.format() for issue in self.issues)


class UserInputError(Exception):
    """Bad input that is not a config mistake (missing data column, unreadable file, ...): exit code 2."""

"""Read YAML safely while remembering where every key and value sits in the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autotrain.config.errors import ConfigError, ConfigIssue

Path_ = tuple[str | int, ...]


class Locator:
    """Maps a field path such as ("training_args", "lr") to the line and column it came from."""

    def __init__(self, source: str, marks: dict[Path_, tuple[int, int]] | None = None):
        self.source = source
        self.marks = marks or {}
        # Paths set on the command line, reported as coming from `--set`.
        self.overridden: set[Path_] = set()
        # Paths renamed while translating another config format: native path -> original path.
        self.renamed: dict[Path_, Path_] = {}

    def issue(self, path: Path_, message: str) -> ConfigIssue:
        path = tuple(path)
        for n in range(len(path), -1, -1):
            prefix = path[:n]
            if prefix in self.overridden:
                return ConfigIssue(path, message, source="--set " + ".".join(map(str, prefix)))
            original = self.renamed.get(prefix, prefix)
            if original in self.marks:
                line, col = self.marks[original]
                return ConfigIssue(path, message, line, col, self.source)
            # A section that is not in the file was created by a `--set` below it.
            created = sorted(p for p in self.overridden if n and p[:n] == prefix)
            if created:
                return ConfigIssue(path, message, source="--set " + ".".join(map(str, created[0])))
        return ConfigIssue(path, message, source=self.source)


def _walk(node: yaml.Node, path: Path_, marks: dict[Path_, tuple[int, int]]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            marks[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _walk(value_node, path + (key,), marks)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            marks[path + (i,)] = (item.start_mark.line + 1, item.start_mark.column + 1)
            _walk(item, path + (i,), marks)


def parse_yaml(text: str, source: str) -> tuple[Any, Locator]:
    """Parse YAML with the safe loader; a syntax error becomes a ConfigError with its position."""
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        message = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise ConfigError([ConfigIssue((), message, line, col, source)]) from None
    marks: dict[Path_, tuple[int, int]] = {}
    if node is not None:
        marks[()] = (node.start_mark.line + 1, node.start_mark.column + 1)
        _walk(node, (), marks)
    return data, Locator(source, marks)


def read_yaml(path: str | Path) -> tuple[Any, Locator]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([ConfigIssue((), "config file not found", source=str(path))]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([ConfigIssue((), f"cannot read config: {exc}", source=str(path))]) from None
    return parse_yaml(text, str(path))

"""`--set key.path=value` overrides, applied to the raw config before it is validated."""

from __future__ import annotations

from typing import Any

import yaml

from autotrain.config.errors import ConfigIssue


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """Split `a.b.c=value`; the value is read as a YAML scalar (so `1e-4` is a number, `null` is None)."""
    if "=" not in text:
        raise ValueError(f"`--set {text}`: expected KEY.PATH=VALUE")
    key, raw = text.split("=", 1)
    parts = tuple(p for p in key.strip().split("."))
    if not all(parts):
        raise ValueError(f"`--set {text}`: empty key in `{key}`")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_overrides(data: dict, overrides: list[str]) -> tuple[dict, list[tuple[str, ...]], list[ConfigIssue]]:
    """Apply each override in order. Returns the new data, the paths set, and problems found."""
    paths: list[tuple[str, ...]] = []
    issues: list[ConfigIssue] = []
    for text in overrides:
        try:
            path, value = parse_override(text)
        except ValueError as exc:
            issues.append(ConfigIssue((), str(exc), source="--set"))
            continue
        node = data
        for i, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                dotted = ".".join(path[: i + 1])
                issues.append(
                    ConfigIssue(path, f"cannot set a key inside `{dotted}`, which is not a section", source="--set")
                )
                break
            node = child
        else:
            node[path[-1]] = value
            paths.append(path)
    return data, paths, issues

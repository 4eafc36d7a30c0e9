"""`--set key.path=value` overrides, applied to the raw config before it is validated."""

from __future__ import annotations

import re
from typing import Any

from autotrain.config.yaml_source import MAX_DEPTH, parse_value
from autotrain.errors import ConfigError, ConfigIssue

_KEY_PREFIX = re.compile(r"[A-Za-z0-9_.\-]*")


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """Split `a.b.c=value`; the value is read as YAML (so `1e-4` is a number, `null` is None).

    Errors never repeat the value: it may be a token.
    """
    if "=" not in text:
        shown = _KEY_PREFIX.match(text).group(0)
        rest = "..." if len(shown) < len(text) else ""
        raise ValueError(f"`--set {shown}{rest}`: expected KEY.PATH=VALUE (the rest is not shown: it may be a secret)")
    key, raw = text.split("=", 1)
    parts = tuple(p.strip() for p in key.strip().split("."))
    if not all(parts):
        raise ValueError(f"`--set {key}=...`: empty key in `{key}`")
    if len(parts) > MAX_DEPTH:
        raise ValueError(f"`--set {key[:40]}...=...`: more than {MAX_DEPTH} keys deep")
    if not raw.strip():
        return parts, None
    try:
        return parts, parse_value(raw, f"--set {key}")
    except ConfigError as exc:
        if any("YAML" in issue.message and "invalid" in issue.message for issue in exc.issues):
            return parts, raw  # not YAML: taken as the text it is (`--set data.path=a:b`)
        raise ValueError(f"`--set {key}=...`: {exc.issues[0].message}") from None


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

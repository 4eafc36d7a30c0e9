"""`${VAR}` and `${VAR:-default}` interpolation from the environment, with secret tracking."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|_KEY$|^KEY$", re.IGNORECASE)
# Keys whose values are always treated as secrets, wherever they were written.
SECRET_KEYS = {"token", "hf_token", "api_key", "password", "secret"}

REDACTED = "***"


def interpolate(data: Any, environ: Mapping[str, str] | None = None) -> tuple[Any, list[tuple[tuple, str]], set[str]]:
    """Replace `${VAR}` in every string value.

    Returns the new data, a list of (path, message) for unset variables, and the set of values that came
    from secret-looking variables (so they can be redacted from anything printed or saved).
    """
    env = os.environ if environ is None else environ
    problems: list[tuple[tuple, str]] = []
    secrets: set[str] = set()

    def substitute(value: str, path: tuple) -> str:
        def one(match: re.Match) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                result = env[name]
            elif default is not None:
                result = default
            else:
                problems.append((path, f"environment variable `{name}` is not set (and no `${{{name}:-default}}`)"))
                return ""
            if _SECRET_NAME.search(name) and result:
                secrets.add(result)
            return result

        return _PATTERN.sub(one, value)

    def walk(node: Any, path: tuple) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, path + (k,)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, path + (i,)) for i, v in enumerate(node)]
        if isinstance(node, str) and "${" in node:
            return substitute(node, path)
        return node

    return walk(data, ()), problems, secrets


def redact(data: Any, secrets: set[str]) -> Any:
    """A copy of `data` with secret values (and any value under a secret key) replaced by `***`."""

    def walk(node: Any, key: str | None) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, key) for v in node]
        if isinstance(node, str):
            if node and key is not None and key.lower() in SECRET_KEYS:
                return REDACTED
            for secret in secrets:
                if secret and secret in node:
                    node = node.replace(secret, REDACTED)
        return node

    return walk(data, None)

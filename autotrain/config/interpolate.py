"""`${VAR}` and `${VAR:-default}` interpolation from the environment, with secret tracking."""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from typing import Any

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|_KEY$|^KEY$", re.IGNORECASE)
# Keys whose values are always treated as secrets, wherever they were written.
SECRET_KEYS = {"token", "hf_token", "api_key", "password", "secret"}

REDACTED = "***"


def interpolate(
    data: Any, environ: Mapping[str, str] | None = None, optional: Collection[tuple] = ()
) -> tuple[Any, list[tuple[tuple, str]], set[str]]:
    """Replace `${VAR}` and `${VAR:-default}` in every string value; `$${` writes a literal `${`.

    Defaults may hold variables themselves (`${A:-${B:-x}}`). Returns the new data, a list of
    (path, message) for unset variables and malformed references, and the set of values that came from
    secret-looking variables (so they can be redacted from anything printed or saved). A value at a path
    in `optional` whose variable is unset becomes None instead of an error.
    """
    env = os.environ if environ is None else environ
    problems: list[tuple[tuple, str]] = []
    secrets: set[str] = set()

    def walk(node: Any, path: tuple) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, path + (k,)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, path + (i,)) for i, v in enumerate(node)]
        if isinstance(node, str) and "${" in node:
            try:
                return _Substitution(env, secrets).expand(node)
            except _Unset as exc:
                if isinstance(exc, _Missing) and path in optional:
                    return None
                problems.append((path, str(exc)))
                return ""
        return node

    return walk(data, ()), problems, secrets


class _Unset(ValueError):
    pass


class _Missing(_Unset):
    """The variable is not set (as opposed to a malformed reference)."""


class _Substitution:
    """A small left-to-right reader of `${NAME}`, `${NAME:-default}` and `$${` in one string."""

    def __init__(self, env: Mapping[str, str], secrets: set[str]):
        self.env, self.secrets = env, secrets

    def expand(self, text: str) -> str:
        out, i = [], 0
        while i < len(text):
            if text.startswith("$${", i):
                out.append("${")
                i += 3
            elif text.startswith("${", i):
                end = _closing_brace(text, i + 2)
                out.append(self._reference(text[i + 2 : end]))
                i = end + 1
            else:
                out.append(text[i])
                i += 1
        return "".join(out)

    def _reference(self, inner: str) -> str:
        name, sep, default = inner.partition(":-")
        if not _NAME.fullmatch(name):
            raise _Unset(f"`${{{inner}}}` is not a variable reference; write `$${{` for a literal `${{`")
        if name in self.env:
            result = self.env[name]
        elif sep:
            result = self.expand(default)
        else:
            raise _Missing(f"environment variable `{name}` is not set (and no `${{{name}:-default}}`)")
        if _SECRET_NAME.search(name) and result:
            self.secrets.add(result)
        return result


def _closing_brace(text: str, start: int) -> int:
    depth = 1
    for i in range(start, len(text)):
        if text.startswith("${", i):
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    raise _Unset("`${` without its closing `}`; write `$${` for a literal `${`")


def secret_values(data: Any) -> set[str]:
    """Values stored under secret keys (`hub.token`, ...) wherever they came from (file, `--set`, env)."""
    found: set[str] = set()
    stack = [(data, None)]
    while stack:
        node, key = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, key) for v in node)
        elif isinstance(node, str) and node and key is not None and key.lower() in SECRET_KEYS:
            found.add(node)
    return found


def redact(data: Any, secrets: set[str]) -> Any:
    """A copy of `data` with secret values (and any value under a secret key) replaced by `***`, in the keys of
    mappings too (run.json's data fingerprint is keyed by the data's file paths)."""

    def walk(node: Any, key: str | None) -> Any:
        if isinstance(node, dict):
            return {walk(k, None) if isinstance(k, str) else k: walk(v, str(k)) for k, v in node.items()}
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

"""What a chat row's `messages` value must be: a list of {role, content} mappings.

datasets' JSON reader writes every value of a column as JSON text when the column holds a list in some rows
and text in others; such a value is read back as the list it was, so the row named as wrong is the one that
held text.
"""

from __future__ import annotations

import contextlib
import json


def is_messages(value) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in value)


def as_messages(value):
    """`value`, or the message list its JSON text holds (any other value is returned as it is)."""
    if isinstance(value, str) and value.startswith("[{"):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        return decoded if is_messages(decoded) else value
    return value


def not_messages(row: int, column: str, value) -> str:
    """The message for a row whose `column` is not a message list (text as it was before datasets wrote it
    as JSON text)."""
    if isinstance(value, str) and len(value) > 1 and value[0] == value[-1] == '"':
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return (
        f"row {row} (counting from 0), column `{column}`: must be a list of {{role, content}} messages; "
        f"it holds {type(value).__name__} {shown}"
    )

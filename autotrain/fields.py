"""Field types that take a YAML value only when it means what it says.

YAML 1.1 reads `yes`, `on` and `true` as booleans, and pydantic's lax mode would then turn a boolean into
1 or 1.0 (`lr: yes` became a learning rate of 1.0), or a string such as `"y"` or `"1"` into `true`
(`trust_remote_code: "y"`). Numbers here refuse booleans, and booleans take only `true` / `false` (or
those words as text, which is what `${VAR}` interpolation produces). Non-finite floats are refused by
`allow_inf_nan=False` on the models that use these types.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema, WrapValidator


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected a number, not `true`/`false` (YAML also reads yes/no/on/off as those)")
    return value


def _only_bool(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("expected `true` or `false`")


Int = Annotated[int, BeforeValidator(_not_bool)]
Float = Annotated[float, BeforeValidator(_not_bool)]
Bool = Annotated[bool, BeforeValidator(_only_bool)]


def _no_as_word(value: Any) -> Any:
    """`mixed_precision: no` and `eval_strategy: no`: YAML 1.1 reads the word as `false`; take it back."""
    return "no" if value is False else value


NoWord = BeforeValidator(_no_as_word)


# A size in bytes: a whole number, or a number with a unit (`12GB`, `12 GiB`, `1.5TB`, `512MiB`): decimal
# units are powers of 1000, binary ones (`KiB`, `MiB`, ...) powers of 1024.
SIZE_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
SIZE_UNITS.update({"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40})
SIZE_HELP = "a size such as `12GB`, `12GiB`, `1.5TB` or a number of bytes"


def parse_size(value: Any) -> int:
    """`value` in bytes; ValueError for anything that is not a size."""
    import re

    if isinstance(value, bool):
        raise ValueError(f"expected {SIZE_HELP}, not `true`/`false`")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)?\s*", value) if isinstance(value, str) else None
    unit = (found.group(2) or "B").upper() if found else None
    if found is None or unit not in SIZE_UNITS:
        raise ValueError(f"expected {SIZE_HELP}")
    return int(float(found.group(1)) * SIZE_UNITS[unit])


ByteSize = Annotated[int, BeforeValidator(parse_size)]


MAX_BATCH = 1_048_576


def _auto_or_number(value: Any, handler) -> int | str:
    """`auto` as it is; anything else validated as the number it must then be (its own messages)."""
    if isinstance(value, str) and value.strip() == "auto":
        return "auto"
    if isinstance(value, str) and not value.strip().isdigit():
        raise ValueError("expected a number of samples, or `auto`")
    return handler(value)


# `batch_size`: a whole number of samples, or `auto` (what fits in memory: autotrain.training.batch_size)
BatchSize = Annotated[
    Int,
    Field(ge=1, le=MAX_BATCH),
    WrapValidator(_auto_or_number),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_BATCH}, {"const": "auto"}]}),
]

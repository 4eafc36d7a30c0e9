"""Field types that take a YAML value only when it means what it says.

YAML 1.1 reads `yes`, `on` and `true` as booleans, and pydantic's lax mode would then turn a boolean into
1 or 1.0 (`lr: yes` became a learning rate of 1.0), or a string such as `"y"` or `"1"` into `true`
(`trust_remote_code: "y"`). Numbers here refuse booleans, and booleans take only `true` / `false` (or
those words as text, which is what `${VAR}` interpolation produces). Non-finite floats are refused by
`allow_inf_nan=False` on the models that use these types.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


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

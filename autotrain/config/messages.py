"""pydantic's errors in this project's words: one plain line per mistake, no library wording.

pydantic says "Input should be a valid integer, unable to parse string as an integer"; a person wants "must
be a whole number (got `four`)". One table maps each error type to a sentence, filled from the error's
context; a fixed-length tuple says how many values it takes, and a value that fits none of a union's types
is one line naming what it may be. Kinds not in the table (bounds: "greater than 0") keep pydantic's text,
with "Input should be" said as "must be". An unknown key names the nearest key the config can hold.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from autotrain.config.interpolate import SECRET_KEYS
from autotrain.config.suggest import did_you_mean, key_hint, key_target

# pydantic error types of the issues the rules (config/rules.py) raise: their message is final (shown as is).
RULE_ERROR = "cross_field"
OPTIMIZER_ARGS_ERROR = "optimizer_args"

# pydantic error type -> the message; `{name}` is filled from the error's ctx.
PLAIN = {
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "bool_parsing": "expected `true` or `false`",
    "bool_type": "expected `true` or `false`",
    "string_type": "must be text",
    "invalid_key": "a key must be a name",
    "dict_type": "must be a mapping of `key: value` lines",
    "model_type": "must be a mapping of `key: value` lines",
    "model_attributes_type": "must be a mapping of `key: value` lines",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "too_short": "expects at least {min_length} values, got {actual_length}",
    "too_long": "expects at most {max_length} values, got {actual_length}",
    "string_too_short": "must be at least {min_length} characters long",
    "string_too_long": "must be at most {max_length} characters long",
}
# Union members as pydantic names them in an error's location -> what a value of that member is.
_MEMBERS = {
    "str": "text",
    "int": "a whole number",
    "float": "a number",
    "bool": "`true` or `false`",
    "list[str]": "a list of text",
    "list[int]": "a list of whole numbers",
    "dict[str,str]": "a mapping of names",
    # optimizer_args: a mapping as given, the optimizer's typed arguments once validated
    "dict[str,any]": "a mapping of `key: value` lines",
    "BaseModel": "a mapping of `key: value` lines",
}
_NOUNS = {int: "whole numbers", float: "numbers", str: "texts", bool: "`true` / `false` values"}


def plain(err: dict, model: type[BaseModel] | None = None) -> str:
    """The message for one pydantic error (without the `(got ...)` suffix); `model` finds tuple lengths."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind in ("tuple_type", "too_short", "too_long") and model is not None:
        fixed = fixed_tuple(field_at(model, tuple(err["loc"])), err.get("input"))
        if fixed:
            return fixed
    if kind in PLAIN:
        try:
            return PLAIN[kind].format(**ctx)
        except (KeyError, IndexError):
            pass
    message = str(err["msg"]).removeprefix("Value error, ")
    return message.replace("Input should be", "must be", 1)


def fixed_tuple(field: FieldInfo | None, given: Any = None) -> str | None:
    """`expects a list of 3 numbers, got 2 (default: [0.9, 0.999, 0.9999])` for a tuple[float, float, float]
    field (Annotated members included), else None."""
    annotation = _strip(field.annotation) if field is not None else None
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is not tuple or not args or Ellipsis in args:
        return None
    kinds = {_base(a) for a in args}
    noun = _NOUNS.get(kinds.pop()) if len(kinds) == 1 else None
    message = f"expects a list of {len(args)} {noun or 'values'}"
    if isinstance(given, (list, tuple)):
        message += f", got {len(given)}"
    if isinstance(field.default, tuple):
        message += f" (default: [{', '.join(map(str, field.default))}])"
    return message


def union_members(errors: list[dict]) -> dict[tuple, list[dict]]:
    """Errors of a value that fits none of a union's types, grouped by the value's location.

    pydantic reports one error per member, its location ending in the member's name (`str`, `list[str]`).
    """
    groups: dict[tuple, list[dict]] = {}
    for err in errors:
        loc = tuple(err["loc"])
        if loc and isinstance(loc[-1], str) and _is_member(loc[-1]):
            groups.setdefault(loc[:-1], []).append(err)
    return {loc: group for loc, group in groups.items() if len(group) > 1}


def without_members(errors: list[dict], model: type[BaseModel]) -> list[dict]:
    """The errors with a union member's name taken out of their location where the value was of that member's
    kind: `peft.target_modules.0` for a number in the list given to `str | list[str]`, not
    `peft.target_modules.list[str].0` beside `peft.target_modules.str`. A value of no member's kind keeps one
    error per member, for `union_members` to say in one line."""
    at = [_member_index(model, tuple(err["loc"])) for err in errors]
    inside = {
        tuple(err["loc"])[:i] for err, i in zip(errors, at, strict=True) if i is not None and len(err["loc"]) > i + 1
    }
    kept = []
    for err, i in zip(errors, at, strict=True):
        loc = tuple(err["loc"])
        if i is None or loc[:i] not in inside:
            kept.append(err)
        elif len(loc) > i + 1:  # the value is of this member's kind: its errors are the value's
            kept.append({**err, "loc": loc[:i] + loc[i + 1 :]})
    return kept


def _member_index(model: type[BaseModel], loc: tuple) -> int | None:
    """Where in `loc` pydantic names the member of a union field it tried, if anywhere."""
    for i, part in enumerate(loc[1:], 1):
        if isinstance(part, str) and _is_member(part) and _is_union(annotation_at(model, loc[:i])):
            return i
    return None


def _is_union(annotation: Any) -> bool:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return False
    return len([a for a in typing.get_args(annotation) if a is not type(None)]) > 1


def union_message(group: list[dict]) -> str:
    kinds = [_MEMBERS.get(str(e["loc"][-1]).replace(" ", "")) for e in group]
    if all(kinds):
        return "must be " + " or ".join(dict.fromkeys(kinds))
    return "; or ".join(dict.fromkeys(plain(e) for e in group))


def annotation_at(model: type[BaseModel], loc: tuple) -> Any:
    """The annotation of the field at `loc` inside `model` (None where `loc` leaves the models)."""
    field = field_at(model, loc)
    return field.annotation if field is not None else None


def field_at(model: type[BaseModel], loc: tuple) -> FieldInfo | None:
    """The field at `loc` inside `model` (None where `loc` leaves the models)."""
    current: Any = model
    field = None
    for part in loc:
        inner = model_in(current)
        if inner is None or not isinstance(part, str) or part not in inner.model_fields:
            return None
        field = inner.model_fields[part]
        current = field.annotation
    return field


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (`X`, `X | None`, ...), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = model_in(arg)
        if found is not None:
            return found
    return None


def message(err: dict, model: type[BaseModel], suggest: bool = True) -> str:
    """The line for one pydantic error of a config of `model`; an unknown key gets the nearest valid one when
    `suggest` (a search each: load_config stops suggesting past a few hundred)."""
    kind, loc = err["type"], tuple(err["loc"])
    if kind == "extra_forbidden":
        known = _fields_at(model, loc[:-1])
        hint = key_hint(str(loc[-1]), loc[:-1], known, lambda path: _exists(model, path)) if suggest else ""
        return f"unknown key{hint}" + (f"; valid keys here: {', '.join(known)}" if known and len(known) <= 12 else "")
    if kind == "missing":
        return "required field is missing"
    if kind == OPTIMIZER_ARGS_ERROR:
        return err["msg"]  # says already what is wrong with which optimizer's argument
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'|(\d+)", err.get("ctx", {}).get("expected", ""))
        choices = [a or b for a, b in expected]
        return f"`{err['input']}` is not one of: {', '.join(choices)}{did_you_mean(str(err['input']), choices)}"
    return got(plain(err, model), err)


def got(text: str, err: dict) -> str:
    """`text (got `value`)`, unless the value is a section, a list or a secret."""
    loc = tuple(err["loc"])
    secret = any(str(part).lower() in SECRET_KEYS for part in loc)
    if "input" in err and not isinstance(err["input"], (dict, list)) and not secret:
        text += f" (got `{err['input']}`)"
    return text


def suggestion(err: dict, model: type[BaseModel]) -> str | None:
    """The key of the section an unknown key was probably meant to be (the first part of the path its message
    suggests: `output_dir` -> `project_name`, `datasets` -> `data`), if any."""
    loc = tuple(err["loc"])
    target = key_target(str(loc[-1]), loc[:-1], _fields_at(model, loc[:-1]), lambda path: _exists(model, path))
    return target[0] if target else None


@functools.lru_cache(maxsize=256)  # asked once per unknown key, and a config may hold thousands
def _fields_at(model: type[BaseModel], loc: tuple) -> tuple[str, ...]:
    """Field names of the pydantic model that sits at `loc` inside `model` (empty if none)."""
    inner = model_in(annotation_at(model, loc) if loc else model)
    return tuple(inner.model_fields) if inner is not None else ()


def _exists(model: type[BaseModel], path: tuple) -> bool:
    """Whether a config of `model` can hold a value at `path` (inside a mapping field, any key can)."""
    for n in range(1, len(path) + 1):
        annotation = annotation_at(model, path[:n])
        if annotation is None:
            return False
        if model_in(annotation) is None:
            return True
    return True


def _is_member(name: str) -> bool:
    return name in _MEMBERS or "[" in name or name in ("dict", "list", "tuple", "none")


def _strip(annotation: Any) -> Any:
    """`X` from `Annotated[X, ...]` and from `X | None`."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return _strip(args[0]) if len(args) == 1 else annotation
    return annotation


def _base(annotation: Any) -> Any:
    annotation = _strip(annotation)
    return annotation if isinstance(annotation, type) else None

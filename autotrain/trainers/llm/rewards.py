"""GRPO's reward functions: the built-in ones, and the user's own, found by `module:function` or
`path/to/file.py:function`.

A reward function takes the batch as TRL passes it (`prompts`, `completions`, and each other column of
the data as a list, `answer` for instance) and returns one float per completion (None: not scored).
Completions are strings, or message lists for chat prompts; the built-ins read either.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import numbers
import re
import sys
from collections.abc import Callable
from pathlib import Path

from autotrain.errors import UserInputError

# A number as people write them in answers: 1,234.5 or -3 or .5 (thousands separators dropped).
_NUMBER = re.compile(r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)")
_MARKED = re.compile(r"####\s*(" + _NUMBER.pattern + ")")  # GSM8K marks its final answer with ####


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))


def final_number(text: str) -> float | None:
    """The answer a text ends on: the number after `####` when there is one, else its last number."""
    marked = _MARKED.findall(text)
    found = marked or _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def answer_match(completions: list, answer: list, **_) -> list[float]:
    """1.0 where the completion's final number equals the reference answer's (GSM8K style), else 0.0."""
    rewards = []
    for completion, reference in zip(completions, answer, strict=True):
        wanted, got = final_number(str(reference)), final_number(_text(completion))
        rewards.append(1.0 if wanted is not None and got is not None and abs(wanted - got) < 1e-6 else 0.0)
    return rewards


def exact_match(completions: list, answer: list, **_) -> list[float]:
    """1.0 where the completion, stripped, equals the reference answer, stripped, else 0.0."""
    return [1.0 if _text(c).strip() == str(a).strip() else 0.0 for c, a in zip(completions, answer, strict=True)]


BUILTIN: dict[str, Callable] = {"answer_match": answer_match, "exact_match": exact_match}


def resolve(names: list[str], columns: list[str]) -> list[Callable]:
    """The reward functions `names` stand for; a clear error for a missing column, file or function."""
    functions = []
    for name in names:
        if name in BUILTIN:
            if "answer" not in columns:
                raise UserInputError(
                    f"reward `{name}` compares completions with an `answer` column, which the data lacks "
                    f"(it has: {', '.join(columns)}); map one with `data.column_mapping.answer`"
                )
            functions.append(BUILTIN[name])
        else:
            functions.append(checked(_import(name), name))
    return functions


def checked(function: Callable, name: str) -> Callable:
    """`function` with its answers checked on every call: one number or None per completion. A NaN, a
    string or a missing list is the reward's mistake, named here, not a crash deep in the trainer."""
    import functools
    import inspect

    if inspect.iscoroutinefunction(function):  # TRL runs these on its own event loop; it checks the length
        return function

    @functools.wraps(function)
    def scored(*args, completions: list, **kwargs):
        result = function(*args, completions=completions, **kwargs)
        return _rewards_of(result, len(completions), name)

    return scored


def _rewards_of(result, expected: int, name: str) -> list:
    def bad(what: str) -> UserInputError:
        return UserInputError(
            f"reward `{name}` returned {what}; a reward function returns one number per completion "
            f"({expected} here), or None for a completion it does not score"
        )

    if isinstance(result, (str, bytes, dict)) or not hasattr(result, "__len__"):
        raise bad(_shown(result))
    values = list(result)
    if len(values) != expected:
        raise bad(f"{len(values)} values")
    rewards = []
    for i, value in enumerate(values):
        number = _number(value)
        if value is not None and (number is None or not math.isfinite(number)):
            raise bad(f"{_shown(value)} for completion {i}")
        rewards.append(number)
    return rewards


def _number(value) -> float | None:
    if isinstance(value, numbers.Real):
        return float(value)
    item = getattr(value, "item", None)  # a numpy or torch scalar
    if callable(item) and getattr(value, "ndim", 1) == 0:
        number = item()
        return float(number) if isinstance(number, numbers.Real) else None
    return None


def _shown(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _import(name: str) -> Callable:
    where, _, attribute = name.rpartition(":")
    if where.endswith(".py"):
        path = Path(where).expanduser()
        if not path.is_file():
            raise UserInputError(f"reward `{name}`: no file `{path}`")
        spec = importlib.util.spec_from_file_location(f"autotrain_reward_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's own module failed to import: say where, not a traceback
            raise UserInputError(f"reward `{name}`: importing `{path}` failed: {type(exc).__name__}: {exc}") from exc
    else:
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))  # `module:function` finds modules in the working folder
        try:
            module = importlib.import_module(where)
        except Exception as exc:
            raise UserInputError(f"reward `{name}`: importing `{where}` failed: {type(exc).__name__}: {exc}") from exc
    function = getattr(module, attribute, None)
    if not callable(function):
        raise UserInputError(f"reward `{name}`: `{where}` has no function `{attribute}`")
    return function

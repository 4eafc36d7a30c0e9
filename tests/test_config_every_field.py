"""Every field of every task's config, given a value of every wrong YAML kind, through `autotrain validate`.

The fields are read from the schemas themselves (nested sections, list items and mapping values included, and
each optimizer's typed `optimizer_args`), so a field added tomorrow is covered. A value that the field takes
on its own (null for an optional field, a word for a text field) is skipped by asking the field's own type,
not by a list kept here. Each refused value must end in exit code 2 with one located line naming the field's
dotted path at its YAML line, and never in a traceback. A second test feeds random nested values (hypothesis)
under every top-level key: the answer is always exit 0 or 2.
"""

from __future__ import annotations

import copy
import functools
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from autotrain.config.paths import hub_id
from autotrain.config.tasks import TASKS, schema_of
from autotrain.config.trainers import TRAINERS
from autotrain.optimizers.table import OPTIMIZERS

ROOT = Path(__file__).resolve().parents[1]
# One value of each YAML kind: (the value, how it is written in flow style on the key's own line).
WRONG = {
    "list": ([1, 2], "[1, 2]"),
    "map": ({"wrong": 1}, "{wrong: 1}"),
    "text": ("wrong", "wrong"),
    "number": (7, "7"),
    "bool": (True, "true"),
    "null": (None, "null"),
}
SENTINEL = "WRONG_VALUE_HERE"
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
Path_ = tuple[str | int, ...]


def _bases() -> dict[str, dict]:
    """A valid config of every task (its first template) and of every LLM trainer (its template)."""
    bases = {task: spec.templates[0] for task, spec in TASKS.items() if spec.templates}
    bases |= {f"llm-{name}": spec.template for name, spec in TRAINERS.items()}
    configs = {key: yaml.safe_load((ROOT / "configs" / template).read_text()) for key, template in bases.items()}
    for config in configs.values():  # a template for the user's own file (clm: data/corpus.jsonl): a file here
        if hub_id(config["data"]["path"]) is None and not (ROOT / config["data"]["path"]).exists():
            config["data"]["path"] = "tests/assets/data/text.jsonl"
    return configs


BASES = _bases()


# --- the fields, from the schema ------------------------------------------------------------------------


def _unwrap(annotation: Any) -> Any:
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _members(annotation: Any) -> tuple:
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(m for a in typing.get_args(annotation) for m in _members(a))
    return (annotation,)


def _adapter(annotation: Any, metadata: list) -> TypeAdapter:
    return TypeAdapter(Annotated[(annotation, *metadata)] if metadata else annotation)


Walk = Iterator[tuple[Path_, TypeAdapter, list | None]]


def fields(model: type[BaseModel], prefix: Path_ = ()) -> Walk:
    """(path, the type a value there must have, the list an item sits in) for every field of `model`, its
    sections, list items and mapping values."""
    for name, field in model.model_fields.items():
        path = prefix + (name,)
        # A name the schema could not resolve (a class used above its definition) breaks every check that
        # reads the field's type on its own (the rules' typed view, the messages' lookups).
        assert "ForwardRef" not in repr(field.annotation), f"{model.__name__}.{name}: {field.annotation!r}"
        yield path, _adapter(field.annotation, field.metadata), None
        yield from _inside(field, path)


def _inside(field: FieldInfo, path: Path_) -> Walk:
    for member in _members(field.annotation):
        origin, args = typing.get_origin(member), typing.get_args(member)
        if isinstance(member, type) and issubclass(member, BaseModel) and member is not BaseModel:
            yield from fields(member, path)
        elif origin is list:
            yield path + (0,), TypeAdapter(args[0]), []
        elif origin is tuple and args and Ellipsis not in args:  # each item among the default's others
            given = list(field.default) if isinstance(field.default, tuple) else [0.5] * len(args)
            yield from ((path + (i,), TypeAdapter(arg), given) for i, arg in enumerate(args))
        elif origin is dict and _unwrap(args[1]) is not Any:
            yield path + ("key",), TypeAdapter(args[1]), None


def _valid(adapter: TypeAdapter, value: Any) -> bool:
    try:
        adapter.validate_python(value)
    except ValidationError:
        return False
    return True


@functools.cache
def cases(key: str) -> tuple[tuple[dict, Path_, str], ...]:
    return tuple(_cases(key))


def _cases(key: str) -> Iterator[tuple[dict, Path_, str]]:
    """(config, path, wrong value's kind) for every field of the `key` config and every kind it refuses.

    Each optimizer's `optimizer_args` are walked in the default LLM config (the same models for every task)."""
    base, task = BASES[key], BASES[key]["task"]
    walks = [(base, fields(schema_of(task)))]
    if key == "llm-clm":
        for name, spec in OPTIMIZERS.items():
            with_optimizer = _set(base, ("training_args", "optimizer"), name)
            walks.append((with_optimizer, fields(spec.args, ("training_args", "optimizer_args"))))
    for config, walk in walks:
        for path, adapter, items in walk:
            for kind, (value, _) in WRONG.items():
                if not _valid(adapter, value):
                    yield _set(config, path, SENTINEL, items), path, kind


def _set(config: dict, path: Path_, value: Any, items: list | None = None) -> dict:
    """A deep copy of `config` with `value` at `path` (sections made on the way; an item replaces its place in
    `items`)."""
    out = copy.deepcopy(config)
    node: Any = out
    for part, after in zip(path, path[1:], strict=False):
        kind = list if isinstance(after, int) else dict
        if isinstance(node, list):
            node.extend([None] * (part + 1 - len(node)))
        if not isinstance(node[part] if isinstance(node, list) else node.get(part), kind):
            node[part] = kind()
        node = node[part]
    if isinstance(node, list):
        node[:] = items or [None]
        node[path[-1]] = value
    else:
        node[path[-1]] = value
    return out


def _write(tmp_path: Path, n: int, config: dict, kind: str) -> tuple[Path, int]:
    """The config as a file, the wrong value written on the sentinel's line; (file, that line)."""
    text = yaml.dump(config, Dumper=_DUMPER, sort_keys=False, default_flow_style=False, width=10_000)
    lines = text.splitlines()
    line = next(i for i, one in enumerate(lines, 1) if SENTINEL in one)
    lines[line - 1] = lines[line - 1].replace(SENTINEL, WRONG[kind][1])
    path = tmp_path / f"c{n}.yml"
    path.write_text("\n".join(lines) + "\n")
    return path, line


# --- the tests ------------------------------------------------------------------------------------------


def test_the_walk_covers_every_task_trainer_section_and_item():
    """The walk is as wide as the brief: every task, every trainer, sections, list items and optimizer args."""
    assert {base["task"] for base in BASES.values()} == set(TASKS)
    assert {key.removeprefix("llm-") for key in BASES if key.startswith("llm-")} == set(TRAINERS)
    walked = {(key, ".".join(map(str, path))) for key in BASES for _, path, _ in cases(key)}
    for expected in (
        ("llm-clm", "distributed.fsdp.version"),
        ("llm-clm", "distributed.deepspeed.stage"),
        ("llm-grpo", "training_args.rewards.0"),
        ("llm-sft", "peft.target_modules.0"),
        ("llm-clm", "training_args.optimizer_args.came.betas.2"),
        ("llm-clm", "benchmark.tasks.0"),
        ("text-classification", "training_args.early_stopping.metric"),
        ("object-detection", "data.labels.0"),
        ("vlm", "data.column_mapping.key"),
    ):
        assert expected in walked, expected
    # A valid value is never fed: null for an optional field, a word for a text field.
    kinds = {(key, ".".join(map(str, path))): set() for key in BASES for _, path, _ in cases(key)}
    for key in BASES:
        for _, path, kind in cases(key):
            kinds[key, ".".join(map(str, path))].add(kind)
    assert "null" not in kinds["llm-clm", "revision"] and "text" not in kinds["llm-clm", "revision"]
    assert kinds["llm-clm", "training_args.lr"] == {"list", "map", "text", "bool", "null"}  # 7 is a valid lr


@pytest.mark.parametrize("key", sorted(BASES))
def test_every_wrong_value_of_every_field_is_one_located_line(cli, tmp_path, monkeypatch, key):
    monkeypatch.chdir(ROOT)  # the templates name tests/assets/... relative to the repository
    base = tmp_path / "base.yml"
    base.write_text(yaml.safe_dump(BASES[key], sort_keys=False))
    assert cli("validate", base).exit_code == 0

    written = [(*_write(tmp_path, n, config, kind), path, kind) for n, (config, path, kind) in enumerate(cases(key))]
    assert len(written) > 100
    # One `validate` of all the files: each is loaded, validated and reported on its own, as with one file.
    result = cli("validate", *(file for file, *_ in written))
    assert result.exit_code == 2, result.output[-2000:]
    assert "Traceback" not in result.output
    assert f"in {len(written)} of {len(written)} files" in result.output  # every file refused
    by_file: dict[str, list[str]] = {}
    for line in result.output.splitlines():
        by_file.setdefault(line.split(":", 1)[0], []).append(line)
    wrong = []
    for file, line, path, kind in written:
        dotted = ".".join(map(str, path))
        located = re.compile(rf"{re.escape(str(file))}:{line}:\d+: {re.escape(dotted)}[.:]")
        lines = by_file.get(str(file), [])
        if not any(located.match(one) for one in lines):
            wrong.append(f"{dotted} = {WRONG[kind][1]} (line {line}): {lines}")
    assert not wrong, f"{len(wrong)} of {len(written)} not located:\n" + "\n".join(wrong[:40])


def test_the_reported_config_is_one_located_line_not_a_crash(cli, tmp_path, monkeypatch):
    """`strategy: [fsdp]` beside `fsdp: {}` used to end in pydantic's `TypeAdapter[ForwardRef('FsdpConfig |
    None')] is not fully defined` (exit 1): the rules' typed view read a field whose class was declared below."""
    monkeypatch.chdir(ROOT)
    config = _set(BASES["llm-clm"], ("distributed",), {"strategy": ["fsdp"], "fsdp": {}})
    path = tmp_path / "c.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    line = path.read_text().splitlines().index("  strategy:") + 1
    result = cli("validate", path)
    assert result.exit_code == 2
    assert f"{path}:{line}:3: distributed.strategy: " in result.output


# --- random values --------------------------------------------------------------------------------------

_WORDS = ("${HF_TOKEN}", "${NOT_SET_ANYWHERE}", "${X:-y}", "~", "/", "../x", "a/b/c", "x.jsonl", "auto", "no", "fsdp")
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
    st.sampled_from(_WORDS),
)
_KEYS = st.one_of(st.text(max_size=8), st.integers(-3, 3), st.booleans(), st.none(), st.sampled_from(("fsdp", "lr")))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=12,
)


def _places(key: str) -> list[Path_]:
    """Every top-level key of the `key` config's task and every section path in it."""
    paths = {path[:1] for _, path, _ in cases(key)} | {path[:-1] for _, path, _ in cases(key) if len(path) > 1}
    return sorted(paths, key=str) + [("unknown_key",)]


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_values_anywhere_end_in_exit_0_or_2(cli, tmp_path, monkeypatch, data):
    monkeypatch.chdir(ROOT)
    key = data.draw(st.sampled_from(sorted(BASES)))
    changes = data.draw(st.dictionaries(st.sampled_from(_places(key)), _VALUES, min_size=1, max_size=3))
    config = BASES[key]
    for path, value in changes.items():
        config = _set(config, path, value)
    path = tmp_path / "random.yml"
    path.write_text(yaml.dump(config, Dumper=_DUMPER, sort_keys=False))
    result = cli("validate", path, env={"HF_TOKEN": None})
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output and "error:" not in result.output

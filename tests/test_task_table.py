"""The task table (autotrain/config/tasks.py): each entry is complete, and the commands, schemas, templates,
AutoTrain Advanced's names, extras and the app read it. Read from the sources where a check would
otherwise import torch."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

from autotrain.config.tasks import TASKS, missing_extra, schema_of
from autotrain.config.templates import TEMPLATES, templates_dir

REPO = Path(__file__).resolve().parents[1]
INFERENCE = ("read_rows", "load", "max_tokens", "predict", "evaluate")


def _functions(module: str) -> set[str]:
    found = importlib.util.find_spec(module)
    assert found is not None and found.origin, module
    tree = ast.parse(Path(found.origin).read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("name", list(TASKS))
def test_each_entry_is_complete(name):
    spec = TASKS[name]
    schema = schema_of(name)
    assert spec.name == name and spec.help
    assert schema.model_fields["task"].annotation.__args__ == (name,), "its schema takes `task: NAME`"
    for template in spec.templates:
        assert TEMPLATES[(name, None)] == spec.templates[0]
        assert yaml.safe_load((templates_dir() / template).read_text(encoding="utf-8"))["task"] == name
    if spec.builder:
        module, _, function = spec.builder.partition(":")
        assert function in _functions(module) and (not spec.inference or "preview" in _functions(module))
    if spec.inference:
        assert set(INFERENCE) <= _functions(spec.inference), spec.inference
    assert {native for _, native in spec.advanced_columns} <= set(spec.all_columns)
    assert set(spec.lower_is_better) <= set(spec.metrics)
    if spec.trainers:
        assert list(schema.model_json_schema()["properties"]["trainer"]["enum"]) == list(spec.trainers)


def test_each_extra_is_in_pyproject_and_the_test_extra():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for spec in TASKS.values():
        if spec.packages:
            assert spec.extra in extras and "autotrain[tasks]" in extras["test"], spec.name
            assert spec.extra in extras["tasks"][0]


@pytest.fixture
def seq2seq_extra_missing(monkeypatch, tmp_path):
    from dataclasses import replace

    from autotrain.config import tasks

    monkeypatch.setitem(tasks.TASKS, "seq2seq", replace(tasks.TASKS["seq2seq"], packages=("no_such_package_here",)))
    config = tmp_path / "c.yml"
    config.write_text(f"task: seq2seq\nbase_model: m\nproject_name: {tmp_path / 'run'}\ndata:\n  path: d\n")
    return config


MISSING = "task `seq2seq` needs no_such_package_here: pip install 'autotrain[seq2seq]'"


def test_a_missing_extra_is_one_line_naming_it(seq2seq_extra_missing):
    from autotrain.config.load import load_config
    from autotrain.errors import UserInputError
    from autotrain.inference.tasks import task_module
    from autotrain.training.plan import preflight, resolve_plan

    assert missing_extra("seq2seq") == MISSING
    with pytest.raises(UserInputError, match=r"pip install 'autotrain\[seq2seq\]'"):
        task_module("seq2seq")  # predict / evaluate of such a run
    cfg = load_config(seq2seq_extra_missing).config  # validate needs no extra
    assert MISSING in preflight(cfg, resolve_plan(cfg))


@pytest.mark.slow
def test_a_run_without_its_extra_exits_2_and_writes_nothing(seq2seq_extra_missing, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("seq2seq", "--config", seq2seq_extra_missing)
    assert result.exit_code == 2 and f"error: {MISSING}" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yml"]


def test_every_task_has_a_command_and_the_app_lists_it(cli):
    result = cli("--help")
    for name in TASKS:
        assert f" {name} " in result.stdout, name
    from autotrain.app.configs import task_schemas

    assert task_schemas("sentence-transformers")["schema"]["properties"]["trainer"]["default"] == "pair_score"


def test_the_table_imports_neither_torch_nor_pydantic():
    code = "import sys, autotrain.config.tasks; print('torch' in sys.modules, 'pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_validating_a_task_imports_its_schema_only():
    code = (
        "import sys; from autotrain.config.load import load_config; "
        "load_config('configs/text-classification/imdb.yml'); "
        "print('autotrain.config.text_tasks' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.split() == ["False", "False"]

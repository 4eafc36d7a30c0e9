"""The trainer table (autotrain/config/trainers.py): each entry is complete, and everything else reads it."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotrain.config.llm import LLMConfig, LLMTrainingArgs
from autotrain.config.templates import TEMPLATES, templates_dir
from autotrain.config.trainers import DATA_FORMATS, DEFAULT, TRAINERS

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", list(TRAINERS))
def test_each_entry_is_complete(name):
    spec = TRAINERS[name]
    assert spec.name == name and spec.help and spec.columns and all(spec.columns)
    assert spec.data_format in DATA_FORMATS
    assert set(spec.fields) <= set(LLMTrainingArgs.model_fields), "fields must be training_args fields"
    assert set(spec.positive) <= set(spec.fields)
    assert (templates_dir() / spec.template).is_file() and TEMPLATES[("llm", name)] == spec.template
    # The template is a config of this trainer (and validates: tests/test_config.py checks every shipped file).
    assert yaml.safe_load((templates_dir() / spec.template).read_text(encoding="utf-8"))["trainer"] == name


@pytest.mark.parametrize("name", list(TRAINERS))
def test_each_builder_names_a_function_of_a_module_that_exists(name):
    """Read from the source, so the check imports no torch."""
    module, _, function = TRAINERS[name].builder.partition(":")
    found = importlib.util.find_spec(module)
    assert found is not None and found.origin, module
    tree = ast.parse(Path(found.origin).read_text(encoding="utf-8"))
    assert function in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, TRAINERS[name].builder


def test_the_config_offers_exactly_the_table():
    schema = LLMConfig.model_json_schema()
    assert schema["properties"]["trainer"]["enum"] == list(TRAINERS)
    assert schema["properties"]["trainer"]["default"] == DEFAULT


def test_the_table_imports_neither_torch_nor_pydantic():
    code = "import sys, autotrain.config.trainers; print('torch' in sys.modules, 'pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_trainer_names_live_in_the_table_and_their_builders_only():
    """`grep -w NAME` over the package's Python: the table, the trainer's own builder module, and (for words
    that are also plain English or another trainer's vocabulary) the places listed here with why."""
    # "reward" is also GRPO's vocabulary (reward functions, the logged `reward` metric).
    shared_words = {
        "reward": {
            "config/llm.py",
            "config/rules.py",
            "config/advanced.py",
            "trainers/llm/grpo.py",
            "trainers/llm/rewards.py",
            "training/progress.py",
        }
    }
    package = REPO / "autotrain"
    for name in TRAINERS:
        out = subprocess.run(
            ["grep", "-rlw", "--include=*.py", name, str(package)], capture_output=True, text=True, check=False
        ).stdout.split()
        found = {str(Path(p).relative_to(package)) for p in out}
        own = {
            "config/trainers.py",
            TRAINERS[name].builder.partition(":")[0].removeprefix("autotrain.").replace(".", "/") + ".py",
        }
        assert found - own - shared_words.get(name, set()) == set(), name

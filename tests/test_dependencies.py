"""The dependency floors in pyproject.toml are the versions whose behaviour the code relies on.

Each fact below is a behaviour autotrain depends on, the first release that has it, and a check of it
on the installed version. The floor in pyproject.toml must not be below that release: on an older one
the behaviour is silently different (warmup lost, an argument ignored), which no other test would see.
"""

from __future__ import annotations

import inspect
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def floors() -> dict[str, Version]:
    deps = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    out = {}
    for line in deps:
        req = Requirement(line)
        lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
        assert lows, f"{req.name} has no lower bound in pyproject.toml"
        out[req.name.lower()] = max(lows)
    return out


def _warmup_ratio_as_steps() -> bool:
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir="unused", warmup_steps=0.25, report_to=[], use_cpu=True)
    return args.get_warmup_steps(8) == 2  # a float below 1 is a ratio of the total steps


def _trainer_takes_optimizer_class() -> bool:
    from transformers import Trainer

    return "optimizer_cls_and_kwargs" in inspect.signature(Trainer.__init__).parameters


def _sft_takes_optimizer_class() -> bool:
    from trl import SFTTrainer

    return "optimizer_cls_and_kwargs" in inspect.signature(SFTTrainer.__init__).parameters


FACTS = [
    ("transformers", "5.0", "TrainingArguments(warmup_steps=0.1) is 10% of the steps", _warmup_ratio_as_steps),
    ("transformers", "4.47", "Trainer(optimizer_cls_and_kwargs=...)", _trainer_takes_optimizer_class),
    ("trl", "1.0", "SFTTrainer(optimizer_cls_and_kwargs=...)", _sft_takes_optimizer_class),
]


@pytest.mark.parametrize(("package", "since", "what", "check"), FACTS, ids=[f[2] for f in FACTS])
def test_floor_covers_the_behaviour_relied_on(package, since, what, check):
    assert floors()[package] >= Version(since), f"pyproject allows {package} < {since}, which lacks: {what}"
    assert check(), f"the installed {package} {metadata.version(package)} lacks: {what}"


def test_installed_versions_meet_the_floors():
    for name, low in floors().items():
        assert Version(metadata.version(name)) >= low, f"{name} {metadata.version(name)} is below the floor {low}"

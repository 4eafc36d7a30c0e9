"""The dependency floors in pyproject.toml are the versions whose behaviour the code relies on.

Each fact below is a behaviour autotrain depends on, the first release that has it, and a check of it
on the installed version. The floor in pyproject.toml must not be below that release: on an older one
the behaviour is silently different (warmup lost, an argument ignored), which no other test would see.

The floors themselves are tried by `.ci/floors lowest`: it installs every dependency at the lowest
version pyproject allows (uv's lowest-direct resolution) and runs the fast tests there, with
AUTOTRAIN_EXPECT_FLOORS set so that the last test below checks the environment holds exactly the floors
(a floor that cannot be installed beside the others would otherwise be silently replaced by a newer one).
"""

from __future__ import annotations

import inspect
import os
import re
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _lower_bounds(lines: list[str]) -> dict[str, Version]:
    out = {}
    for line in lines:
        req = Requirement(line)
        if req.name == "autotrain":  # an extra naming another extra
            continue
        lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
        assert lows, f"{req.name} has no lower bound in pyproject.toml"
        out[req.name.lower()] = max(lows)
    return out


def floors() -> dict[str, Version]:
    return _lower_bounds(tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"])


def floors_with_test_extra() -> dict[str, Version]:
    """The floors of what `pip install -e ".[test]"` installs: the dependencies and the extras test names."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    lines, todo, seen = list(project["dependencies"]), ["test"], set()
    while todo:
        extra = todo.pop()
        seen.add(extra)
        for line in extras[extra]:
            lines.append(line)
            req = Requirement(line)
            if req.name == "autotrain":
                todo += [e for e in req.extras if e not in seen]
    return _lower_bounds(lines)


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


def _collator_returns_position_ids() -> bool:
    import dataclasses

    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    return "return_position_ids" in {f.name for f in dataclasses.fields(DataCollatorForLanguageModeling)}


def _accelerate_launches_fsdp2() -> bool:
    from accelerate.commands.launch import launch_command_parser

    return any("--fsdp_version" in action.option_strings for action in launch_command_parser()._actions)


def _image_processor_without_torchvision() -> bool:
    from transformers import AutoImageProcessor

    tiny_vit = Path(__file__).resolve().parent / "assets" / "tiny-vit"
    return AutoImageProcessor.from_pretrained(tiny_vit) is not None  # 5.4-5.17 raise without torchvision


def _json_rows_with_different_keys() -> bool:
    import tempfile
    from pathlib import Path

    from datasets import load_dataset

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.jsonl"
        path.write_text('{"a": 1, "b": "x"}\n{"a": 2}\n', encoding="utf-8")  # the second row has no `b`
        rows = load_dataset("json", data_files=str(path), split="train", cache_dir=folder)
        return rows[1]["b"] is None


def _seq2seq_lora_wraps() -> bool:
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=32, d_model=8, d_kv=4, d_ff=16, num_layers=1, num_heads=2, decoder_start_token_id=0)
    lora = LoraConfig(task_type=TaskType.SEQ_2_SEQ_LM, r=2, target_modules=["q", "v"])
    return get_peft_model(T5ForConditionalGeneration(config), lora) is not None  # 0.18-0.21.1: AttributeError


def _matplotlib_imports() -> bool:
    import matplotlib.pyplot  # noqa: F401  (3.8.3 and older do not import beside numpy 2)

    return True


FACTS = [
    ("transformers", "5.0", "TrainingArguments(warmup_steps=0.1) is 10% of the steps", _warmup_ratio_as_steps),
    ("transformers", "4.47", "Trainer(optimizer_cls_and_kwargs=...)", _trainer_takes_optimizer_class),
    ("transformers", "5.18", "AutoImageProcessor without torchvision", _image_processor_without_torchvision),
    ("trl", "1.0", "SFTTrainer(optimizer_cls_and_kwargs=...)", _sft_takes_optimizer_class),
    (
        "trl",
        "1.11",
        "SFT's batches: DataCollatorForLanguageModeling(return_position_ids=...)",
        _collator_returns_position_ids,
    ),
    ("peft", "0.21.2", "a seq2seq model wrapped for LoRA beside transformers 5.18+", _seq2seq_lora_wraps),
    ("accelerate", "1.6", "FSDP2: accelerate launch --fsdp_version", _accelerate_launches_fsdp2),
    (
        "datasets",
        "4.8",
        "JSON lines whose rows have different keys (a missing column is None)",
        _json_rows_with_different_keys,
    ),
    ("matplotlib", "3.8.4", "the plots: matplotlib imports beside numpy 2", _matplotlib_imports),
]


@pytest.mark.parametrize(("package", "since", "what", "check"), FACTS, ids=[f[2] for f in FACTS])
def test_floor_covers_the_behaviour_relied_on(package, since, what, check):
    assert floors()[package] >= Version(since), f"pyproject allows {package} < {since}, which lacks: {what}"
    assert check(), f"the installed {package} {metadata.version(package)} lacks: {what}"


def test_installed_versions_meet_the_floors():
    for name, low in floors().items():
        assert Version(metadata.version(name)) >= low, f"{name} {metadata.version(name)} is below the floor {low}"


@pytest.mark.skipif(
    not os.environ.get("AUTOTRAIN_EXPECT_FLOORS"), reason="checks the floors environment that `.ci/floors lowest` makes"
)
def test_the_floors_environment_holds_exactly_the_floors():
    # torch is pinned by the script (TORCH=...); it is compared only when the script says it installed the floor.
    check_torch = os.environ["AUTOTRAIN_EXPECT_FLOORS"] == "torch"
    wrong = []
    for name, low in floors_with_test_extra().items():
        if name == "torch" and not check_torch:
            continue
        installed = Version(re.sub(r"\+.*", "", metadata.version(name)))
        if installed != low:
            wrong.append(f"{name} {installed} (floor {low})")
    assert not wrong, "the lowest resolution did not install the floor of: " + ", ".join(wrong)

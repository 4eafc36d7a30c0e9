"""End-to-end LLM runs through the CLI on the tiny shipped Llama: every trainer, a few steps each."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from autotrain.cli.main import app

ASSETS = Path(__file__).parent / "assets"
TINY = str(ASSETS / "tiny-llama")
DATA = ASSETS / "data"


def write_config(tmp_path: Path, **sections) -> Path:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": TINY,
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(DATA / "text.jsonl"), "column_mapping": {"text": "text"}},
        "training_args": {"max_steps": 4, "batch_size": 4, "lr": 1e-3, "max_length": 64, "logging_steps": 1,
                          "mixed_precision": "no"},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def train(path: Path, *extra: str):
    result = CliRunner().invoke(app, ["llm", "--config", str(path), *extra])
    assert result.exit_code == 0, result.output
    return result


def losses(run: Path) -> list[float]:
    state = json.loads((run / "trainer_state.json").read_text())
    values = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert values, "no loss was logged"
    return values


def assert_weights_changed(run: Path, base: Path = Path(TINY)) -> None:
    before = load_file(base / "model.safetensors")
    after = load_file(run / "model.safetensors")
    changed = [k for k in after if k in before and not torch.equal(before[k], after[k].to(before[k].dtype))]
    assert len(changed) == len(after), f"unchanged: {sorted(set(after) - set(changed))}"


def assert_adapter_trained(run: Path) -> None:
    adapter = load_file(run / "adapter_model.safetensors")
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and all(v.abs().sum() > 0 for v in lora_b), "LoRA B matrices are still zero"


PREFS = {"path": str(DATA / "preferences.jsonl"),
         "column_mapping": {"prompt": "question", "chosen": "good", "rejected": "bad"}}


@pytest.mark.parametrize(
    "name, sections",
    [
        ("sft-text", {}),
        ("sft-chat", {"data": {"path": str(DATA / "chat.jsonl"), "column_mapping": {"messages": "messages"},
                               "chat_template": "chatml"}}),
        ("orpo", {"trainer": "orpo", "data": PREFS}),
        ("dpo", {"trainer": "dpo", "data": PREFS}),
        ("clm", {"trainer": "clm"}),
    ],
)
def test_full_finetune(tmp_path, name, sections):
    run = Path(tmp_path / "run")
    train(write_config(tmp_path, **sections))
    assert all(math.isfinite(x) for x in losses(run))
    assert_weights_changed(run)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(run)
    tokenizer = AutoTokenizer.from_pretrained(run)
    out = model(**tokenizer("the sky is", return_tensors="pt"))
    assert torch.isfinite(out.logits).all()
    saved = (run / "autotrain.yaml").read_text()
    assert "task: llm" in saved and (run / "README.md").is_file() and (run / "train_results.json").is_file()


def test_reward_model(tmp_path):
    run = Path(tmp_path / "run")
    train(write_config(tmp_path, trainer="reward", data={**PREFS}))
    assert all(math.isfinite(x) for x in losses(run))
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(run)
    assert model.config.num_labels == 1
    assert_weights_changed(run)


def test_dpo_with_lora_and_merge(tmp_path):
    run = Path(tmp_path / "run")
    train(write_config(tmp_path, trainer="dpo", data=PREFS,
                       peft={"enabled": True, "r": 4, "alpha": 8, "merge_adapter": True}))
    assert all(math.isfinite(x) for x in losses(run))
    assert_adapter_trained(run)
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    AutoPeftModelForCausalLM.from_pretrained(run)
    merged = AutoModelForCausalLM.from_pretrained(run / "merged")
    assert_weights_changed(run / "merged")
    assert merged.config.num_hidden_layers == 2

"""End-to-end LLM runs through the CLI on the tiny shipped Llama: every trainer, a few steps each."""

from __future__ import annotations

import json
import math
import sys
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
        "training_args": {
            "max_steps": 4,
            "batch_size": 4,
            "lr": 1e-3,
            "max_length": 64,
            "logging_steps": 1,
            "mixed_precision": "no",
        },
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


def assert_weights_changed(run: Path, base: Path = Path(TINY), only: str = "") -> None:
    before = load_file(base / "model.safetensors")
    after = load_file(run / "model.safetensors")
    shared = [k for k in after if k in before and only in k]
    assert shared, "the saved model shares no weights with the base model"
    unchanged = [k for k in shared if torch.equal(before[k], after[k].to(before[k].dtype))]
    assert not unchanged, f"unchanged after training: {unchanged}"


def assert_adapter_trained(run: Path) -> None:
    adapter = load_file(run / "adapter_model.safetensors")
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and all(v.abs().sum() > 0 for v in lora_b), "LoRA B matrices are still zero"


PREFS = {
    "path": str(DATA / "preferences.jsonl"),
    "column_mapping": {"prompt": "question", "chosen": "good", "rejected": "bad"},
}


@pytest.mark.parametrize(
    "name, sections",
    [
        ("sft-text", {}),
        (
            "sft-chat",
            {
                "data": {
                    "path": str(DATA / "chat.jsonl"),
                    "column_mapping": {"messages": "messages"},
                    "chat_template": "chatml",
                }
            },
        ),
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
    train(
        write_config(
            tmp_path,
            trainer="dpo",
            data=PREFS,
            peft={"enabled": True, "r": 4, "alpha": 8, "merge_adapter": True},
        )
    )
    assert all(math.isfinite(x) for x in losses(run))
    assert_adapter_trained(run)
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    AutoPeftModelForCausalLM.from_pretrained(run)
    merged = AutoModelForCausalLM.from_pretrained(run / "merged")
    assert_weights_changed(run / "merged", only="_proj")  # LoRA targets every linear projection
    assert merged.config.num_hidden_layers == 2


@pytest.mark.parametrize("optimizer", ["came_8bit", "fused_adam", "came_8bit+fused_adam"])
def test_bundled_optimizers(tmp_path, optimizer):
    run = Path(tmp_path / "run")
    # min_8bit_size low enough that the tiny model's matrices really are stored in 8 bits
    args = {"optimizer": optimizer, "lr": 1e-3}
    if optimizer == "came_8bit":
        args["optimizer_args"] = {"min_8bit_size": 1024, "block_size": 256}
    train(write_config(tmp_path, training_args=args))
    assert all(math.isfinite(x) for x in losses(run))
    assert_weights_changed(run)
    state = torch.load(next(run.glob("checkpoint-*")) / "optimizer.pt", weights_only=False)
    assert state["state"], "the optimizer kept no state"
    if optimizer == "came_8bit":
        dtypes = {v.dtype for s in state["state"].values() for v in s.values() if isinstance(v, torch.Tensor)}
        assert dtypes & {torch.int8, torch.uint8}, f"no 8-bit state saved: {dtypes}"


@pytest.mark.slow  # a DPO run: a policy and its reference
def test_a_preference_trainer_steps_the_planned_bundled_optimizer(tmp_path):
    """DPO (like KTO, GRPO and ORPO) takes no `optimizer_cls_and_kwargs`: the planned FusedAdam is still what
    steps (its param groups carry Apex's `bias_correction`), in the Trainer's decay / no-decay groups."""
    run = Path(tmp_path / "run")
    train(
        write_config(
            tmp_path,
            trainer="dpo",
            data=PREFS,
            training_args={"optimizer": "fused_adam", "weight_decay": 0.1, "max_steps": 2},
        )
    )
    assert_weights_changed(run)
    state = torch.load(next(run.glob("checkpoint-*")) / "optimizer.pt", weights_only=False)
    assert sorted(g["weight_decay"] for g in state["param_groups"]) == [0.0, 0.1]
    assert all("bias_correction" in g for g in state["param_groups"]), state["param_groups"]


def test_gradient_accumulation_steps_the_optimizer_once_per_n_batches(tmp_path):
    run = Path(tmp_path / "run")
    train(write_config(tmp_path, training_args={"max_steps": 3, "gradient_accumulation": 2, "batch_size": 2}))
    state = json.loads((run / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    optimizer = torch.load(run / "checkpoint-3" / "optimizer.pt", weights_only=False)
    steps = {int(s["step"]) for s in optimizer["state"].values()}
    assert steps == {3}, f"optimizer stepped {steps} times, expected 3"
    args = torch.load(run / "training_args.bin", weights_only=False)
    assert args.gradient_accumulation_steps == 2 and args.per_device_train_batch_size == 2


def test_bf16_on_cpu(tmp_path):
    run = Path(tmp_path / "run")
    train(write_config(tmp_path, training_args={"mixed_precision": "bf16"}))
    assert all(math.isfinite(x) for x in losses(run))
    assert torch.load(run / "training_args.bin", weights_only=False).bf16 is True
    assert_weights_changed(run)


@pytest.mark.no_cuda
def test_fp16_on_cpu_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(
        app, ["llm", "--config", str(write_config(tmp_path, training_args={"mixed_precision": "fp16"}))]
    )
    assert result.exit_code == 2 and "fp16 needs a CUDA GPU" in result.output


@pytest.mark.no_cuda
def test_quantization_without_cuda_exits_2(tmp_path):
    path = write_config(tmp_path, peft={"enabled": True, "quantization": "int4"})
    result = CliRunner().invoke(app, ["llm", "--config", str(path)])
    assert result.exit_code == 2 and "needs a CUDA GPU" in result.output


def test_missing_column_is_reported_before_the_model_loads(tmp_path, monkeypatch):
    import transformers

    def no_weights(*args, **kwargs):
        raise AssertionError("model weights were loaded before the data was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    path = write_config(tmp_path, data={"column_mapping": {"text": "body"}})
    result = CliRunner().invoke(app, ["llm", "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert "`body`" in result.output and "the data has columns: text" in result.output


def test_dry_run_trains_nothing(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "llm",
            "--config",
            str(write_config(tmp_path)),
            "--dry-run",
            "--set",
            "training_args.gradient_accumulation=3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "effective batch size: 12 = batch_size 4 x gradient_accumulation 3 x processes 1" in result.output
    assert not (tmp_path / "run").exists()


def test_plain_progress_lines_when_not_a_terminal(tmp_path):
    result = train(write_config(tmp_path))
    lines = [line for line in result.output.splitlines() if line.startswith("step ")]
    assert len(lines) == 4 and "loss" in lines[-1] and "tokens/s" in lines[-1] and "eta" in lines[-1]


def test_quickstart_config_trains_and_loss_falls(tmp_path):
    """The README's quick start, shortened: the shipped config trains and its loss goes down."""
    config = yaml.safe_load((Path(__file__).parents[1] / "configs/llm/quickstart.yml").read_text())
    config["base_model"] = TINY
    config["data"]["path"] = str(DATA / "text.jsonl")
    config["project_name"] = str(tmp_path / "run")
    config["training_args"]["epochs"] = 1
    path = tmp_path / "quickstart.yml"
    path.write_text(yaml.safe_dump(config))
    train(path)
    values = losses(tmp_path / "run")
    assert values[-1] < values[0] - 0.5, values
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(tmp_path / "run")


def test_missing_logger_package_is_bad_input(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed, as far as this process can tell
    result = CliRunner().invoke(app, ["llm", "--config", str(write_config(tmp_path, log="wandb"))])
    assert result.exit_code == 2 and "pip install wandb" in result.output


def test_adamw_8bit_without_bitsandbytes_is_bad_input(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # hidden where it is installed (a GPU host)
    path = write_config(tmp_path, training_args={"optimizer": "adamw_8bit"})
    result = CliRunner().invoke(app, ["llm", "--config", str(path)])
    assert result.exit_code == 2 and "pip install bitsandbytes" in result.output

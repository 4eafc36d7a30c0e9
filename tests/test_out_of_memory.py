"""A run that runs out of memory anyway: one line with the step, the batch, the estimate and what to change,
exit 5, a checkpoint of the last completed step when the weights are whole, nothing half written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotrain.errors import EXIT_OUT_OF_MEMORY
from autotrain.training.out_of_memory import advice, is_out_of_memory

ASSETS = Path(__file__).resolve().parent / "assets"
CPU_ALLOCATOR = (
    "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate "
    "8589934592 bytes"
)


def test_failed_allocations_are_recognised_whatever_raised_them():
    import torch

    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(RuntimeError(CPU_ALLOCATOR))
    try:
        try:
            raise MemoryError()
        except MemoryError as inner:
            raise ValueError("while tokenizing") from inner
    except ValueError as outer:
        assert is_out_of_memory(outer)
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    assert not is_out_of_memory(ValueError("out of range"))


def test_the_advice_names_the_cheapest_changes_that_remain():
    said = advice(8, 2, checkpointing=False, lora=False)
    assert "batch_size: 4 with gradient_accumulation: 4" in said
    assert "gradient_checkpointing: true" in said and "peft.enabled: true" in said
    last = advice(1, 1, checkpointing=True, lora=True)
    assert last == "shorten training_args.max_length, or use a device with more memory"


def oom_config(tmp_path: Path, **training) -> Path:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(ASSETS / "tiny-llama"),
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(ASSETS / "data" / "text.jsonl")},
        "training_args": {"max_steps": 6, "batch_size": 2, "max_length": 48, "logging_steps": 1,
                          "mixed_precision": "no", "save_steps": 2, **training},
    }  # fmt: skip
    path = tmp_path / "run.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def failing_at(step: int, error: BaseException):
    """A training_step that raises `error` when the run is about to take step `step` (1-based)."""
    import transformers

    real = transformers.Trainer.training_step

    def training_step(self, *args, **kwargs):
        if self.state.global_step == step - 1:
            raise error
        return real(self, *args, **kwargs)

    return training_step


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cuda", "cpu allocator", "python"])
def test_out_of_memory_at_a_step_saves_that_step_and_says_what_to_change(cli, tmp_path, monkeypatch, kind):
    import torch
    import transformers

    error = {
        "cuda": torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        "cpu allocator": RuntimeError(CPU_ALLOCATOR),
        "python": MemoryError(),
    }[kind]
    monkeypatch.setattr(transformers.Trainer, "training_step", failing_at(4, error))
    config = oom_config(tmp_path)
    result = cli("llm", "--config", config)
    assert result.exit_code == EXIT_OUT_OF_MEMORY == 5, result.output
    assert "Traceback" not in result.output
    run = tmp_path / "run"
    [line] = error_lines(result)
    said = "error: out of memory at step 4 (training_args.batch_size 2 of 48 tokens x gradient_accumulation 1; "
    assert line.startswith(said), line
    assert "the estimate was " in line and "for the process" in line
    assert "set training_args.batch_size: 1 with gradient_accumulation: 2" in line
    assert "gradient_checkpointing: true" in line and "peft.enabled: true (LoRA)" in line
    assert line.endswith(f"checkpoint saved to {run / 'checkpoint-3'}"), line
    for step in (2, 3):  # the previous complete checkpoint is kept beside the new one
        assert (run / f"checkpoint-{step}" / ".autotrain-complete").is_file()
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "out of memory" and record["exit_code"] == 5
    assert "out of memory at step 4" in record["error"]
    monkeypatch.undo()
    resumed = cli("llm", "--config", config, "--resume", "latest")
    assert resumed.exit_code == 0, resumed.output
    assert "resuming from" in resumed.stderr and "checkpoint-3" in resumed.stderr
    assert json.loads((run / "trainer_state.json").read_text())["global_step"] == 6


@pytest.mark.slow
def test_out_of_memory_inside_the_optimizer_step_saves_nothing_half_updated(cli, tmp_path, monkeypatch):
    import torch

    real = torch.optim.AdamW.step
    calls = {"n": 0}

    def step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # the third optimizer step: weights of step 2 partly updated
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    result = cli("llm", "--config", oom_config(tmp_path, optimizer="adamw_torch"))
    assert result.exit_code == 5, result.output
    [line] = error_lines(result)
    run = tmp_path / "run"
    assert line.startswith("error: out of memory at step 3 ("), line
    assert "inside the optimizer's step" in line
    assert f"the last complete checkpoint, {run / 'checkpoint-2'}, is kept" in line
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-2"]


@pytest.mark.slow
def test_out_of_memory_while_its_checkpoint_is_written_leaves_no_half_written_one(cli, tmp_path, monkeypatch):
    """The allocation fails at step 4; the checkpoint of step 3 it then saves fails too (writing the
    optimizer state): that folder is removed and checkpoint-2 stands."""
    import os

    import torch
    import transformers

    monkeypatch.setattr(transformers.Trainer, "training_step", failing_at(4, MemoryError()))
    real = torch.save

    def failing_save(obj, f, *args, **kwargs):
        if str(f).endswith(os.path.join("checkpoint-3", "optimizer.pt")):
            raise MemoryError()
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", failing_save)
    result = cli("llm", "--config", oom_config(tmp_path))
    assert result.exit_code == 5, result.output
    [line] = error_lines(result)
    run = tmp_path / "run"
    assert "the checkpoint could not be saved (MemoryError)" in line, line
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-2"]

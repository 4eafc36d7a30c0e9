"""The dry run shows the plan whatever the problems: the plan on stdout, then the problems, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.no_cuda
def test_plan_is_printed_before_the_problems(cli):
    result = cli("llm", "--config", CONFIGS / "llm" / "llama3-orpo.yml", "--dry-run")
    assert result.exit_code == 2
    plan = result.stdout.split("\n# plan\n", 1)[1]
    assert "effective batch size: 8 = batch_size 2 x gradient_accumulation 4 x processes 1" in plan
    assert "optimizer: adamw_torch" in plan and "adam_beta2=0.999" in plan
    assert "processes: 1 per machine x 1 machine(s)" in plan
    block = plan.split("training arguments (what the config fields became):\n", 1)[1]
    fields = yaml.safe_load(block.split("\nmemory estimate")[0])
    assert fields["gradient_accumulation_steps"] == 4 and fields["gradient_checkpointing"] is True
    assert "problems follow" in plan
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert any("peft.quantization: int4" in line for line in errors) and any("tensorboard" in line for line in errors)

"""The dry run shows the plan whatever the problems: the plan on stdout, then the problems, exit code 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.no_cuda
def test_plan_is_printed_before_the_problems(cli):
    # tensorboard is not installed here: a second problem beside the 4-bit loading that needs CUDA.
    result = cli("llm", "--config", CONFIGS / "llm" / "llama3-orpo.yml", "--dry-run", "--set", "log=tensorboard")
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


@pytest.mark.no_cuda
def test_the_cli_process_ends_with_its_code_and_all_of_its_output(tmp_path):
    """A dry run ends its process without tearing the interpreter down (a second of its time): the exit
    code and everything printed, through pipes, are as a normal exit leaves them."""
    import subprocess
    import sys

    code = "import sys; from autotrain.cli.main import main; sys.argv[0] = 'autotrain'; main()"
    config = CONFIGS / "llm" / "llama3-orpo.yml"
    done = subprocess.run(
        [sys.executable, "-c", code, "llm", "--config", str(config), "--dry-run"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    # 4-bit loading needs CUDA (and bitsandbytes, where it is not installed)
    assert re.search(r"(1 problem follows|2 problems follow) \(stderr\)\.$", done.stdout.rstrip()), done.stdout[-500:]
    assert "# plan" in done.stdout and "memory estimate: " in done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert any("peft.quantization: int4" in line for line in errors)
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr

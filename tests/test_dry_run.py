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


def test_a_max_length_above_the_models_positions_is_capped_as_the_run_caps_it(cli, capsys, monkeypatch):
    """tiny-bert takes 64 positions. Asked for 4096, the run trains at 64 after a note; the dry run's estimate
    used to trace 4096 and say "cannot read the config.json". It now says the run's note and estimates at 64."""
    from transformers import AutoConfig, AutoTokenizer

    from autotrain.config.load import load_config
    from autotrain.trainers.text_classification import max_tokens

    monkeypatch.chdir(CONFIGS.parent)
    config = CONFIGS / "text-classification" / "quickstart.yml"
    asked = cli("text-classification", "--config", config, "--dry-run", "--set", "training_args.max_length=4096")
    at_64 = cli("text-classification", "--config", config, "--dry-run", "--set", "training_args.max_length=64")
    assert (asked.exit_code, at_64.exit_code) == (0, 0), asked.output
    estimate = [line for line in asked.stdout.splitlines() if line.startswith("memory estimate: ")]
    assert estimate and "cannot read" not in estimate[0], asked.stdout
    assert estimate == [line for line in at_64.stdout.splitlines() if line.startswith("memory estimate: ")]

    cfg = load_config(config, ["training_args.max_length=4096"]).config
    base = CONFIGS.parent / "tests" / "assets" / "tiny-bert"
    capsys.readouterr()
    assert max_tokens(cfg, AutoTokenizer.from_pretrained(base), AutoConfig.from_pretrained(base)) == 64
    the_runs_note = capsys.readouterr().err.strip().removeprefix("note: ")
    assert the_runs_note == "training_args.max_length 4096 is more than base_model takes; using 64"
    assert f"  note: {the_runs_note}" in asked.stdout.splitlines(), asked.stdout


QUIET = """
import json, logging, sys
from autotrain.training.quiet import quiet_libraries

quiet_libraries()
imported = sorted({"datasets", "transformers", "huggingface_hub"} & set(sys.modules))
import datasets, transformers
from huggingface_hub.utils import logging as hub_logging

print(json.dumps({
    "imported_by_quieting": imported,
    "transformers": transformers.logging.get_verbosity() == logging.ERROR,
    "transformers_bars": not transformers.utils.logging.is_progress_bar_enabled(),
    "datasets": datasets.logging.get_verbosity() == logging.ERROR,
    "datasets_bars": not datasets.is_progress_bar_enabled(),
    "hub": hub_logging.get_verbosity() == logging.ERROR,
}))
"""


def test_quieting_the_libraries_imports_none_of_them():
    """The dry run quiets the libraries before its memory estimate; that used to import `datasets` (about 870
    modules with pandas and pyarrow) in every dry run, also where no data is read here (hub data: no preview).
    Each library now reads the quiet settings when it is first imported."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "AUTOTRAIN_DEBUG" and not k.endswith("VERBOSITY")}
    env = {k: v for k, v in env.items() if "PROGRESS_BAR" not in k and k != "TQDM_DISABLE"}
    done = subprocess.run([sys.executable, "-c", QUIET], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.pop("imported_by_quieting") == []
    assert all(result.values()), result

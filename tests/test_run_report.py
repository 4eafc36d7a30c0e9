"""What a finished run tells its user: the last line names the final loss and the mean as a mean, the
model card states what the run did (from the plan, not the asked epochs), and a classifier's final
evaluation is shown once."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
ASSETS = REPO_ROOT / "tests" / "assets"


def llm_config(tmp_path: Path) -> Path:
    config = {
        "task": "llm",
        "trainer": "clm",
        "base_model": str(ASSETS / "tiny-llama"),
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(ASSETS / "data" / "text.jsonl")},
        "training_args": {
            "epochs": 3,  # bounded by max_steps: the card must not claim 3 epochs
            "max_steps": 4,
            "batch_size": 4,
            "gradient_accumulation": 2,
            "lr": 1e-3,
            "max_length": 32,
            "logging_steps": 2,
            "mixed_precision": "no",
        },
    }
    path = tmp_path / "c.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_a_run_reports_its_final_loss_and_the_card_what_it_did(cli, tmp_path):
    result = cli("llm", "--config", llm_config(tmp_path))
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    state = json.loads((run / "trainer_state.json").read_text())
    final = [e for e in state["log_history"] if "loss" in e][-1]
    mean = json.loads((run / "train_results.json").read_text())["train_loss"]

    [last] = [line for line in result.output.splitlines() if line.startswith("done:")]
    assert last == (
        f"done: model saved to {run}/ (final loss {final['loss']:.4f} at step {final['step']}; "
        f"mean train loss over the run {mean:.4f})"
    )
    card = (run / "README.md").read_text()
    assert f"- trained: 4 steps, {state['epoch']:.2f} epochs (asked: `max_steps: 4`)" in card
    assert "- batch per step: 8 = batch_size 4 x gradient_accumulation 2 x 1 process(es)" in card
    assert "- precision: fp32 on cpu (asked: no)" in card
    assert f"- final train loss: {final['loss']:.4f} at step 4" in card
    assert "epochs: 3" not in card


@pytest.mark.slow
def test_a_classifier_shows_its_final_evaluation_once(cli, tmp_path):
    config = REPO_ROOT / "configs" / "text-classification" / "quickstart.yml"
    result = cli("--config", config, "--set", f"project_name={tmp_path / 'run'}", "--set", "training_args.epochs=1")
    assert result.exit_code == 0, result.output
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    last_step = state["global_step"]
    evals = [line for line in result.stdout.splitlines() if re.match(rf"eval step {last_step}\b", line)]
    assert len(evals) == 1, result.stdout
    assert result.stdout.count("validation") == 1  # the table of the final metrics
    # the last evaluation measured the final weights: its figures are the final ones, not computed again
    measured = [e for e in state["log_history"] if "eval_loss" in e][-1]
    saved = json.loads((tmp_path / "run" / "eval_results.json").read_text())
    assert saved["eval_loss"] == measured["eval_loss"] and saved["eval_runtime"] == measured["eval_runtime"]

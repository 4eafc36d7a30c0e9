"""`log: mlflow` and `log: trackio`: refused before training when the package is missing; mlflow's store,
where it is installed (the test extra), holds the run's metrics (offline: a folder of the test's own).

trackio is not in the test extra, so no test trains into its store: it takes pillow below 13 and uvicorn
0.30 or later, which would hold every test environment below the newest pillow and cannot be installed
beside the app extra's uvicorn floor (0.29) in `.ci/floors lowest`. `log: trackio` is transformers' own
callback, as `test_every_reporter_is_one_transformers_knows` checks."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
ASSETS = REPO_ROOT / "tests" / "assets"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def config(tmp_path: Path, log: str) -> Path:
    data = {
        "task": "llm",
        "trainer": "clm",
        "base_model": str(ASSETS / "tiny-llama"),
        "project_name": str(tmp_path / "run"),
        "log": log,
        "data": {"path": str(ASSETS / "data" / "text.jsonl")},
        "training_args": {"max_steps": 2, "batch_size": 4, "max_length": 32, "logging_steps": 1},
    }
    path = tmp_path / "c.yml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("log", ["mlflow", "trackio"])
def test_a_missing_reporter_package_is_refused_before_training(cli, tmp_path, monkeypatch, log):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == log else real(name, *a))
    result = cli("llm", "--config", config(tmp_path, log), "--dry-run", env=OFFLINE)
    assert result.exit_code == 2, result.output
    assert f"log: {log} needs the `{log}` package: pip install {log} (or set `log: none`)" in result.stderr


def test_every_reporter_is_one_transformers_knows():
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    from autotrain.config.base import TaskConfig

    choices = TaskConfig.model_json_schema()["properties"]["log"]["enum"]
    assert {"mlflow", "trackio"} <= set(choices)
    assert set(choices) - {"none"} <= set(INTEGRATION_TO_CALLBACK)


def train_fresh(path: Path, env: dict) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(path)]
    done = subprocess.run(
        command, cwd=path.parent, env={**os.environ, **OFFLINE, **env}, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.slow
def test_mlflow_records_the_run_in_a_local_store(tmp_path):
    if importlib.util.find_spec("mlflow") is None:
        pytest.skip('mlflow is not installed (pip install -e ".[test]")')
    store = tmp_path / "mlruns"
    # mlflow-skinny has no SQL store; the file store is enough to read the run back.
    train_fresh(config(tmp_path, "mlflow"), {"MLFLOW_TRACKING_URI": store.as_uri(), "MLFLOW_ALLOW_FILE_STORE": "true"})
    losses = list(store.glob("*/*/metrics/loss"))
    assert losses, sorted(str(p.relative_to(store)) for p in store.rglob("*"))[:40]
    steps = [int(line.split()[2]) for line in losses[0].read_text().splitlines()]
    assert steps == [1, 2]

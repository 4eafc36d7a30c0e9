"""text-regression: a number per text. The tiny BERT learns a review's sentiment sum (R2 and correlations
far above what predicting the mean gives), predicts and evaluates, and bad data is one line, exit 2."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from text_tasks_assets import regression_rows, results, trained_tiny_bert, write_config, write_rows

ASSETS = Path(__file__).resolve().parent / "assets"
CONFIG = """\
task: text-regression
base_model: {model}
project_name: {project}
data:
  path: {data}
  valid_split: valid
  column_mapping:
    target: score
training_args:
  epochs: 4
  batch_size: 16
  lr: 5.0e-3
  max_length: 16
  optimizer: adamw_torch
  logging_steps: 5
"""


def data_folder(folder: Path, train: int = 300, valid: int = 60) -> Path:
    rng = random.Random(0)
    write_rows(folder / "train.csv", regression_rows(rng, train))
    write_rows(folder / "valid.csv", regression_rows(rng, valid))
    return folder


def trained(root: Path) -> Path:
    """A text-regression run of the tiny BERT on sentiment sums (trained once per session)."""
    return trained_tiny_bert(root, "regression-run", "text-regression", CONFIG, data_folder)


@pytest.fixture(scope="session")
def regressor(tmp_path_factory):
    return trained(tmp_path_factory.getbasetemp() / "text-tasks")


@pytest.mark.slow
def test_learns_the_sentiment_sum(regressor):
    metrics = results(regressor / "run")
    # Predicting the mean gives R2 0 and no correlation; a model that ignored the words could do no better.
    assert metrics["eval_r2"] > 0.5, metrics
    assert metrics["eval_spearman"] > 0.8 and metrics["eval_pearson"] > 0.8, metrics
    assert metrics["eval_mse"] == pytest.approx(metrics["eval_loss"], rel=1e-4)
    card = (regressor / "run" / "README.md").read_text()
    assert "| eval_r2 |" in card and "plots/metrics.png" in card


@pytest.mark.slow
def test_predict_and_evaluate(cli, regressor, tmp_path):
    run, valid = regressor / "run", regressor / "data" / "valid.csv"
    out = tmp_path / "predictions.jsonl"
    assert cli("predict", run, "-i", valid, "-o", out).exit_code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 60 and all(isinstance(r["value"], float) and r["text"] for r in rows)
    result = cli("evaluate", run, "-i", valid, "--json")
    assert result.exit_code == 0, result.output
    measured = json.loads(result.stdout)
    assert measured["rows"] == 60
    assert measured["r2"] == pytest.approx(results(run)["eval_r2"], abs=1e-4)  # what training measured


@pytest.mark.parametrize(
    ("suffix", "rows", "expected"),
    [
        (
            ".csv",
            [{"text": "a meal was good .", "score": "high"}],
            "train.csv: row 0, column `score`: must be a number",
        ),
        (".csv", [{"text": "a meal was good .", "rating": 1.0}], "column `score` (for target) not found"),
        (".jsonl", [{"text": 7, "score": 1.0}], "train.jsonl: row 0, column `text`: must be text, got int 7"),
        (".jsonl", [{"text": " ", "score": 1.0}], "train.jsonl: row 0, column `text`: the text is empty"),
        (".csv", [{"text": "", "score": 1.0}], "train.csv: row 0, column `text`: no text (the cell is empty)"),
        (".parquet", [], "the split is empty"),
    ],
    ids=["not-a-number", "missing-column", "wrong-type", "blank-text", "empty-cell", "empty-file"],
)
def test_bad_data_names_the_file_row_and_column(tmp_path, suffix, rows, expected):
    from autotrain.config.load import load_config
    from autotrain.data.regression import load_regression_splits
    from autotrain.errors import UserInputError

    data = tmp_path / "data"
    if rows:
        write_rows(data / f"train{suffix}", rows * 4)
    else:
        data.mkdir()
        (data / f"train{suffix}").write_text("")
    config = write_config(tmp_path / "c.yml", CONFIG, model="some/model", project=tmp_path / "run", data=data)
    cfg = load_config(config, ["data.valid_split=null"]).config
    with pytest.raises(UserInputError) as caught:
        load_regression_splits(cfg)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.slow
def test_bad_data_is_one_line_and_exit_2_before_any_weights(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    write_rows(data / "train.csv", [{"text": "a meal was good .", "score": 1.0}] * 8 + [{"text": "x", "score": ""}])
    write_rows(data / "valid.csv", [{"text": "a meal was good .", "score": 1.0}] * 4)
    tokenizer_only = tmp_path / "no-weights-here"  # the tokenizer loads, then the data is checked: no weights
    tokenizer_only.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ASSETS / "tiny-bert" / name, tokenizer_only / name)
    config = write_config(tmp_path / "c.yml", CONFIG, model=tokenizer_only, project=tmp_path / "run", data=data)
    result = cli("text-regression", "--config", config)
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "row 8, column `score`: must be a number" in errors[0], result.output
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yml", "data", "no-weights-here"]

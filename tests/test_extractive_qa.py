"""extractive-qa: the tiny BERT learns to find the colour or the animal a question asks for in contexts
often longer than one window (SQuAD exact match far above an untrained model's), predicts spans with offsets
and scores, evaluates, and an answer that is not in its context is one line, exit 2."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from text_tasks_assets import qa_rows, results, trained_tiny_bert, write_config, write_rows

CONFIG = """\
task: extractive-qa
base_model: {model}
project_name: {project}
data:
  path: {data}
  valid_split: valid
training_args:
  epochs: 3
  batch_size: 16
  lr: 5.0e-3
  max_length: 32
  doc_stride: 8
  optimizer: adamw_torch
  logging_steps: 10
"""


def data_folder(folder: Path) -> Path:
    rng = random.Random(2)
    write_rows(folder / "train.jsonl", qa_rows(rng, 300))
    write_rows(folder / "valid.jsonl", qa_rows(rng, 60))
    return folder


def trained(root: Path) -> Path:
    """An extractive-qa run of the tiny BERT (trained once per session)."""
    return trained_tiny_bert(root, "qa-run", "extractive-qa", CONFIG, data_folder)


@pytest.fixture(scope="session")
def reader(tmp_path_factory):
    return trained(tmp_path_factory.getbasetemp() / "text-tasks")


@pytest.mark.slow
def test_learns_to_find_the_answer_across_windows(reader):
    metrics = results(reader / "run")
    # An untrained model picks one of ~20 context words at best by chance: exact match near 5%.
    assert metrics["eval_exact_match"] > 60 and metrics["eval_f1"] > 60, metrics


@pytest.mark.slow
def test_predict_gives_the_span_offsets_and_score(cli, reader, tmp_path):
    filler = "we saw the very game near a meal with the and then it was the show in a trip . "
    context = filler + "and red " + filler  # longer than one window: the answer is in the second
    other = filler * 2 + "it was a dog"
    rows = [{"question": "which color ?", "context": context}, {"question": "which animal ?", "context": other}]
    result = cli("predict", reader / "run", "-i", write_rows(tmp_path / "q.jsonl", rows))
    assert result.exit_code == 0, result.output
    found = [json.loads(line) for line in result.stdout.splitlines()]
    assert [f["answer"] for f in found] == ["red", "dog"], found
    for f, asked in zip(found, rows, strict=True):
        assert asked["context"][f["start"] : f["end"]] == f["answer"] and 0 < f["score"] <= 1


@pytest.mark.slow
def test_evaluate_matches_training(cli, reader):
    result = cli("evaluate", reader / "run", "-i", reader / "data" / "valid.jsonl", "--json")
    assert result.exit_code == 0, result.output
    measured = json.loads(result.stdout)
    assert measured["exact_match"] == pytest.approx(results(reader / "run")["eval_exact_match"], abs=1e-6)


def row(context="the red dog", question="which color ?", text="red", start=4) -> dict:
    return {"context": context, "question": question, "answers": {"text": [text], "answer_start": [start]}}


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (
            [row(), row(start=5)],
            "row 1, column `answers`: the answer 'red' is not at its answer_start 5 in the context",
        ),
        ([row(), row(text="blue", start=0)], "the context does not hold it"),
        ([row(), {**row(), "answers": "red"}], "row 1, column `answers`: not SQuAD answers"),
        ([row(), {**row(), "question": None}], "row 1, column `question`: no text"),
        ([row(), {**row(), "answers": {"text": [], "answer_start": []}}], "row 1, column `answers`: no answer"),
    ],
    ids=["shifted", "absent", "not-squad", "no-question", "no-answer"],
)
def test_bad_answers_name_the_file_row_and_column(tmp_path, rows, expected):
    from autotrain.config.load import load_config
    from autotrain.data.qa import load_qa_splits
    from autotrain.errors import UserInputError

    write_rows(tmp_path / "data" / "train.jsonl", rows)
    write_rows(tmp_path / "data" / "valid.jsonl", [row()])
    config = write_config(tmp_path / "c.yml", CONFIG, model="m", project=tmp_path / "run", data=tmp_path / "data")
    with pytest.raises(UserInputError) as caught:
        load_qa_splits(load_config(config).config)
    assert "train.jsonl: " in str(caught.value) and expected in str(caught.value), caught.value

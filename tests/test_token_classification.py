"""token-classification: the tiny BERT learns to tag people and places (seqeval F1 far above an untrained
model's), predicts tags and entity spans with offsets, evaluates, and bad data is one line, exit 2."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from text_tasks_assets import ner_rows, results, trained_tiny_bert, write_config, write_rows

CONFIG = """\
task: token-classification
base_model: {model}
project_name: {project}
data:
  path: {data}
  valid_split: valid
training_args:
  epochs: 3
  batch_size: 16
  lr: 5.0e-3
  max_length: 24
  optimizer: adamw_torch
  logging_steps: 5
"""


def data_folder(folder: Path) -> Path:
    rng = random.Random(1)
    write_rows(folder / "train.jsonl", ner_rows(rng, 240))
    write_rows(folder / "valid.jsonl", ner_rows(rng, 60))
    return folder


def trained(root: Path) -> Path:
    """A token-classification run of the tiny BERT on people and places (trained once per session)."""
    return trained_tiny_bert(root, "token-run", "token-classification", CONFIG, data_folder)


@pytest.fixture(scope="session")
def tagger(tmp_path_factory):
    return trained(tmp_path_factory.getbasetemp() / "text-tasks")


@pytest.mark.slow
def test_learns_to_tag_people_and_places(tagger, cli, tmp_path):
    metrics = results(tagger / "run")
    assert metrics["eval_f1"] > 0.8 and metrics["eval_precision"] > 0.8 and metrics["eval_recall"] > 0.8, metrics
    config = json.loads((tagger / "run" / "config.json").read_text())
    assert set(config["id2label"].values()) == {"O", "B-PER", "I-PER", "B-LOC"}


@pytest.mark.slow
def test_predict_gives_tags_and_entity_spans(cli, tagger, tmp_path):
    words = tmp_path / "words.jsonl"
    write_rows(words, [{"tokens": ["we", "saw", "alice", "smith", "lives", "in", "paris", "."]}])
    result = cli("predict", tagger / "run", "-i", words)
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout.splitlines()[0])
    assert row["tags"] == ["O", "O", "B-PER", "I-PER", "O", "O", "B-LOC", "O"]
    text = "we saw alice smith lives in paris ."
    spans = {(e["entity"], e["start"], e["end"]) for e in row["entities"]}
    assert spans == {("PER", text.index("alice"), text.index(" lives")), ("LOC", text.index("paris"), len(text) - 2)}
    plain = tmp_path / "text.jsonl"
    write_rows(plain, [{"text": "bob stays near oslo ."}])
    result = cli("predict", tagger / "run", "-i", plain)
    entities = json.loads(result.stdout.splitlines()[0])["entities"]
    assert [(e["entity"], e["text"]) for e in entities] == [("PER", "bob"), ("LOC", "oslo")], entities
    assert all(0 < e["score"] <= 1 for e in entities)


@pytest.mark.slow
def test_evaluate_reports_seqeval_per_entity(cli, tagger, tmp_path):
    result = cli("evaluate", tagger / "run", "-i", tagger / "data" / "valid.jsonl", "--json")
    assert result.exit_code == 0, result.output
    measured = json.loads(result.stdout)
    assert measured["f1"] == pytest.approx(results(tagger / "run")["eval_f1"], abs=0.02)
    assert set(measured["entities"]) == {"PER", "LOC"}
    bad = write_rows(tmp_path / "bad.jsonl", [{"tokens": ["bob", "."], "tags": ["B-ORG", "O"]}])
    result = cli("evaluate", tagger / "run", "-i", bad)
    assert result.exit_code == 2
    assert "bad.jsonl: row 0, column `tags`: tag `B-ORG` is not in the tags the run was trained on" in result.output


GOOD = {"tokens": ["bob", "lives", "in", "rome"], "tags": ["B-PER", "O", "O", "B-LOC"]}


@pytest.mark.parametrize(
    ("train", "valid", "labels", "expected"),
    [
        ([GOOD, {"tokens": ["bob", "."], "tags": ["B-PER"]}], None, None, "row 1, column `tags`: 1 tags for 2 words"),
        ([GOOD, {"tokens": "bob lives", "tags": ["O"]}], None, None, "row 1, column `tokens`: must be a list of words"),
        ([GOOD], [GOOD, {"tokens": ["x"], "tags": ["B-ORG"]}], None, "valid.jsonl: row 1, column `tags`: tag `B-ORG`"),
        ([GOOD], None, ["O", "B-PER"], "train.jsonl: row 0, column `tags`: tag `B-LOC` is not in data.labels"),
        ([{"sentence": ["bob"], "tags": ["O"]}], None, None, "column `tokens` (for tokens) not found"),
    ],
    ids=["count", "not-a-list", "unseen-tag", "outside-labels", "missing-column"],
)
def test_bad_data_names_the_file_row_and_column(tmp_path, train, valid, labels, expected):
    from autotrain.config.load import load_config
    from autotrain.data.tokens import load_token_splits
    from autotrain.errors import UserInputError

    write_rows(tmp_path / "data" / "train.jsonl", train * 2)
    sets = []
    if valid:
        write_rows(tmp_path / "data" / "valid.jsonl", valid)
    else:
        sets.append("data.valid_split=null")
    if labels:
        sets.append(f"data.labels={json.dumps(labels)}")
    config = write_config(tmp_path / "c.yml", CONFIG, model="m", project=tmp_path / "run", data=tmp_path / "data")
    with pytest.raises(UserInputError) as caught:
        load_token_splits(load_config(config, sets).config)
    assert expected in str(caught.value) and "\n" not in str(caught.value)

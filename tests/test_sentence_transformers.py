"""sentence-transformers: a tiny BERT (mean pooling added) learns which sentences share a topic, through
sentence-transformers' trainer, losses and evaluators, for each of AutoTrain Advanced's trainers; each
metric ends far above the untrained model's on the same rows. predict gives embeddings and similarities,
evaluate runs the trainer's evaluator, and bad data is one line, exit 2."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from text_tasks_assets import (
    built,
    results,
    sentence_rows,
    tiny_bert,
    tiny_sentence_transformer,
    write_config,
    write_rows,
)

CONFIG = """\
task: sentence-transformers
trainer: {trainer}
base_model: {model}
project_name: {project}
data:
  path: {data}
  valid_split: valid
training_args:
  epochs: 3
  batch_size: 16
  lr: 5.0e-3
  max_length: 16
  optimizer: adamw_torch
  logging_steps: 10
"""
KINDS = {"pair_score": "score", "pair": "pair", "pair_class": "class", "triplet": "triplet"}
# trainer -> (its metric, how far above the untrained model's it must end)
WATCHED = {
    "pair_score": ("spearman_cosine", 0.4),
    "pair": ("cosine_ndcg@10", 0.15),
    "pair_class": ("cosine_ap", 0.2),
    "triplet": ("cosine_accuracy", 0.3),
}


def data_folder(kind: str):
    def write(folder: Path) -> Path:
        rng = random.Random(4)
        write_rows(folder / "train.jsonl", sentence_rows(rng, 240, kind))
        write_rows(folder / "valid.jsonl", sentence_rows(rng, 48, kind))
        return folder

    return write


def trained(root: Path, trainer: str) -> Path:
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    def train(folder: Path) -> Path:
        model = built(root, "tiny-bert", tiny_bert)
        data = built(root, f"sentences-{trainer}", data_folder(KINDS[trainer]))
        config = write_config(folder / "c.yml", CONFIG, trainer=trainer, model=model, project=folder / "run", data=data)
        result = CliRunner().invoke(app, ["sentence-transformers", "--config", str(config)])
        assert result.exit_code == 0, result.output
        return folder / "run"

    return built(root, f"st-{trainer}-run", train)


def untrained(root: Path, trainer: str) -> dict:
    """The trainer's evaluator on the untrained tiny BERT (with mean pooling) and the same validation rows."""
    from sentence_transformers import SentenceTransformer

    from autotrain.config.load import load_config
    from autotrain.data.sentences import load_sentence_splits
    from autotrain.trainers.sentence_transformers import build_evaluator

    data, model = root / f"sentences-{trainer}", built(root, "tiny-bert", tiny_bert)
    config = write_config(root / f"{trainer}.yml", CONFIG, trainer=trainer, model=model, project="x", data=data)
    splits = load_sentence_splits(load_config(config).config)
    return build_evaluator(trainer, splits.valid)(SentenceTransformer(str(model), device="cpu"))


@pytest.mark.slow
@pytest.mark.parametrize("trainer", list(WATCHED))
def test_learns_what_goes_together(trainer, tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "text-tasks"
    run = trained(root, trainer)
    metric, margin = WATCHED[trainer]
    after, before = results(run)[f"eval_{metric}"], untrained(root, trainer)[metric]
    assert after > before + margin, (metric, before, after)
    assert (run / "modules.json").is_file() and (run / "1_Pooling").is_dir()  # a sentence-transformers model


@pytest.mark.slow
def test_predict_embeds_and_scores(cli, tmp_path_factory, tmp_path):
    run = trained(tmp_path_factory.getbasetemp() / "text-tasks", "triplet")
    rows = [{"sentence1": "the cat dog is .", "sentence2": "a cow goat was .", "sentence3": "a red blue was ."}]
    result = cli("predict", run, "-i", write_rows(tmp_path / "t.jsonl", rows))
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["similarity"] > row["similarity_sentence3"] + 0.2, row
    result = cli("predict", run, "-i", write_rows(tmp_path / "s.csv", [{"sentence1": "the cat dog is ."}]))
    embedding = json.loads(result.stdout)["embedding"]
    assert len(embedding) == 32 and all(isinstance(x, float) for x in embedding)


@pytest.mark.slow
def test_evaluate_runs_the_trainers_evaluator(cli, tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "text-tasks"
    run = trained(root, "pair_score")
    result = cli("evaluate", run, "-i", root / "sentences-pair_score" / "valid.jsonl", "--json")
    assert result.exit_code == 0, result.output
    measured = json.loads(result.stdout)
    assert measured["spearman_cosine"] == pytest.approx(results(run)["eval_spearman_cosine"], abs=1e-4)


@pytest.mark.slow
def test_a_sentence_transformers_model_as_base(tmp_path_factory, cli, tmp_path):
    """base_model may be a sentence-transformers model itself (its own pooling kept)."""
    root = tmp_path_factory.getbasetemp() / "text-tasks"
    bert = built(root, "tiny-bert", tiny_bert)
    base = built(root, "tiny-st", lambda folder: tiny_sentence_transformer(folder, bert))
    data = built(root, "sentences-triplet", data_folder("triplet"))
    config = write_config(
        tmp_path / "c.yml", CONFIG, trainer="triplet", model=base, project=tmp_path / "run", data=data
    )
    result = cli("sentence-transformers", "--config", config, "--set", "training_args.epochs=1")
    assert result.exit_code == 0, result.output
    assert results(tmp_path / "run")["eval_cosine_accuracy"] > 0.8


@pytest.mark.parametrize(
    ("trainer", "rows", "expected"),
    [
        ("pair_score", [{"sentence1": "a", "sentence2": "b", "score": "x"}], "row 0, column `score`: must be a number"),
        ("pair_class", [{"sentence1": "a", "sentence2": "b", "label": 0.5}], "row 0, column `label`: must be a class"),
        ("triplet", [{"sentence1": "a", "sentence2": "b"}], "column `sentence3` (for sentence3) not found"),
        ("pair", [{"sentence1": "a", "sentence2": None}], "row 0, column `sentence2`: no text"),
    ],
    ids=["score-not-a-number", "class-not-a-class", "missing-negative", "no-text"],
)
def test_bad_data_names_the_file_row_and_column(tmp_path, trainer, rows, expected):
    from autotrain.config.load import load_config
    from autotrain.data.sentences import load_sentence_splits
    from autotrain.errors import UserInputError

    write_rows(tmp_path / "data" / "train.jsonl", rows * 3)
    write_rows(tmp_path / "data" / "valid.jsonl", rows)
    config = write_config(
        tmp_path / "c.yml", CONFIG, trainer=trainer, model="m", project=tmp_path / "run", data=tmp_path / "data"
    )
    with pytest.raises(UserInputError) as caught:
        load_sentence_splits(load_config(config).config)
    assert "train.jsonl: " in str(caught.value) and expected in str(caught.value), caught.value


def test_config_rules_name_both_fields(cli, tmp_path):
    config = write_config(tmp_path / "c.yml", CONFIG, trainer="pair", model="m", project=tmp_path / "run", data="d")
    result = cli("validate", config, "--set", "training_args.loss=cosent", "--set", "data.column_mapping.target=s")
    assert result.exit_code == 2
    assert "`training_args.loss: cosent` does not fit `trainer: pair`; it takes: mnrl" in result.stderr
    assert "data.column_mapping.target: `trainer: pair` reads sentence1, sentence2, not `target`" in result.stderr
    result = cli("validate", config, "--set", "training_args.batch_size=1")
    assert result.exit_code == 2 and "`training_args.batch_size` must be at least 2" in result.stderr

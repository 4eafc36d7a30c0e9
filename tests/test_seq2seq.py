"""seq2seq: a tiny T5 learns to name the topic of its input and repeat its first topic word (ROUGE and
BLEU far above the untrained model's), fully and as a LoRA adapter merged at the end; predict generates,
evaluate scores, and bad data is one line, exit 2."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from text_tasks_assets import built, results, seq2seq_rows, tiny_t5, write_config, write_rows

CONFIG = """\
task: seq2seq
base_model: {model}
project_name: {project}
data:
  path: {data}
  valid_split: valid
  column_mapping:
    target: summary
training_args:
  epochs: 4
  batch_size: 16
  lr: 1.0e-2
  max_length: 16
  max_target_length: 8
  optimizer: adamw_torch
  logging_steps: 20
"""
LORA = """\
peft:
  r: 8
  alpha: 16
  target_modules: all-linear
  merge_adapter: true
"""


def data_folder(folder: Path) -> Path:
    rng = random.Random(3)
    write_rows(folder / "train.jsonl", seq2seq_rows(rng, 300))
    write_rows(folder / "valid.jsonl", seq2seq_rows(rng, 40))
    return folder


def trained(root: Path, name: str, extra: str = "", sets: tuple[str, ...] = ()):
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    def train(folder: Path) -> Path:
        model = built(root, "tiny-t5", tiny_t5)
        data = built(root, "seq2seq-data", data_folder)
        config = write_config(folder / "config.yml", CONFIG + extra, model=model, project=folder / "run", data=data)
        args = ["seq2seq", "--config", str(config), *[a for s in sets for a in ("--set", s)]]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        return folder / "run"

    return built(root, name, train)


@pytest.fixture(scope="session")
def writer(tmp_path_factory):
    return trained(tmp_path_factory.getbasetemp() / "text-tasks", "seq2seq-run")


def untrained_scores(root: Path) -> dict:
    """ROUGE / BLEU of the tiny T5 before any training, on the same validation rows."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from autotrain.trainers.seq2seq import generation_scores

    model_dir, data = built(root, "tiny-t5", tiny_t5), built(root, "seq2seq-data", data_folder)
    rows = [json.loads(line) for line in (data / "valid.jsonl").read_text().splitlines()]
    tokenizer, model = AutoTokenizer.from_pretrained(model_dir), AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    encoded = tokenizer([r["text"] for r in rows], padding=True, return_tensors="pt")
    with torch.inference_mode():
        ids = model.generate(**encoded, max_new_tokens=8)
    predicted = tokenizer.batch_decode(ids, skip_special_tokens=True)
    return generation_scores(predicted, [r["summary"] for r in rows])


@pytest.mark.slow
def test_learns_to_write_the_target(writer, tmp_path_factory):
    metrics = results(writer)
    before = untrained_scores(tmp_path_factory.getbasetemp() / "text-tasks")
    assert before["rouge1"] < 15, before  # random weights write words of the vocabulary at random
    assert metrics["eval_rouge1"] > 55 and metrics["eval_rouge2"] > 25 and metrics["eval_bleu"] > 10, metrics


@pytest.mark.slow
def test_lora_adapter_learns_and_is_merged(cli, tmp_path_factory, tmp_path):
    root = tmp_path_factory.getbasetemp() / "text-tasks"
    run = trained(root, "seq2seq-lora-run", LORA, ("training_args.lr=2.0e-2", "training_args.epochs=3"))
    assert (run / "adapter_config.json").is_file() and not (run / "config.json").is_file()
    assert (run / "merged" / "model.safetensors").is_file()
    assert results(run)["eval_rouge1"] > 30, results(run)  # the adapter alone, on a frozen random T5
    result = cli("evaluate", run, "-i", root / "seq2seq-data" / "valid.jsonl", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rouge1"] == pytest.approx(results(run)["eval_rouge1"], abs=1e-6)
    result = cli("export", run, "-f", "gguf", "-o", tmp_path / "out")  # GGUF is for LLMs
    assert result.exit_code == 2 and "it exports as `--format merged` only" in result.output, result.output
    result = cli("export", run, "-o", tmp_path / "out")  # merged, the default here: merged/ copied and checked
    assert result.exit_code == 0 and "parity passed" in result.output, result.output


@pytest.mark.slow
def test_predict_generates(cli, writer, tmp_path_factory):
    data = built(tmp_path_factory.getbasetemp() / "text-tasks", "seq2seq-data", data_folder)
    result = cli("predict", writer, "-i", data / "valid.jsonl")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    references = [json.loads(line)["summary"] for line in (data / "valid.jsonl").read_text().splitlines()]
    topics = sum(r["generated"].split()[:2] == ref.split()[:2] for r, ref in zip(rows, references, strict=True))
    assert topics / len(rows) > 0.5, [r["generated"] for r in rows]  # the topic: 1 in 6 by chance


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([{"text": "a b", "summary": "c"}, {"text": "a b", "summary": None}], "row 1, column `summary`: no text"),
        ([{"text": "a b", "summary": "c"}, {"text": ["a"], "summary": "c"}], "row 1, column `text`: must be text"),
        ([{"text": "a b", "headline": "c"}], "column `summary` (for target) not found"),
    ],
    ids=["no-target", "not-text", "missing-column"],
)
def test_bad_data_names_the_file_row_and_column(tmp_path, rows, expected):
    from autotrain.config.load import load_config
    from autotrain.data.seq2seq import load_seq2seq_splits
    from autotrain.errors import UserInputError

    write_rows(tmp_path / "data" / "train.jsonl", rows)
    write_rows(tmp_path / "data" / "valid.jsonl", rows[:1])
    config = write_config(tmp_path / "c.yml", CONFIG, model="m", project=tmp_path / "run", data=tmp_path / "data")
    with pytest.raises(UserInputError) as caught:
        load_seq2seq_splits(load_config(config).config)
    assert "train.jsonl: " in str(caught.value) and expected in str(caught.value), caught.value

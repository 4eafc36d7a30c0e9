"""AutoTrain Advanced's 14 example configs of the text tasks beyond classification (tests/advanced_configs/,
copied unchanged from its repository): each validates and migrates, and each trains to completion (its own
epochs, batch size, learning rate, sequence lengths and splits) on local data of its own columns and splits,
with its metric above chance.

What changes on the command line: the hub ids (base_model, data.path) become local paths, project_name a
temporary folder, and what this machine cannot do is set aside: fp16 without a CUDA GPU, tensorboard logging
(`log: none`) and pushing to the hub. The base models are the tiny ones of the task tests after their
learning runs, standing in for the pre-trained checkpoints the configs name: at the configs' learning rate
of 2e-5 a randomly initialised model would not move in a few dozen steps, as bert-base would not need to.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import test_extractive_qa
import test_sentence_transformers
import test_seq2seq
import test_text_regression
import test_token_classification
import yaml
from text_tasks_assets import ner_rows, qa_rows, regression_rows, results, sentence_rows, seq2seq_rows, write_rows

ADVANCED = Path(__file__).resolve().parent / "advanced_configs"
FAMILIES = {
    "text_regression": "text-regression",
    "token_classification": "token-classification",
    "extractive_question_answering": "extractive-qa",
    "seq2seq": "seq2seq",
    "sentence_transformers": "sentence-transformers",
}
CONFIGS = sorted(p for p in ADVANCED.glob("*/*.yml") if p.parent.name in FAMILIES)
HUB_ENV = {"HF_USERNAME": "me", "HF_TOKEN": "hf_example"}
# The one example whose data placeholder is an absolute path: `validate` says it is not on this machine.
NOT_HERE = {
    "sentence_transformers/local_dataset.yml": "data.path: `/path/to/your/dataset` does not exist on this machine"
}


def validated(result, path: Path) -> bool:
    """Whether `validate` passed; for the example whose data cannot be here, whether it said only that."""
    missing = NOT_HERE.get(name(path))
    if missing is None:
        return result.exit_code == 0
    return result.exit_code == 2 and missing in result.stderr and "1 problem found" in result.stderr


def name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_all_fourteen_are_here():
    counts = {family: sum(p.parent.name == family for p in CONFIGS) for family in FAMILIES}
    assert counts == {
        "text_regression": 2,
        "token_classification": 2,
        "extractive_question_answering": 2,
        "seq2seq": 2,
        "sentence_transformers": 6,
    }


@pytest.mark.parametrize("path", CONFIGS, ids=name)
def test_validates_as_its_task(cli, placeholder_data, path):
    result = cli("validate", path, env=HUB_ENV)
    assert validated(result, path), result.output
    if name(path) not in NOT_HERE:
        assert f"ok: {FAMILIES[path.parent.name]}" in result.stdout and "(AutoTrain Advanced format)" in result.stdout


@pytest.mark.parametrize("path", CONFIGS, ids=name)
def test_migrates_to_a_native_config_that_validates(cli, placeholder_data, path, tmp_path):
    out = tmp_path / "native.yml"
    result = cli("migrate", path, "-o", out, env=HUB_ENV)
    assert result.exit_code == 0, result.output
    native = yaml.safe_load(out.read_text())
    assert "params" not in native and native["task"] == FAMILIES[path.parent.name]
    advanced = yaml.safe_load(path.read_text())
    assert native["training_args"]["epochs"] == advanced["params"]["epochs"]
    assert native["training_args"]["max_length"] == advanced["params"]["max_seq_length"]
    if "max_doc_stride" in advanced["params"]:
        assert native["training_args"]["doc_stride"] == advanced["params"]["max_doc_stride"]
    if native["task"] == "sentence-transformers":
        assert native["trainer"] == advanced["task"].split(":")[1]
    result = cli("validate", out, env=HUB_ENV)
    assert validated(result, path), result.output
    assert "(AutoTrain Advanced format)" not in result.stdout


def test_column_names_and_params_of_the_tasks_translate(cli):
    """AutoTrain Advanced's names for these tasks' columns become the native ones, `max_doc_stride` the
    window stride, and a trainer in the task name the sentence-transformers trainer."""
    result = cli("migrate", ADVANCED / "token_classification" / "local_dataset.yml", env=HUB_ENV)
    assert "    tokens: tokens\n    tags: tags\n" in result.stdout
    result = cli("migrate", ADVANCED / "extractive_question_answering" / "hub_dataset.yml", env=HUB_ENV)
    assert "    context: context\n    question: question\n    answers: answers\n" in result.stdout
    assert "  doc_stride: 128\n" in result.stdout
    result = cli("migrate", ADVANCED / "sentence_transformers" / "local_dataset.yml", env=HUB_ENV)
    assert "trainer: pair_score\n" in result.stdout
    assert "    sentence1: input_sentence\n    sentence2: target_sentence\n    target: score\n" in result.stdout


# --- training to completion (slow) ----------------------------------------------------------------------

# AutoTrain Advanced's native columns -> the key of the synthetic rows that fills it
ROW_KEYS = {"target": {"text-regression": "score", "seq2seq": "summary"}}
SENTENCE_KINDS = {"pair": "pair", "qa": "pair", "pair_score": "score", "pair_class": "class", "triplet": "triplet"}


def rows_for(task: str, trainer: str | None, rng: random.Random, count: int) -> list[dict]:
    if task == "text-regression":
        return regression_rows(rng, count)
    if task == "token-classification":
        return ner_rows(rng, count)
    if task == "extractive-qa":
        return qa_rows(rng, count)
    if task == "seq2seq":
        return seq2seq_rows(rng, count)
    rows = sentence_rows(rng, count, SENTENCE_KINDS[trainer])
    return [{("target" if k in ("score", "label") else k): v for k, v in row.items()} for row in rows]


def local_data(path: Path, tmp: Path, env: dict) -> Path:
    """A folder with one file per split the config names (SUBSET:SPLIT -> SUBSET/SPLIT.jsonl), its rows under
    the dataset column names its column_mapping gives."""
    from autotrain.config.load import load_config

    cfg = load_config(path, environ=env).config
    trainer = getattr(cfg, "trainer", None)
    columns = cfg.data.column_mapping  # native column -> the config's dataset column
    folder = tmp / "data"
    rng = random.Random(7)
    for split, count in ((cfg.data.train_split, 120), (cfg.data.valid_split, 40)):
        if not split:
            continue
        subset, _, part = split.rpartition(":")
        rows = rows_for(cfg.task, trainer, rng, count)
        key_of = {native: ROW_KEYS.get(native, {}).get(cfg.task, native) for native in columns}
        renamed = [{columns[native]: row[key] for native, key in key_of.items()} for row in rows]
        write_rows(folder / subset / f"{part}.jsonl", renamed)
    return folder


def base_model(task: str, trainer: str | None, root: Path) -> Path:
    """The tiny model of the task's own test, after its learning run."""
    if task == "text-regression":
        return test_text_regression.trained(root) / "run"
    if task == "token-classification":
        return test_token_classification.trained(root) / "run"
    if task == "extractive-qa":
        return test_extractive_qa.trained(root) / "run"
    if task == "seq2seq":
        return test_seq2seq.trained(root, "seq2seq-run")
    return test_sentence_transformers.trained(root, "pair" if trainer == "qa" else trainer)


# task (or sentence-transformers trainer) -> (metric, the value it must beat: chance, or what an untrained
# model gets on these rows)
ABOVE_CHANCE = {
    "text-regression": ("r2", 0.3),  # predicting the mean: 0
    "token-classification": ("f1", 0.5),  # tagging at random finds almost no whole entity
    "extractive-qa": ("exact_match", 30.0),  # one of ~20 context words: about 5
    "seq2seq": ("rouge1", 30.0),  # the untrained tiny T5: below 15 (tests/test_seq2seq.py)
    "pair_score": ("spearman_cosine", 0.3),  # no relation: 0
    "pair": ("cosine_mrr@10", 0.15),  # a random ranking of 40: about 0.07
    "qa": ("cosine_mrr@10", 0.15),
    "pair_class": ("cosine_accuracy", 0.7),  # half the pairs share a topic: 0.5
    "triplet": ("cosine_accuracy", 0.8),  # a coin: 0.5
}


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=name)
def test_trains_to_completion_above_chance(cli, path, tmp_path, tmp_path_factory, monkeypatch):
    import torch

    advanced = yaml.safe_load(path.read_text())
    task = FAMILIES[path.parent.name]
    trainer = advanced["task"].split(":")[1] if ":" in advanced["task"] else None
    root = tmp_path_factory.getbasetemp() / "text-tasks"
    base = base_model(task, trainer, root)
    overrides = [
        f"base_model={base}",
        f"data.path={local_data(path, tmp_path, HUB_ENV)}",
        f"project_name={tmp_path / 'run'}",
        "log=none",
        "hub.push_to_hub=false",
    ]
    if advanced["params"]["mixed_precision"] == "fp16" and not torch.cuda.is_available():
        overrides.append("training_args.mixed_precision=no")  # fp16 needs a CUDA GPU
    monkeypatch.chdir(tmp_path)
    result = cli(task, "--config", path, *sets(*overrides), env=HUB_ENV)
    assert result.exit_code == 0, result.output
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["epoch"] == pytest.approx(advanced["params"]["epochs"])  # its own schedule, to the end
    metric, chance = ABOVE_CHANCE[trainer or task]
    assert results(tmp_path / "run")[f"eval_{metric}"] > chance, results(tmp_path / "run")

"""The data preview: its loss marks are the labels the trainer's collator builds for the same examples."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent
TINY = ROOT / "assets" / "tiny-llama"
ROWS = [
    ("what color is the grape?", "the grape is purple."),
    ("what color is the sea?", "the sea is blue, and it is very very large and deep and wide."),
    ("what color is the grass?", "green."),
]


def write(tmp_path: Path, rows: list[dict], base: Path = TINY, **data) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(base),
        "project_name": str(tmp_path / "run"),
        "log": "none",
        "data": {"path": str(path), **data},
        "training_args": {"batch_size": 3, "max_length": 24, "padding_free": False, "mixed_precision": "no"},
    }
    out = tmp_path / "config.yml"
    out.write_text(yaml.safe_dump(config), encoding="utf-8")
    return out


def loaded(path: Path):
    from autotrain.config.load import load_config
    from autotrain.training.plan import resolve_plan

    cfg = load_config(path, []).config
    return cfg, resolve_plan(cfg)


MESSAGES = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in ROWS]
PROMPTS = [{"prompt": q, "completion": a} for q, a in ROWS]
TEXT = [{"text": f"{q} {a}"} for q, a in ROWS]


@pytest.mark.parametrize("rows", [MESSAGES, PROMPTS, TEXT], ids=["messages", "prompt-completion", "text"])
def test_loss_marks_equal_the_collators_labels(tmp_path, rows):
    from autotrain.trainers import build_trainer
    from autotrain.trainers.llm.preview import preview_llm

    cfg, plan = loaded(write(tmp_path, rows))
    record = preview_llm(cfg, plan, count=3)
    trainer, _ = build_trainer(cfg, plan, [])
    kept = len(trainer.train_dataset)  # examples cut to nothing trained are dropped by both
    assert len(record["examples"]) == kept == 3 - record["summary"]["dropped_examples"]
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(kept)])
    for i, example in enumerate(record["examples"]):
        n = example["tokens"]
        assert batch["input_ids"][i, :n].tolist() == example["input_ids"]
        assert (batch["labels"][i, :n] != -100).int().tolist() == example["loss_mask"]
        assert (batch["labels"][i, n:] == -100).all()  # padding carries no loss
    summary = record["summary"]
    assert summary["trained_tokens"] == int((batch["labels"] != -100).sum())
    assert summary["cut_examples"] == sum(len(ids) > 24 for ids in _uncut(cfg, plan))
    if rows is not TEXT:  # the prompt carries no loss, the answer (completion or assistant turn) does
        first = record["examples"][0]["segments"]
        assert [trained for _, trained in first] == [False, True]
        assert "what color is the" in first[0][0] and first[0][0].endswith("<|im_start|>assistant\n")
        assert first[1][0].startswith("the")
    else:
        assert all(sum(example["loss_mask"]) == example["tokens"] for example in record["examples"])


def _uncut(cfg, plan) -> list[list[int]]:
    from autotrain.data.llm import load_llm_split
    from autotrain.trainers.common import build_tokenizer
    from autotrain.trainers.llm.preview import use_chat_template
    from autotrain.trainers.llm.sft_data import label_rows

    tokenizer = build_tokenizer(cfg)
    use_chat_template(tokenizer, cfg)
    return label_rows(cfg, tokenizer, load_llm_split(cfg, "train").to_dict())[0]


def test_a_chat_dataset_without_a_chat_template_is_flagged(tmp_path, cli):
    base = tmp_path / "no-template"
    shutil.copytree(TINY, base)
    (base / "chat_template.jinja").unlink()
    result = cli("llm", "--config", write(tmp_path, MESSAGES, base=base), "--preview", "1")
    assert result.exit_code == 0, result.output
    assert "warning: data.chat_template: the tokenizer of base_model has no chat template" in result.stdout
    # with its template the same data is not flagged, and plain text never is
    assert "warning" not in cli("llm", "--config", write(tmp_path, MESSAGES), "--preview", "1").stdout
    assert "warning" not in cli("llm", "--config", write(tmp_path, TEXT, base=base), "--preview", "1").stdout


def test_preview_marks_text_without_loss_and_counts_cuts(tmp_path, cli):
    from autotrain.cli.main import _resume_value

    assert _resume_value(["--preview"]) == ["--preview", "5"]  # `--preview` alone shows 5
    result = cli("llm", "--config", write(tmp_path, PROMPTS, chat_template="none"), "--preview", "5")
    assert result.exit_code == 0, result.output
    # TRL joins a plain prompt and its completion as they are: the preview shows the missing space
    assert "\u00abwhat color is the grape?\u00bbthe grape is purple." in result.stdout
    assert "cut_examples: 1" in result.stdout  # the long answer


def test_preference_pairs_side_by_side(tmp_path, cli):
    rows = [{"prompt": q, "chosen": a, "rejected": "no idea."} for q, a in ROWS]
    path = write(tmp_path, rows)
    cfg = yaml.safe_load(path.read_text())
    cfg["trainer"] = "dpo"
    cfg["training_args"].pop("padding_free")
    path.write_text(yaml.safe_dump(cfg))
    result = cli("llm", "--config", path, "--preview", "2")
    assert result.exit_code == 0, result.output
    assert "chosen   (" in result.stdout and "rejected (" in result.stdout and "the grape is purple." in result.stdout
    assert "prompt (8 tokens, no loss): what color is the grape?" in result.stdout

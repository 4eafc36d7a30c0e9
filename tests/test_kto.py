"""`trainer: kto`: unpaired preference data (prompt, completion, label) through TRL's KTOTrainer.

The tiny run trains the shipped tiny Llama a few steps (full fine-tune, so the reference is a second copy);
the slow one takes LoRA steps on SmolLM2-135M-Instruct with message lists, as tests/test_real_model.py does
for ORPO and DPO."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_llm import DATA, assert_weights_changed, losses, train, write_config


def unpaired(tmp_path: Path, rows: int = 32) -> Path:
    """The preference pairs of tests/assets, unpaired: each good answer labelled true, each bad one false."""
    pairs = [json.loads(line) for line in (DATA / "preferences.jsonl").read_text().splitlines()[: rows // 2]]
    out = tmp_path / "unpaired.jsonl"
    with out.open("w") as f:
        for pair in pairs:
            f.write(json.dumps({"question": pair["question"], "answer": pair["good"], "ok": True}) + "\n")
            f.write(json.dumps({"question": pair["question"], "answer": pair["bad"], "ok": False}) + "\n")
    return out


def kto_data(path: Path) -> dict:
    return {"path": str(path), "column_mapping": {"prompt": "question", "completion": "answer", "label": "ok"}}


def test_kto_full_finetune(tmp_path):
    run = tmp_path / "run"
    train(
        write_config(
            tmp_path, trainer="kto", data=kto_data(unpaired(tmp_path)), training_args={"beta": 0.1, "max_steps": 2}
        )
    )
    assert all(math.isfinite(x) for x in losses(run))
    assert_weights_changed(run)
    plan = json.loads((run / "run.json").read_text())["plan"]
    assert plan["training_arguments"]["per_device_train_batch_size"] == 4


def test_kto_refuses_labels_that_are_not_booleans_before_loading_weights(tmp_path, cli):
    data = tmp_path / "words.jsonl"
    data.write_text("".join(json.dumps({"question": "q", "answer": "a", "ok": w}) + "\n" for w in ("yes", "no")))
    result = cli("llm", "--config", write_config(tmp_path, trainer="kto", data=kto_data(data)))
    assert result.exit_code == 2
    assert "column `label` must hold true/false (or 1/0)" in result.stderr and "'yes'" in result.stderr


def test_kto_config_rules(tmp_path, cli):
    """A batch of one cannot estimate KTO's KL term; pairs-only settings are not KTO's."""
    config = write_config(
        tmp_path, trainer="kto", data=kto_data(unpaired(tmp_path)), training_args={"batch_size": 1, "beta": 0}
    )
    result = cli("validate", config)
    assert result.exit_code == 2
    assert "`trainer: kto` needs `training_args.batch_size` of at least 2" in result.stderr
    assert "`training_args.beta` must be above 0 for `trainer: kto`" in result.stderr
    pairs = write_config(tmp_path, trainer="kto", data={"path": str(DATA / "preferences.jsonl"),
                         "column_mapping": {"prompt": "question", "chosen": "good", "rejected": "bad"}})  # fmt: skip
    result = cli("validate", pairs)
    assert result.exit_code == 2 and "`chosen` is not a column for `trainer: kto`" in result.stderr


@pytest.mark.slow
def test_kto_on_message_lists_with_smollm2(cli, smollm2, tmp_path, monkeypatch):
    from test_real_model import PREFERENCES, logged_losses, lora_b_norms, write_jsonl
    from test_real_model import train as train_real

    monkeypatch.chdir(tmp_path)
    rows = [
        {
            "prompt": [{"role": "user", "content": question}],
            "completion": [{"role": "assistant", "content": answer}],
            "label": label,
        }
        for question, good, bad in PREFERENCES
        for answer, label in ((good, True), (bad, False))
    ]
    data = write_jsonl(tmp_path / "unpaired.jsonl", rows)
    columns = {"prompt": "prompt", "completion": "completion", "label": "label"}
    run = train_real(
        cli, tmp_path, smollm2, "kto", data, columns, max_steps=2, batch_size=2, lr=1e-3, max_prompt_length=32
    )
    found = logged_losses(run)
    assert len(found) == 2 and all(math.isfinite(loss) and abs(loss) < 1e3 for loss in found), found
    assert all(norm > 0 for norm in lora_b_norms(run))

"""SFT batching: length-grouped batches by default (decided in the plan), padding-free batches where the
attention kernel keeps samples apart, and an option to turn both off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from autotrain.config.load import load_data
from autotrain.config.yaml_source import Locator
from autotrain.training.batching import TokenBudgetBatches, length_grouped_batches
from autotrain.training.plan import padding_free, resolve_plan
from autotrain.training.precision import Precision

ASSETS = Path(__file__).parent / "assets"
TINY = str(ASSETS / "tiny-llama")


def _config(tmp_path: Path, trainer: str = "sft", data: Path | None = None, **training):
    data = data or ASSETS / "data" / "text.jsonl"
    raw = {
        "task": "llm",
        "trainer": trainer,
        "base_model": TINY,
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(data), "column_mapping": {"text": "text"}},
        "training_args": {"max_steps": 2, "batch_size": 4, "mixed_precision": "no", **training},
    }
    if trainer in ("dpo", "orpo"):
        raw["data"] = {
            "path": str(ASSETS / "data" / "preferences.jsonl"),
            "column_mapping": {"prompt": "question", "chosen": "good", "rejected": "bad"},
        }
    if data.name == "varied.jsonl":
        raw["data"] = {"path": str(data), "column_mapping": {"messages": "messages"}, "chat_template": "chatml"}
    return load_data(raw, Locator("config.yml"), environ={}).config


def test_sft_groups_by_length_by_default(tmp_path):
    plan = resolve_plan(_config(tmp_path), device="cpu")
    assert plan.length_grouped and plan.record()["length_grouped_batches"] is True
    assert not plan.padding_free  # CPU: padding-free would cost a block-diagonal mask as long as the batch


@pytest.mark.parametrize(
    "trainer, training",
    [("sft", {"length_grouping": False}), ("sft", {"packing": True}), ("dpo", {}), ("clm", {})],
    ids=["turned-off", "packing", "dpo", "clm"],
)
def test_random_batches_where_grouping_does_not_apply(tmp_path, trainer, training):
    assert not resolve_plan(_config(tmp_path, trainer, **training), device="cpu").length_grouped


def _lengths(n: int = 500) -> list[int]:
    gen = torch.Generator().manual_seed(1)
    return (16 * 32 ** torch.rand(n, generator=gen)).long().tolist()  # 16 to 512, log-uniform


def test_length_grouped_batches_cover_every_sample_once_in_as_many_steps():
    lengths = _lengths()
    batches = length_grouped_batches(lengths, batch_size=8, seed=0)
    assert len(batches) <= -(-len(lengths) // 8)  # no more optimizer steps than random batches
    epochs = []
    for epoch in range(3):
        batches.set_epoch(epoch)
        epoch_batches = list(batches)
        assert len(epoch_batches) == len(batches)
        assert sorted(i for b in epoch_batches for i in b) == list(range(len(lengths)))
        for batch in epoch_batches:  # similar lengths, within the budget unless alone
            padded = len(batch) * max(lengths[i] for i in batch)
            assert padded <= batches.budget or len(batch) == 1
        epochs.append(epoch_batches)
    assert epochs[0] != epochs[1]  # a new order each epoch
    batches.set_epoch(1)
    assert list(batches) == epochs[1]  # the same order for the same epoch: resume finds its place
    random_padded = sum(8 * max(lengths[i : i + 8]) for i in range(0, len(lengths), 8))
    grouped_padded = sum(len(b) * max(lengths[i] for i in b) for b in epochs[0])
    assert grouped_padded < 0.6 * random_padded


def test_a_sample_longer_than_the_budget_is_a_batch_of_its_own():
    batches = TokenBudgetBatches([100, 10, 10, 10], budget=40, seed=0)
    assert sorted(map(sorted, batches)) == [[0], [1, 2, 3]]


def test_padding_free_only_with_flash_attention_on_cuda(tmp_path):
    cuda = Precision("bf16", "cuda")
    flash = _config(tmp_path).model_copy(update={"attn_implementation": "flash_attention_2"})
    assert padding_free(flash, cuda)
    assert not padding_free(flash, Precision("no", "cpu"))
    assert not padding_free(_config(tmp_path), cuda)  # sdpa
    off = _config(tmp_path, length_grouping=False).model_copy(update={"attn_implementation": "flash_attention_2"})
    assert not padding_free(off, cuda)


def _varied_chat(path: Path, rows: int = 160) -> Path:
    """Chat samples from a few to a few hundred tokens long."""
    gen = torch.Generator().manual_seed(0)
    words = ["the", "sea", "is", "blue", "and", "the", "grass", "is", "green", "while", "the", "sky", "is", "grey"]
    with path.open("w") as f:
        for i in range(rows):
            n = int(4 * 1.25 ** torch.randint(0, 20, (), generator=gen).item())
            answer = " ".join(words[(i + k) % len(words)] for k in range(n))
            f.write(
                json.dumps(
                    {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": answer}]}
                )
            )
            f.write("\n")
    return path


def _trainer(tmp_path: Path, **training):
    from autotrain.trainers.llm.sft import build_trainer

    cfg = _config(tmp_path, data=_varied_chat(tmp_path / "varied.jsonl"), max_length=256, **training)
    return build_trainer(cfg, resolve_plan(cfg, device="cpu"), callbacks=[])


def test_grouped_batches_hold_less_padding_in_as_many_steps(tmp_path):
    grouped, random = _trainer(tmp_path), _trainer(tmp_path, length_grouping=False)
    grouped_batches, random_batches = list(grouped.get_train_dataloader()), list(random.get_train_dataloader())
    assert len(grouped_batches) <= len(random_batches)
    assert sum(len(b["input_ids"]) for b in grouped_batches) == len(grouped.train_dataset)  # each sample once

    def padding(batches) -> float:
        pads = sum(int((b["attention_mask"] == 0).sum()) for b in batches)
        return pads / sum(b["attention_mask"].numel() for b in batches)

    assert padding(grouped_batches) < 0.5 * padding(random_batches)


def test_padding_free_batches_keep_samples_apart(tmp_path):
    """The same samples flattened into one sequence give the same loss as padded: no attention across them."""
    from autotrain.trainers.llm.sft import use_padding_free_batches

    trainer = _trainer(tmp_path, length_grouping=False)
    samples = [trainer.train_dataset[i] for i in range(4)]
    padded = trainer.data_collator(samples)
    use_padding_free_batches(trainer)
    flat = trainer.data_collator(samples)
    assert flat["input_ids"].shape[0] == 1 and "attention_mask" not in flat
    assert flat["input_ids"].shape[1] == sum(len(s["input_ids"]) for s in samples)  # no padding at all
    assert (flat["position_ids"][0] == 0).sum() == 4  # each sample starts its own positions
    model = trainer.model.eval()
    with torch.no_grad():
        loss_padded = model(**padded).loss
        loss_flat = model(**{k: v for k, v in flat.items() if k in ("input_ids", "labels", "position_ids")}).loss
    torch.testing.assert_close(loss_flat, loss_padded, rtol=1e-5, atol=1e-6)

"""SFT batching: padding-free by default (a batch's samples packed into rows, or one sequence with flash
attention on CUDA) with the same loss as padded batches, length-grouped batches on request, and an option to
turn both off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from autotrain.config.load import load_data
from autotrain.config.yaml_source import Locator
from autotrain.training.batching import TokenBudgetBatches, length_grouped_batches, pack_rows
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


def test_sft_drops_padding_by_default_and_keeps_random_batches(tmp_path):
    plan = resolve_plan(_config(tmp_path), device="cpu")
    assert plan.padding_free == "rows" and plan.record()["padding_free"] == "rows"
    assert not plan.length_grouped and plan.record()["length_grouped_batches"] is False
    assert resolve_plan(_config(tmp_path, length_grouping=True), device="cpu").length_grouped


@pytest.mark.parametrize(
    "trainer, training",
    [("sft", {"padding_free": False}), ("sft", {"packing": True}), ("dpo", {}), ("clm", {})],
    ids=["turned-off", "packing", "dpo", "clm"],
)
def test_padded_batches_where_padding_free_does_not_apply(tmp_path, trainer, training):
    plan = resolve_plan(_config(tmp_path, trainer, **training), device="cpu")
    assert plan.padding_free == "" and not plan.length_grouped


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


def test_one_sequence_with_flash_attention_on_cuda_rows_elsewhere(tmp_path):
    cuda = Precision("bf16", "cuda")
    flash = _config(tmp_path).model_copy(update={"attn_implementation": "flash_attention_2"})
    assert padding_free(flash, cuda) == "one sequence"
    assert padding_free(flash, Precision("no", "cpu")) == "rows"
    assert padding_free(_config(tmp_path), cuda) == "rows"  # sdpa
    off = _config(tmp_path, padding_free=False).model_copy(update={"attn_implementation": "flash_attention_2"})
    assert padding_free(off, cuda) == ""


@pytest.mark.parametrize(
    "lengths, rows",
    [
        ([5, 3, 2, 9], [[3], [0, 1], [2]]),  # rows of 9: 9 | 5+3 | 2 (first fit, longest first)
        ([4, 4, 4], [[0], [1], [2]]),  # equal lengths: the padded batch itself
        ([10, 1, 2, 3, 4], [[0], [4, 3, 2, 1]]),
        ([7], [[0]]),
    ],
)
def test_pack_rows_first_fit_longest_first(lengths, rows):
    assert pack_rows(lengths) == rows
    for row in pack_rows(lengths):
        assert sum(lengths[i] for i in row) <= max(lengths)


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
    trainer, _ = build_trainer(cfg, resolve_plan(cfg, device="cpu"), callbacks=[])
    return trainer


def test_grouped_batches_hold_less_padding_in_as_many_steps(tmp_path):
    grouped = _trainer(tmp_path, length_grouping=True, padding_free=False)
    random = _trainer(tmp_path, padding_free=False)
    grouped_batches, random_batches = list(grouped.get_train_dataloader()), list(random.get_train_dataloader())
    assert len(grouped_batches) <= len(random_batches)
    assert sum(len(b["input_ids"]) for b in grouped_batches) == len(grouped.train_dataset)  # each sample once

    def padding(batches) -> float:
        pads = sum(int((b["attention_mask"] == 0).sum()) for b in batches)
        return pads / sum(b["attention_mask"].numel() for b in batches)

    assert padding(grouped_batches) < 0.5 * padding(random_batches)


def test_padding_free_batches_keep_samples_apart(tmp_path):
    """The same samples flattened into one sequence give the same loss as padded: no attention across them."""
    from autotrain.trainers.llm.sft import sft_collator

    trainer = _trainer(tmp_path, padding_free=False)
    samples = [trainer.train_dataset[i] for i in range(4)]
    padded = trainer.data_collator(samples)
    flat = sft_collator("one sequence", trainer.processing_class, trainer.model)(samples)
    assert flat["input_ids"].shape[0] == 1 and "attention_mask" not in flat
    assert flat["input_ids"].shape[1] == sum(len(s["input_ids"]) for s in samples)  # no padding at all
    assert (flat["position_ids"][0] == 0).sum() == 4  # each sample starts its own positions
    model = trainer.model.eval()
    with torch.no_grad():
        loss_padded = model(**padded).loss
        loss_flat = model(**{k: v for k, v in flat.items() if k in ("input_ids", "labels", "position_ids")}).loss
    torch.testing.assert_close(loss_flat, loss_padded, rtol=1e-5, atol=1e-6)


def _inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k in ("input_ids", "labels", "position_ids", "attention_mask")}


@pytest.mark.parametrize("train_on_inputs", [False, True], ids=["answers", "whole-sequence"])
def test_row_packed_batches_give_the_padded_loss_and_gradients(tmp_path, train_on_inputs):
    """The default: the same samples, packed into rows without padding, give the loss and gradients of the
    padded batch (no attention across samples, the same tokens labelled), in fewer token slots."""
    from autotrain.training.batching import RowPackingCollator

    trainer = _trainer(tmp_path, train_on_inputs=train_on_inputs)
    assert isinstance(trainer.data_collator, RowPackingCollator)  # the default, checked on this model
    samples = [trainer.train_dataset[i] for i in range(8)]
    rows = trainer.data_collator(samples)
    padded = trainer.data_collator.inner(samples)
    assert "attention_mask" not in rows and rows["input_ids"].shape[0] < 8
    assert rows["input_ids"].shape[1] == max(len(s["input_ids"]) for s in samples)  # rows as long as the longest
    assert rows["input_ids"].numel() < padded["input_ids"].numel()
    assert int(rows["num_tokens"]) == sum(len(s["input_ids"]) for s in samples)
    assert int((rows["position_ids"] == 0).sum()) >= 8  # every sample counts its positions from 0

    model = trainer.model.train()
    torch.manual_seed(0)

    def loss_and_grads(batch):
        model.zero_grad(set_to_none=True)
        loss = model(**_inputs(batch), use_cache=False).loss
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    dropout = [m for m in model.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
    assert not dropout  # the fixture has no dropout: the two passes are comparable
    loss_rows, grads_rows = loss_and_grads(rows)
    loss_padded, grads_padded = loss_and_grads(padded)
    torch.testing.assert_close(loss_rows, loss_padded, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads_rows, grads_padded, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


class _AttendsAcross(torch.nn.Module):
    """A 'model' whose outputs mix every earlier token, whatever the position ids say."""

    def __init__(self):
        super().__init__()
        self.config = type("Config", (), {"vocab_size": 32})()
        self.embed = torch.nn.Embedding(32, 32)

    def forward(self, input_ids, position_ids=None, use_cache=False):
        logits = self.embed(input_ids).cumsum(1)
        return type("Out", (), {"logits": logits})()


def test_a_model_that_attends_across_samples_keeps_padded_batches(tmp_path, capsys):
    from autotrain.trainers.llm.sft import batching_for_model, sft_collator
    from autotrain.training.batching import RowPackingCollator, keeps_packed_samples_apart

    assert not keeps_packed_samples_apart(_AttendsAcross())
    trainer = _trainer(tmp_path, padding_free=False)
    assert keeps_packed_samples_apart(trainer.model)
    plan = resolve_plan(_config(tmp_path), device="cpu")
    assert batching_for_model(plan, trainer.model) is plan  # this model keeps them apart: rows
    padded = batching_for_model(plan, _AttendsAcross())
    assert padded.padding_free == "" and padded.refined[0][:3] == ("padding_free", "rows", "")
    assert sft_collator(padded.padding_free, trainer.processing_class, trainer.model) is None  # TRL's padded one
    assert isinstance(sft_collator(plan.padding_free, trainer.processing_class, trainer.model), RowPackingCollator)
    assert "batches stay padded" in capsys.readouterr().err


def test_training_on_row_packed_batches_counts_every_token(tmp_path):
    trainer = _trainer(tmp_path, max_steps=3, logging_steps=1, lr=1e-3)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    loader = trainer.get_train_dataloader()
    expected = sum(int(b["num_tokens"]) for _, b in zip(range(3), loader, strict=False))
    trainer.train()
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert logged and all(torch.isfinite(torch.tensor(h["loss"])) for h in logged)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))
    assert logged[-1]["num_tokens"] == expected  # every row counted, no padding


def test_a_run_whose_model_fails_the_check_trains_padded_and_records_it(tmp_path, monkeypatch):
    import yaml
    from typer.testing import CliRunner

    import autotrain.training.batching as batching
    from autotrain.cli.main import app

    monkeypatch.setattr(batching, "keeps_packed_samples_apart", lambda model: False)
    raw = {
        "task": "llm",
        "trainer": "sft",
        "base_model": TINY,
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(ASSETS / "data" / "text.jsonl")},
        "training_args": {"max_steps": 2, "batch_size": 4, "max_length": 48, "mixed_precision": "no"},
    }
    path = tmp_path / "run.yml"
    path.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["llm", "--config", str(path)])
    assert result.exit_code == 0, result.output
    assert "batches stay padded" in result.output
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["plan"]["padding_free"] == ""
    [refined] = manifest["plan"]["refined_after_loading"]  # the builder's refinement, recorded as one
    assert (refined["field"], refined["planned"], refined["used"]) == ("padding_free", "rows", "")
    assert "padding_free: ''" in (tmp_path / "run" / "autotrain.yaml").read_text()

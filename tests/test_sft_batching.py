"""SFT batching: length-grouped batches by default (decided in the plan), padding-free batches where the
attention kernel keeps samples apart, and an option to turn both off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from autotrain.config.load import load_data
from autotrain.config.yaml_source import Locator
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


def _sampling(plan) -> str | None:
    args = plan.training_args
    return args.get("train_sampling_strategy") or ("group_by_length" if args.get("group_by_length") else None)


def test_sft_groups_by_length_by_default(tmp_path):
    plan = resolve_plan(_config(tmp_path), device="cpu")
    assert _sampling(plan) == "group_by_length"
    assert not plan.padding_free  # CPU: padding-free would cost a block-diagonal mask as long as the batch
    assert plan.record()["training_arguments"].get("train_sampling_strategy", "group_by_length") == "group_by_length"


@pytest.mark.parametrize(
    "trainer, training",
    [("sft", {"length_grouping": False}), ("sft", {"packing": True}), ("dpo", {}), ("clm", {})],
    ids=["turned-off", "packing", "dpo", "clm"],
)
def test_random_batches_where_grouping_does_not_apply(tmp_path, trainer, training):
    assert _sampling(resolve_plan(_config(tmp_path, trainer, **training), device="cpu")) is None


def test_padding_free_only_with_flash_attention_on_cuda(tmp_path):
    cuda = Precision("bf16", "cuda")
    flash = _config(tmp_path).model_copy(update={"attn_implementation": "flash_attention_2"})
    assert padding_free(flash, cuda)
    assert not padding_free(flash, Precision("no", "cpu"))
    assert not padding_free(_config(tmp_path), cuda)  # sdpa
    off = _config(tmp_path, length_grouping=False).model_copy(update={"attn_implementation": "flash_attention_2"})
    assert not padding_free(off, cuda)


def _varied_chat(path: Path, rows: int = 160) -> Path:
    """Chat samples from a few to a few hundred tokens long (enough rows for transformers' sampler to sort
    groups of 10 batches: it sorts groups of up to 50, and none below 4 batches x 4 rows)."""
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


def test_grouped_batches_hold_less_padding(tmp_path):
    grouped, random = _trainer(tmp_path), _trainer(tmp_path, length_grouping=False)

    def padding(trainer) -> float:
        batches = list(trainer.get_train_dataloader())
        pads = sum(int((b["attention_mask"] == 0).sum()) for b in batches)
        return pads / sum(b["attention_mask"].numel() for b in batches)

    assert padding(grouped) < 0.5 * padding(random)


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

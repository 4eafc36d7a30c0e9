"""Length-grouped batches of about the same number of tokens, in random order.

A batch is padded to its longest sample, so on data of mixed lengths random batches are mostly padding.
Grouping samples of similar length removes the padding, but batches of a fixed number of samples then
differ wildly in tokens: a batch of short samples gets as large an optimizer step as one of long samples,
so short samples weigh far more than in random batches, and training walks the lengths in order with
transformers' `LengthGroupedSampler` (long to short within each group of 50 batches). On chat data of
mixed lengths either cost 6-8% of held-out loss (benchmarks/sft_throughput.py).

Here batches are cut from the samples sorted by length under one budget of padded tokens per batch,
the smallest that gives no more batches than random batching does (``len(dataset) / batch_size``): fewer
long samples per batch, more short ones. An epoch then takes as many optimizer steps as with random
batches, each step sees about as many tokens (the batch size times the mean length, with little padding on
top), each token weighs about the same, and the batches come in random order each epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class TokenBudgetBatches(Sampler[list[int]]):
    """Batches (lists of indices) of samples of similar length, each padded to at most ``budget`` tokens.

    The batches are the same set every epoch up to ties (samples of equal length swap at random), so
    their number is fixed; their order is shuffled per epoch (``set_epoch``, as the Trainer calls it),
    deterministically for (seed, epoch), so a resumed run skips to the same place. A sample longer than
    the budget is a batch of its own.
    """

    def __init__(self, lengths: Sequence[int], budget: int, seed: int, max_batch: int | None = None) -> None:
        self.lengths = list(lengths)
        self.budget = max(1, budget)
        self.max_batch = max_batch or len(self.lengths)
        self.seed = seed
        self.epoch = 0
        self._count = len(self._batches(torch.Generator().manual_seed(seed)))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self._count

    def _batches(self, generator: torch.Generator) -> list[list[int]]:
        ties = torch.randperm(len(self.lengths), generator=generator).tolist()  # random order among equals
        ordered = sorted(ties, key=self.lengths.__getitem__, reverse=True)
        batches: list[list[int]] = []
        for index in ordered:  # longest first: a batch's first sample sets its padded length
            batch = batches[-1] if batches else None
            if batch and len(batch) < self.max_batch and (len(batch) + 1) * self.lengths[batch[0]] <= self.budget:
                batch.append(index)
            else:
                batches.append([index])
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        batches = self._batches(generator)
        return iter([batches[b] for b in torch.randperm(len(batches), generator=generator).tolist()])


def sample_lengths(dataset) -> list[int]:
    """Tokens of each sample of a tokenized `datasets.Dataset` (its `input_ids`), read from Arrow."""
    import pyarrow.compute as pc

    return pc.list_value_length(dataset.with_format("arrow")["input_ids"]).to_pylist()


def length_grouped_batches(lengths: Sequence[int], batch_size: int, seed: int) -> TokenBudgetBatches:
    """TokenBudgetBatches with the smallest budget that makes at most ceil(len / batch_size) batches.

    Bisection between the mean batch's tokens (a lower bound: padding only adds) and the longest
    sample times ``batch_size`` (enough: every run of ``batch_size`` sorted samples fits).
    """
    steps = -(-len(lengths) // batch_size)
    low, high = round(batch_size * sum(lengths) / max(1, len(lengths))), batch_size * max(lengths, default=1)
    while low < high:
        middle = (low + high) // 2
        if len(TokenBudgetBatches(lengths, middle, seed)) <= steps:
            high = middle
        else:
            low = middle + 1
    return TokenBudgetBatches(lengths, high, seed)


def pack_rows(lengths: Sequence[int]) -> list[list[int]]:
    """Indices of a batch's samples, laid end to end in rows no longer than its longest sample.

    First fit, longest first: the longest sample fills a row of its own, shorter ones share rows. A row is
    never longer than the padded batch's rows, so attention costs no more than with padding, and the
    tokens of the batch are computed once each instead of once per padded slot.
    """
    capacity = max(lengths, default=0)
    rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        row = next((r for r, free in enumerate(room) if free >= lengths[index]), None)
        if row is None:
            rows.append([])
            room.append(capacity)
            row = len(rows) - 1
        rows[row].append(index)
        room[row] -= lengths[index]
    return rows


class RowPackingCollator:
    """A batch's samples packed into rows (`pack_rows`), each sample's positions counted from 0.

    Wraps TRL's language-modelling collator: each row goes to it as one packed example (its `seq_lengths`),
    so labels and padding follow TRL's rules. No attention mask is returned: transformers then reads the
    sample boundaries from the position ids and keeps the samples of a row apart (see
    `keeps_packed_samples_apart`), and the first token of each sample is not predicted from the one before.
    The loss is the mean over the same labelled tokens as the padded batch's. `num_tokens` (the batch's
    tokens without padding) is for the trainer's token count; it is not a model input.
    """

    def __init__(self, inner) -> None:
        import dataclasses

        self.inner = inner
        self._rows = dataclasses.replace(inner, padding_free=False, return_position_ids=True)
        self.pad_token_id = inner.pad_token_id
        self.pad_to_multiple_of = inner.pad_to_multiple_of

    def __call__(self, examples: list[dict]) -> dict:
        rows = []
        for members in pack_rows([len(e["input_ids"]) for e in examples]):
            parts = [examples[i] for i in members]
            rows.append(
                {
                    "input_ids": [t for e in parts for t in e["input_ids"]],
                    "labels": [t for e in parts for t in e.get("labels", e["input_ids"])],
                    "seq_lengths": [len(e["input_ids"]) for e in parts],
                }
            )
        batch = self._rows(rows)
        batch.pop("attention_mask", None)
        batch["labels"][batch["position_ids"] == 0] = -100
        batch["num_tokens"] = torch.tensor(sum(len(e["input_ids"]) for e in examples))  # for the trainer's metric
        return batch


def keeps_packed_samples_apart(model) -> bool:
    """Whether `model`, given two samples in one row with position ids and no attention mask, computes
    the second exactly as on its own (transformers' masks read packed samples from the position ids; older
    model code attends across them). Two forward passes, of 12 and 5 tokens, without gradients."""
    device = next((p.device for p in model.parameters() if p.device.type != "meta"), torch.device("cpu"))
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    if vocab < 8:
        return False
    first, second = torch.arange(1, 8) % vocab, torch.arange(3, 8) % vocab
    row = torch.cat([first, second])[None].to(device)
    positions = torch.cat([torch.arange(len(first)), torch.arange(len(second))])[None].to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            packed = model(input_ids=row, position_ids=positions, use_cache=False).logits[0, len(first) :]
            alone = model(input_ids=second[None].to(device), use_cache=False).logits[0]
    except Exception:  # an architecture that does not take position ids like this: keep padding
        return False
    finally:
        model.train(was_training)
    scale = alone.float().abs().max().clamp_min(1e-6)
    return bool(((packed.float() - alone.float()).abs().max() / scale) < 1e-2)

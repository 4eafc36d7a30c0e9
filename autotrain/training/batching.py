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

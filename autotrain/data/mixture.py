"""Several prepared sources as one training set, each source's share of every epoch set by its weight or
fraction (`data.sources`).

An epoch holds as many rows as the sources together (packed: blocks). Source i gives `quota_i` of them,
its share times the epoch's length, rounded so that the quotas add up (largest remainders). Which rows: a
fresh permutation of the source's rows, repeated when its quota is larger than the source (a small source
with a large share is seen several times an epoch), cut to the quota. The epoch's rows are then put in a
random order. Every draw comes from a generator seeded with (the run's seed, the epoch), so each epoch draws
again, and the same seed draws the same rows in the same order on every process and every resume.

The training set is a `datasets.Dataset` of the epoch's positions (what TRL's SFTTrainer takes), read
through a transform that fetches the row drawn for each position; `MixtureEpochs` tells the draws which
epoch it is at the start of each epoch, before the epoch's first batch is read.
"""

from __future__ import annotations

import math

import numpy as np


def quotas(shares: list[float], length: int) -> list[int]:
    """Rows per source in an epoch of `length` rows: each share of it, rounded so that they add up."""
    exact = [share * length for share in shares]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(shares)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in order[: length - sum(counts)]:
        counts[i] += 1
    return counts


def draw(sizes: list[int], counts: list[int], seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, row) of each position of an epoch, in the epoch's order."""
    rng = np.random.default_rng([seed, epoch])
    sources, rows = [], []
    for i, (size, count) in enumerate(zip(sizes, counts, strict=True)):
        if count == 0 or size == 0:
            continue
        rounds = [rng.permutation(size) for _ in range(-(-count // size))]
        rows.append(np.concatenate(rounds)[:count])
        sources.append(np.full(count, i, dtype=np.int16))
    source, row = np.concatenate(sources), np.concatenate(rows)
    order = rng.permutation(len(source))
    return source[order], row[order]


class Mixture:
    """The sources' rows drawn by their shares, epoch by epoch (see the module's docstring): for each position
    of the current epoch, which source and which of its rows."""

    def __init__(self, sizes: list[int], shares: list[float], seed: int):
        self.sizes = sizes
        self.counts = quotas(shares, sum(sizes))
        self.seed = seed
        self.epoch = None
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.source, self.row = draw(self.sizes, self.counts, self.seed, epoch)


class MixtureRows:
    """The transform of `mixed_rows`: a batch of the epoch's positions -> those rows of their sources."""

    def __init__(self, parts: list, mixture: Mixture):
        self.parts, self.mixture = parts, mixture

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        out: dict[str, list] = {}
        for slot in batch["slot"]:
            part = self.parts[int(self.mixture.source[slot])]
            row = part[int(self.mixture.row[slot])]
            for key, value in row.items():
                out.setdefault(key, []).append(value)
        return out


def mixed_rows(parts: list, shares: list[float], seed: int):
    """(a `datasets.Dataset` of an epoch's positions that reads as the rows drawn for them, the Mixture that
    draws them: tell it each epoch). `parts`: each source's rows as the trainer reads them."""
    from datasets import Dataset

    mixture = Mixture([len(part) for part in parts], shares, seed)
    slots = Dataset.from_dict({"slot": np.arange(len(mixture.source), dtype=np.int64)})
    return slots.with_transform(MixtureRows(parts, mixture)), mixture


def mixture_epochs():
    """A TrainerCallback class that sets a Mixture's epoch at the start of each epoch (before its first batch
    is read; after a resume, the epoch the checkpoint was in)."""
    from transformers import TrainerCallback

    class MixtureEpochs(TrainerCallback):
        def __init__(self, mixture: Mixture):
            self.mixture = mixture

        def on_epoch_begin(self, args, state, control, **kwargs):
            self.mixture.set_epoch(math.floor((state.epoch or 0) + 1e-6))

    return MixtureEpochs

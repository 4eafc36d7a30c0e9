"""Prepared rows as they are kept on disk, and as the trainer reads them.

Kept compact (the cache stays a small multiple of the data): `input_ids` as 16-bit integers when every id of
the tokenizer fits (32-bit otherwise), and which tokens carry loss not as a second column of ids but as the
token ranges that do (`trained`: start, end, start, end, ...; usually one pair per answer). Packed rows keep
`seq_lengths`. Read, each row becomes what TRL's collator (or the Trainer's default one, for blocks) takes:
`input_ids` and `labels` (the id where the token carries loss, -100 elsewhere), and `seq_lengths` or an
`attention_mask` where the data has them.
"""

from __future__ import annotations

import numpy as np

IGNORED = -100
FORMAT = 1  # of the kept rows: part of every cache key, raised when the layout changes


def id_type(vocabulary: int):
    import pyarrow as pa

    return pa.uint16() if vocabulary <= 1 << 16 else pa.int32()


def compact(table, vocabulary: int):
    """A Table of `input_ids` and `labels` (and maybe `seq_lengths`) as it is kept: see the module docstring."""
    import pyarrow as pa

    ids, labels = table.column("input_ids").combine_chunks(), table.column("labels").combine_chunks()
    offsets = ids.offsets.to_numpy().astype(np.int64)
    bounds = offsets - offsets[0]
    trained = labels.flatten().to_numpy() != IGNORED
    total, rows = len(trained), len(bounds) - 1
    lengths = np.diff(bounds)
    opens, closes = np.zeros(total, dtype=bool), np.zeros(total, dtype=bool)
    opens[bounds[:-1][lengths > 0]] = True  # a row's first token
    closes[bounds[1:][lengths > 0] - 1] = True  # a row's last token
    previous = np.concatenate(([False], trained[:-1])) & ~opens
    following = np.concatenate((trained[1:], [False])) & ~closes
    starts, ends = np.flatnonzero(trained & ~previous), np.flatnonzero(trained & ~following) + 1
    row_of = np.repeat(np.arange(rows), lengths)
    position = bounds[:-1][row_of[starts]] if len(starts) else np.zeros(0, dtype=np.int64)
    pairs = np.stack([starts - position, ends - position], axis=1).ravel().astype(np.int32)
    pair_bounds = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(2 * np.bincount(row_of[starts], minlength=rows), out=pair_bounds[1:])
    columns = {
        "input_ids": pa.ListArray.from_arrays(
            pa.array(bounds.astype(np.int32)), ids.flatten().cast(id_type(vocabulary))
        ),
        "trained": pa.ListArray.from_arrays(pa.array(pair_bounds), pa.array(pairs, pa.int32())),
    }
    if "seq_lengths" in table.column_names:
        columns["seq_lengths"] = table.column("seq_lengths").combine_chunks()
    return pa.table(columns)


def expand(batch: dict[str, list]) -> dict[str, list]:
    """Kept rows (columns -> values of a batch) as the trainer reads them: `input_ids`, `labels`, and
    `seq_lengths` or `attention_mask`. The transform of `trainer_rows`."""
    ids = batch["input_ids"]
    out = {"input_ids": ids}
    if "trained" in batch:
        out["labels"] = [_labels(row, spans) for row, spans in zip(ids, batch["trained"], strict=True)]
    else:  # blocks: every token trained, every token attended
        out["labels"], out["attention_mask"] = [list(row) for row in ids], [[1] * len(row) for row in ids]
    if "seq_lengths" in batch:
        out["seq_lengths"] = batch["seq_lengths"]
    return out


def _labels(ids: list[int], spans: list[int]) -> list[int]:
    labels = [IGNORED] * len(ids)
    for a, b in zip(spans[::2], spans[1::2], strict=True):
        labels[a:b] = ids[a:b]
    return labels


def trainer_rows(kept):
    """The kept rows of a split (a memory-mapped `datasets.Dataset`) read as trainer rows (`expand`, as a
    datasets transform: the rows stay a `datasets.Dataset`, which TRL's SFTTrainer asks for). The Trainer
    must leave its columns alone (`remove_unused_columns: false`, as the plan sets for this data): they are
    the kept columns, not the ones the transform gives."""
    return kept.with_transform(expand)

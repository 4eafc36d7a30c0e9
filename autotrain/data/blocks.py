"""Raw text as causal-LM blocks, a batch at a time (the trainers of the `blocks` data format): each document
tokenized with EOS appended, the batch's documents laid end to end and cut into full blocks of `block`
tokens (the batch's remainder is dropped), every token trained."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autotrain.errors import UserInputError


@dataclass
class BlockJob:
    """What cuts a batch of documents into blocks in a worker process (autotrain.data.pipeline): picklable."""

    tokenizer: Any
    block: int
    name: str = ""
    trainer: str = ""  # the trainer table's name, whose columns the data is read for

    def columns(self, names: list[str], name: str, given: dict[str, str]) -> dict[str, str]:
        from autotrain.data.llm import columns_of

        mapping = columns_of(self.trainer, given, names, name)
        self.name = name
        return mapping

    compact: bool = True  # rows as the cache keeps them (autotrain.data.rows); False: as the trainer reads them
    rows_apart = False  # a batch's documents are laid end to end, its remainder dropped

    @property
    def schema(self):
        import pyarrow as pa

        from autotrain.data.rows import id_type

        if self.compact:
            return pa.schema([("input_ids", pa.list_(id_type(len(self.tokenizer))))])
        wide = pa.list_(pa.int32())
        return pa.schema([("input_ids", wide), ("labels", wide), ("attention_mask", pa.list_(pa.int8()))])

    def __call__(self, table, first_row: int):
        import pyarrow as pa

        from autotrain.data.rows import id_type

        texts = table.column("text").to_pylist()
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise UserInputError(f"{self.name}: row {first_row + i} (counting from 0), column `text`: must be text")
        eos = [self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else []
        encoded = self.tokenizer(texts, add_special_tokens=True)["input_ids"]
        flat = np.fromiter((t for ids in encoded for t in (*ids, *eos)), np.int32)
        usable = len(flat) // self.block * self.block
        offsets = pa.array(np.arange(0, usable + 1, self.block, dtype=np.int32))
        nothing = np.zeros(0, dtype=np.int64)
        if self.compact:
            ids = pa.ListArray.from_arrays(offsets, pa.array(flat[:usable]).cast(id_type(len(self.tokenizer))))
            return pa.table({"input_ids": ids}), nothing
        ids = pa.ListArray.from_arrays(offsets, pa.array(flat[:usable]))
        ones = pa.ListArray.from_arrays(offsets, pa.array(np.ones(usable, dtype=np.int8)))
        return pa.table({"input_ids": ids, "labels": ids, "attention_mask": ones}), nothing

"""SFT rows as the trainer trains on them, a batch at a time: token ids, and labels that are the id where the
token carries loss and -100 where it does not.

- chat `messages`: the rendered conversation, the assistant turns trained (autotrain.data.answers finds them);
- `prompt` / `completion`: the completion trained, as TRL's SFTTrainer labels such rows: under a chat
  template the prompt rendered with the generation prompt and the whole exchange rendered, the completion
  starting where their tokens part; as plain text (`chat_template: none`) the prompt tokenized alone and
  the prompt, completion and EOS together;
- plain `text`: every token, with EOS appended (as TRL does).

`training_args.train_on_inputs: true` trains every token of every format. Each batch is tokenized in one call
(the tokenizer's own batch encoding) and labelled with numpy: no per-token Python. Rows with no trained token
within the first `max_length` tokens are left out (and reported by the caller); the rest are cut to
`max_length`, or packed into `max_length` blocks (TRL's `pack_dataset`, best fit decreasing, per batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from autotrain.data.answers import answer_tokens, assistant_spans, span_mask
from autotrain.data.messages import as_messages, is_messages, not_messages
from autotrain.errors import UserInputError

IGNORED = -100  # the label of a token that carries no loss
ENCODE_ROWS = 128  # rows tokenized in one call (see `encoded`)


@dataclass(frozen=True)
class SftSettings:
    """What labels a batch: the rows' format, and the run's settings that change the labels."""

    kind: str  # "messages", "completion" or "text"
    chat: bool  # under a chat template (prompt / completion strings become one user and one assistant turn)
    train_on_inputs: bool
    max_length: int
    packing: bool


@dataclass
class Tokens:
    """A batch's token ids end to end, where each row starts and ends, and which tokens carry loss."""

    ids: np.ndarray  # int32
    bounds: np.ndarray  # int64, one more than the rows: row i is ids[bounds[i]:bounds[i + 1]]
    trained: np.ndarray  # bool, one per token


def row_kind(columns: list[str]) -> str:
    """The SFT format of rows with these (task) columns."""
    if "completion" in columns:
        return "completion"
    return "messages" if "messages" in columns else "text"


def label_batch(tokenizer, rows: dict[str, list], settings: SftSettings, first_row: int = 0):
    """`rows` (task columns -> values) -> (a pyarrow Table of `input_ids`, `labels` and, packed, `seq_lengths`;
    the batch's indices of the rows left out: no trained token within `max_length`). `first_row`: the number
    of the batch's first row in its split, for messages that name a bad row."""
    if settings.kind == "messages":
        conversations = check_conversations(rows["messages"], first_row)
        tokens = chat_tokens(tokenizer, conversations)
    elif settings.kind == "completion":
        tokens = completion_tokens(tokenizer, rows["prompt"], rows["completion"], settings.chat, first_row)
    else:
        tokens = text_tokens(tokenizer, rows["text"], first_row)
    table, kept = labelled(tokens, settings.train_on_inputs, settings.max_length, cut=not settings.packing)
    if settings.packing:  # a batch with no row left keeps the columns of the others
        table = packed(table, settings.max_length) if table.num_rows else _with_no_lengths(table)
    return table, np.flatnonzero(~kept)


def _with_no_lengths(table):
    import pyarrow as pa

    return table.append_column("seq_lengths", pa.array([], pa.list_(pa.int32())))


def check_conversations(conversations: list, first_row: int) -> list:
    """The rows' message lists (read back from JSON text where datasets wrote them so); a row that holds none
    is a UserInputError naming it."""
    read = [as_messages(value) for value in conversations]
    for i, value in enumerate(read):
        if not is_messages(value):
            raise UserInputError(not_messages(first_row + i, "messages", value))
    return read


def chat_tokens(tokenizer, conversations: list[list[dict]]) -> Tokens:
    """Conversations rendered by the chat template and tokenized in one call; the assistant turns trained."""
    if not getattr(tokenizer, "is_fast", False):  # no character offsets: token by token (answers.py)
        pairs = [answer_tokens(tokenizer, messages) for messages in conversations]
        ids, bounds = _flat([ids for ids, _ in pairs])
        return Tokens(ids, bounds, np.fromiter(chain.from_iterable(m for _, m in pairs), bool, len(ids)))
    rendered = [assistant_spans(tokenizer, messages) for messages in conversations]
    ids, bounds, offsets = encoded(tokenizer, [text for text, _ in rendered], special=False, offsets=True)
    trained = np.zeros(len(ids), dtype=bool)
    for row, (_, spans) in enumerate(rendered):
        part = slice(bounds[row], bounds[row + 1])
        trained[part] = span_mask(offsets[part, 0], offsets[part, 1], spans)
    return Tokens(ids, bounds, trained)


def completion_tokens(tokenizer, prompts: list, completions: list, chat: bool, first_row: int = 0) -> Tokens:
    """Prompt / completion rows: the completion's tokens trained, from where the prompt's tokens and the whole
    row's part (TRL's `common_prefix_length`: a template may render the prompt alone otherwise)."""
    if chat:
        pairs = [_as_turns(p, c, first_row + i) for i, (p, c) in enumerate(zip(prompts, completions, strict=True))]
        asked = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p, _ in pairs]
        whole = [tokenizer.apply_chat_template(p + c, tokenize=False) for p, c in pairs]
        prompt_ids, prompt_bounds, _ = encoded(tokenizer, asked, special=False)
        ids, bounds, _ = encoded(tokenizer, whole, special=False)
    else:
        eos = tokenizer.eos_token or ""
        prompts = [_text(p, "prompt", first_row + i) for i, p in enumerate(prompts)]
        completions = [_text(c, "completion", first_row + i) for i, c in enumerate(completions)]
        ends = [c if c.endswith(eos) else c + eos for c in completions]
        prompt_ids, prompt_bounds, _ = encoded(tokenizer, prompts, special=True)
        ids, bounds, _ = encoded(tokenizer, [p + c for p, c in zip(prompts, ends, strict=True)], special=True)
    trained = np.ones(len(ids), dtype=bool)
    for row in range(len(bounds) - 1):
        asked_ids = prompt_ids[prompt_bounds[row] : prompt_bounds[row + 1]]
        trained[bounds[row] : bounds[row] + _common_prefix(asked_ids, ids[bounds[row] : bounds[row + 1]])] = False
    return Tokens(ids, bounds, trained)


def text_tokens(tokenizer, texts: list, first_row: int = 0) -> Tokens:
    """Plain text with EOS appended (unless it ends with it), tokenized as TRL does; every token trained."""
    eos = tokenizer.eos_token or ""
    texts = [_text(t, "text", first_row + i) for i, t in enumerate(texts)]
    ids, bounds, _ = encoded(tokenizer, [t if t.endswith(eos) else t + eos for t in texts], special=True)
    return Tokens(ids, bounds, np.ones(len(ids), dtype=bool))


def labelled(tokens: Tokens, train_on_inputs: bool, limit: int, cut: bool):
    """(a Table of `input_ids` and `labels` for the rows with a trained token among their first `limit`,
    each cut to `limit` tokens when `cut`; a bool per row: kept)."""
    import pyarrow as pa

    ids, bounds = tokens.ids, tokens.bounds
    rows = len(bounds) - 1
    lengths = np.diff(bounds)
    labels = np.where(tokens.trained | train_on_inputs, ids, IGNORED).astype(np.int32)
    row_of = np.repeat(np.arange(rows), lengths)
    within = np.arange(len(ids)) - np.repeat(bounds[:-1], lengths) < limit
    kept = np.bincount(row_of[within & (labels != IGNORED)], minlength=rows) > 0
    tokens_kept = np.repeat(kept, lengths) & (within if cut else True)
    new_bounds = np.zeros(int(kept.sum()) + 1, dtype=np.int32)
    np.cumsum(np.bincount(row_of[tokens_kept], minlength=rows)[kept], out=new_bounds[1:])
    offsets = pa.array(new_bounds, pa.int32())
    table = pa.table(
        {
            "input_ids": pa.ListArray.from_arrays(offsets, pa.array(ids[tokens_kept], pa.int32())),
            "labels": pa.ListArray.from_arrays(offsets, pa.array(labels[tokens_kept], pa.int32())),
        }
    )
    return table, kept


def packed(table, max_length: int):
    """The rows packed into blocks of at most `max_length` tokens (TRL's best-fit-decreasing packing, which
    keeps each row whole in one block and adds `seq_lengths`, the rows' lengths in each block)."""
    import datasets
    from trl import pack_dataset

    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # one batch: the split's own progress is shown
    try:
        rows = datasets.Dataset.from_dict({name: table.column(name) for name in table.column_names})
        blocks = pack_dataset(rows, max_length, "bfd", {"batch_size": max(1, table.num_rows)})
    finally:
        if shown:
            datasets.enable_progress_bars()
    return blocks.with_format("arrow")[:]


def encoded(tokenizer, texts: list[str], special: bool, offsets: bool = False):
    """(ids, row bounds, character offsets or None) of `texts` tokenized by the tokenizer's own batch call, in
    calls of ENCODE_ROWS rows, each turned into numpy at once: the Python lists a call makes (a few hundred
    bytes a token with offsets) stay those of ENCODE_ROWS rows, whatever the batch."""
    parts = []
    for start in range(0, len(texts), ENCODE_ROWS):
        out = tokenizer(texts[start : start + ENCODE_ROWS], add_special_tokens=special, return_offsets_mapping=offsets)
        ids, bounds = _flat(out["input_ids"])
        pairs = None
        if offsets:
            pairs = np.fromiter(chain.from_iterable(chain.from_iterable(out["offset_mapping"])), np.int64, 2 * len(ids))
        parts.append((ids, bounds, pairs))
    if not parts:
        return np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros((0, 2), np.int64) if offsets else None
    shift = np.cumsum([0] + [bounds[-1] for _, bounds, _ in parts[:-1]])
    bounds = np.concatenate([[0]] + [b[1:] + k for (_, b, _), k in zip(parts, shift, strict=True)])
    ids = np.concatenate([i for i, _, _ in parts])
    pairs = np.concatenate([o for _, _, o in parts]).reshape(-1, 2) if offsets else None
    return ids, bounds, pairs


def _flat(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, lists), np.int64, len(lists))
    bounds = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    return np.fromiter(chain.from_iterable(lists), np.int32, int(bounds[-1])), bounds


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def _as_turns(prompt: Any, completion: Any, row: int) -> tuple[list[dict], list[dict]]:
    """TRL's conversational prompt / completion: a string prompt is one user turn, a string completion one
    assistant turn; message lists stay as they are."""
    turns = []
    for value, role, column in ((prompt, "user", "prompt"), (completion, "assistant", "completion")):
        if isinstance(value, str):
            turns.append([{"role": role, "content": value}])
        elif isinstance(value, list):
            check_conversations([value], row)
            turns.append(value)
        else:
            raise UserInputError(f"row {row} (counting from 0), column `{column}`: {_holds(value)}")
    return turns[0], turns[1]


def _text(value: Any, column: str, row: int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        raise UserInputError(
            f"row {row} (counting from 0), column `{column}`: message lists need a chat template, not "
            "`data.chat_template: none`"
        )
    raise UserInputError(f"row {row} (counting from 0), column `{column}`: {_holds(value)}")


def _holds(value: Any) -> str:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return f"must be text or a list of {{role, content}} messages; it holds {type(value).__name__} {shown}"


@dataclass
class SftJob:
    """What prepares a batch of SFT rows in a worker process (autotrain.data.pipeline): picklable."""

    tokenizer: Any
    settings: SftSettings
    name: str = ""  # the split's, for errors that name a row (set by `columns`)
    compact: bool = True  # rows as the cache keeps them (autotrain.data.rows); False: as the trainer reads them
    trainer: str = ""  # the trainer table's name, whose columns the data is read for

    @property
    def rows_apart(self) -> bool:
        """Whether each row is prepared on its own (packed rows depend on the batch they were read in)."""
        return not self.settings.packing

    def columns(self, names: list[str], name: str, given: dict[str, str]) -> dict[str, str]:
        """The task columns of data with the columns `names`; the rows' format follows from them."""
        from dataclasses import replace

        from autotrain.data.llm import columns_of

        mapping = columns_of(self.trainer, given, names, name)
        kind = row_kind(list(mapping))
        if kind == "messages" and not self.settings.chat:
            raise UserInputError(
                f"{name}: chat `messages` need a chat template; `data.chat_template: none` is for plain `text` data"
            )
        self.settings, self.name = replace(self.settings, kind=kind), name
        return mapping

    @property
    def schema(self):
        import pyarrow as pa

        from autotrain.data.rows import id_type

        wide = pa.list_(pa.int32())
        if self.compact:
            fields = [("input_ids", pa.list_(id_type(len(self.tokenizer)))), ("trained", wide)]
        else:
            fields = [("input_ids", wide), ("labels", wide)]
        return pa.schema(fields + ([("seq_lengths", wide)] if self.settings.packing else []))

    def __call__(self, table, first_row: int):
        from autotrain.data.rows import compact

        try:
            prepared, left_out = label_batch(self.tokenizer, table.to_pydict(), self.settings, first_row)
        except UserInputError as exc:
            raise UserInputError(f"{self.name}: {exc}") from None
        return (compact(prepared, len(self.tokenizer)) if self.compact else prepared), left_out

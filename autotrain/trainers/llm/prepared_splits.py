"""The training and validation data of the trainers whose data autotrain prepares itself (the trainer table's
`prepared`): each source's split prepared once and cached (autotrain.data.prepared), several sources mixed
by their shares (autotrain.data.mixture); or, with `data.streaming`, read and prepared as training consumes
it.

A builder hands in how to make its batch job (`make_job(cfg, tokenizer, chat_template)`), what besides the
source shapes the rows (`make_inputs(cfg, tokenizer, job)`, the cache key) and how to report a split's
record (`report(cfg, name, record)`: left-out rows, or an error when nothing is left).
"""

from __future__ import annotations

from typing import Any

from autotrain.config.llm import LLMConfig
from autotrain.errors import UserInputError

SHUFFLE_ROWS = 1000  # streaming: the rows a shuffle buffer holds (datasets' default)


def prepared_splits(cfg: LLMConfig, tokenizer, train, valid, make_job, make_inputs, report) -> tuple[Any, Any]:
    """(training rows: one source's Dataset or a Mixture; validation rows of every source that has a validation
    split, together, or None). `train.records` (the builder's SplitPlan) gets each source's record."""
    from datasets import concatenate_datasets

    from autotrain.data.mixture import mixed_rows
    from autotrain.data.rows import trainer_rows

    sources = cfg.data.split_sources()
    token = getattr(train, "token", None)
    parts, records = [], []
    for source in sources:
        what = _what("training", sources, source)
        dataset, record = _one(cfg, tokenizer, source, source.split, make_job, make_inputs, token, what)
        report(cfg, _name("training", sources, source), record)
        parts.append(dataset)
        records.append(record)
    shares = cfg.data.shares()
    parts = [trainer_rows(part) for part in parts]
    training, mixture = parts[0], None
    if len(parts) > 1:
        training, mixture = mixed_rows(parts, shares, cfg.training_args.seed)
    if hasattr(train, "records"):
        train.records = _records(sources, records, shares, mixture.counts if mixture else [len(training)])
        train.mixture = mixture
    if valid is None:
        return training, None
    held_out = []
    for source in [s for s in sources if s.valid_split]:
        what = _what("validation", sources, source)
        dataset, record = _one(cfg, tokenizer, source, source.valid_split, make_job, make_inputs, token, what)
        report(cfg, _name("validation", sources, source), record)
        held_out.append(dataset)
    return training, trainer_rows(held_out[0] if len(held_out) == 1 else concatenate_datasets(held_out))


def _one(cfg: LLMConfig, tokenizer, source, split: str, make_job, make_inputs, token, what: str):
    from autotrain.data.prepared import SplitSource, prepared_split

    template = tokenizer_for(cfg, tokenizer, source.chat_template, token)
    job = make_job(cfg, template, source.chat_template)
    where = SplitSource(source.path, split, dict(source.column_mapping))
    return prepared_split(where, job, make_inputs(cfg, template, job), what, cfg.data.num_proc, token)


def _what(which: str, sources: list, source) -> str:
    """How progress lines name a split: by its place in the config, not its path (a path may hold a secret
    put in by `${VAR}`; the config and the plan, which show it, are redacted where they are printed)."""
    if len(sources) == 1:
        return f"data ({which} split)"
    return f"data ({which} split of source {sources.index(source)} of {len(sources)})"


def _name(which: str, sources: list, source) -> str:
    return which if len(sources) == 1 else f"{which} (source {sources.index(source)})"


def _records(sources, records: list[dict], shares: list[float], counts: list[int]) -> list[dict]:
    """Per source: where, rows read, kept (or blocks written), left out, its share and rows an epoch draws."""
    return [
        {
            "path": source.path,
            "split": source.split,
            "rows": record["rows"],
            "written": record["written"],
            "left_out": record["left_out"],
            "share": round(share, 6),
            "per_epoch": int(count),
        }
        for source, record, share, count in zip(sources, records, shares, counts, strict=True)
    ]


def tokenizer_for(cfg: LLMConfig, tokenizer, template: str | None, token: str | None = None):
    """`tokenizer` with a source's own chat template (`data.sources[].chat_template`) where it differs from the
    run's (a copy; the run's tokenizer keeps its template)."""
    import copy

    from autotrain.trainers.llm.model import CHAT_TEMPLATES

    if template is None or template == cfg.data.chat_template or template == "none":
        return tokenizer
    own = copy.deepcopy(tokenizer)
    if template in CHAT_TEMPLATES:
        own.chat_template = CHAT_TEMPLATES[template]
    else:  # "tokenizer": the base model's own template, or chatml where it has none (as the run's would be)
        from autotrain.trainers import common

        own.chat_template = common.build_tokenizer(cfg, token).chat_template or CHAT_TEMPLATES["chatml"]
    return own


def streamed_splits(cfg: LLMConfig, tokenizer, with_valid: bool, make_job) -> tuple[Any, Any]:
    """(training rows, validation rows or None) as datasets IterableDatasets: read, shuffled in a buffer of
    SHUFFLE_ROWS rows (training), prepared batch by batch as training reads them, sources interleaved by
    their shares. Nothing is written."""
    from datasets import concatenate_datasets, interleave_datasets

    sources = cfg.data.split_sources()
    seed = cfg.training_args.seed
    parts = [_stream(cfg, tokenizer, s, s.split, make_job, seed) for s in sources]
    shares = cfg.data.shares()
    training = parts[0]
    if len(parts) > 1:
        training = interleave_datasets(parts, probabilities=shares, seed=seed, stopping_strategy="all_exhausted")
    if not with_valid:
        return training, None
    held_out = [_stream(cfg, tokenizer, s, s.valid_split, make_job, None) for s in sources if s.valid_split]
    return training, held_out[0] if len(held_out) == 1 else concatenate_datasets(held_out)


def _stream(cfg: LLMConfig, tokenizer, source, split: str, make_job, seed: int | None):
    from autotrain.data.loading import locate
    from autotrain.data.reading import column_names, rows_dataset

    located = locate(source.path, split)
    template = tokenizer_for(cfg, tokenizer, source.chat_template)
    job = make_job(cfg, template, source.chat_template)
    job.compact = False  # read by the trainer as it is made
    dataset = rows_dataset(located, streaming=True)
    mapping = job.columns(column_names(dataset, located), located.name, dict(source.column_mapping))
    if seed is not None:
        dataset = dataset.shuffle(seed=seed, buffer_size=SHUFFLE_ROWS)
    prepared = dataset.with_format("arrow").map(
        _streamed_batch,
        batched=True,
        with_indices=True,
        fn_kwargs={"job": job, "mapping": mapping},
        remove_columns=list(column_names(dataset, located)),
    )
    prepared = prepared.with_format(None)
    if next(iter(prepared), None) is None:  # every row left out (or no full block): said now, not as a StopIteration
        raise UserInputError(
            f"{located.name}: no row of the stream is left to train on within training_args.max_length "
            f"({cfg.training_args.max_length} tokens): raise max_length, or shorten the prompts"
        )
    return prepared


def _streamed_batch(table, indices: list[int], job, mapping: dict[str, str]):
    import pyarrow as pa

    prepared, _ = job(pa.table({task: table.column(column) for task, column in mapping.items()}), indices[0])
    return prepared

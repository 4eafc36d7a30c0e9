"""Data preparation at scale: the batched labelling gives exactly the labels of the per-conversation one (and of
TRL's own preparation for prompt / completion and text rows), the rows are kept compactly and read back
the same, the cache is reused, cleaned and shared, progress is shown without a terminal, and the data
rules of the config are located errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trl
import yaml
from datasets import Dataset

ROOT = Path(__file__).resolve().parent
TINY = ROOT / "assets" / "tiny-llama"
TRL_TEMPLATES = Path(trl.__file__).parent / "chat_templates"
MARKERS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<start_of_turn>", "<end_of_turn>"]
MARKERS += ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
SYSTEM = {"role": "system", "content": "a white snow is a happy snow."}
TURNS = [
    {"role": "user", "content": "what color is the sky?"},
    {"role": "assistant", "content": "the sky is blue."},
    {"role": "user", "content": "and the grass?"},
    {"role": "assistant", "content": "<think>green, as grass is.</think>the grass is green."},
    {"role": "user", "content": "the sea?"},
    {"role": "assistant", "content": "the sea is blue, and very wide."},
]
CONVERSATIONS = [
    [SYSTEM, *TURNS],
    TURNS,
    TURNS[:2],
    TURNS[:3],  # ends with a user turn: its last turn is not trained
    TURNS[1:2],  # opens with the assistant
    [SYSTEM, TURNS[0], {"role": "assistant", "content": ""}],  # an empty answer
]
# The templates of models that autotrain trains, as TRL ships them (and the shipped tiny model's chatml).
TEMPLATES = ["llama3", "llama3_2", "gemma", "phi3", "qwen2_5", "qwen3", "deepseekv3", "cohere", "glm4moe"]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TINY)
    tokenizer.add_tokens(MARKERS, special_tokens=True)
    return tokenizer


def _per_row(tokenizer, conversations):
    """The per-conversation labelling (autotrain.data.answers), row by row; an error as its message."""
    from autotrain.data.answers import answer_tokens
    from autotrain.errors import UserInputError

    out = []
    for messages in conversations:
        try:
            ids, mask = answer_tokens(tokenizer, messages)
        except UserInputError as exc:
            out.append(str(exc))
            continue
        out.append((ids, [t if m else -100 for t, m in zip(ids, mask, strict=True)]))
    return out


def _batched(tokenizer, conversations):
    """The batched labelling of the conversations the per-row one accepts, all in one batch; a row it leaves out
    (nothing trained) comes back with every label -100, as the per-row labelling gives it."""
    from autotrain.data.sft_rows import SftSettings, label_batch
    from autotrain.errors import UserInputError

    settings = SftSettings("messages", True, False, 10**9, False)
    refused = {}
    for i, messages in enumerate(conversations):  # one by one: a template's refusal is the row's own
        try:
            label_batch(tokenizer, {"messages": [messages]}, settings)
        except UserInputError as exc:
            refused[i] = str(exc)
    accepted = [c for i, c in enumerate(conversations) if i not in refused]
    table, left_out = label_batch(tokenizer, {"messages": accepted}, settings)
    rows = iter(zip(table.column("input_ids").to_pylist(), table.column("labels").to_pylist(), strict=True))
    out, position = [], 0
    for i, messages in enumerate(conversations):
        if i in refused:
            out.append(refused[i])
            continue
        if position in set(left_out.tolist()):
            ids = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False)
            out.append((ids["input_ids"], [-100] * len(ids["input_ids"])))
        else:
            out.append(next(rows))
        position += 1
    return out


@pytest.mark.parametrize("name", ["chatml", "zephyr", "smollm2", *TEMPLATES])
def test_batched_labels_are_the_per_conversation_labels(tokenizer, name):
    """Every template, every shape of conversation: the batch's labels (one tokenizer call, numpy masks) are
    the per-conversation function's, token for token; a template that refuses a conversation refuses it in
    both with the same message."""
    from autotrain.trainers.llm.model import CHAT_TEMPLATES

    own = {"chatml": CHAT_TEMPLATES["chatml"], "zephyr": CHAT_TEMPLATES["zephyr"]}
    default_system = (
        "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n' "
        "}}{% endif %}"
    )
    smollm2 = default_system + (TINY / "chat_template.jinja").read_text()
    template = own.get(name) or (smollm2 if name == "smollm2" else (TRL_TEMPLATES / f"{name}.jinja").read_text())
    tokenizer.chat_template = template
    expected = _per_row(tokenizer, CONVERSATIONS)
    assert any(not isinstance(row, str) and any(label != -100 for label in row[1]) for row in expected)
    assert _batched(tokenizer, CONVERSATIONS) == expected


def _trl_prepared(rows: list[dict], tmp_path: Path, tokenizer) -> tuple[list, list]:
    """TRL's own preparation of `rows` (no max_length), read from the dataset its public SFTTrainer prepares."""
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=str(tmp_path), max_length=None, report_to="none", use_cpu=True, bf16=False)
    model = AutoModelForCausalLM.from_pretrained(TINY)
    trainer = SFTTrainer(model, args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    return trainer.train_dataset["input_ids"], trainer.train_dataset["labels"]


PROMPTS = [
    {"prompt": "what color is the sky?", "completion": "the sky is blue."},
    {"prompt": "what color is the grass? " * 3, "completion": " green<|end_of_text|>"},
    {"prompt": [{"role": "user", "content": "and the sea?"}], "completion": [{"role": "assistant", "content": "blue"}]},
]


@pytest.mark.parametrize("shape", ["conversational", "plain", "text"])
def test_completion_and_text_rows_are_labelled_as_trl_labels_them(tmp_path, shape):
    """Prompt / completion rows (under a chat template: turns; without: plain text with EOS) and plain text
    get TRL's labels: the completion trained from where the prompt's tokens and the whole row's part, every
    token of a text."""
    from transformers import AutoTokenizer

    from autotrain.data.sft_rows import SftSettings, label_batch

    tokenizer = AutoTokenizer.from_pretrained(TINY)
    if shape == "conversational":
        rows = [{"prompt": [{"role": "user", "content": r["prompt"]}] if isinstance(r["prompt"], str) else r["prompt"],
                 "completion": [{"role": "assistant", "content": r["completion"]}] if isinstance(r["completion"], str)
                 else r["completion"]} for r in PROMPTS]  # fmt: skip
    elif shape == "plain":
        rows = PROMPTS[:2]
    else:
        rows = [{"text": "the sea is deep"}, {"text": "and blue<|end_of_text|>"}]
    trl_ids, trl_labels = _trl_prepared(rows, tmp_path, tokenizer)
    kind = "text" if shape == "text" else "completion"
    columns = {key: [row[key] for row in rows] for key in rows[0]}
    ours, _ = label_batch(tokenizer, columns, SftSettings(kind, shape == "conversational", False, 10**9, False))
    assert ours.column("input_ids").to_pylist() == trl_ids
    assert ours.column("labels").to_pylist() == trl_labels
    if shape != "text":  # the prompts carry no loss
        assert all(labels[0] == -100 for labels in trl_labels)


def test_kept_rows_read_back_as_the_labelled_rows():
    """The cache keeps 16-bit ids and the trained token ranges; read back, the rows are the labelled ones
    (empty rows, rows trained whole or not at all, a batch that is a slice of a larger one)."""
    import numpy as np
    import pyarrow as pa

    from autotrain.data.rows import compact, expand

    rng = np.random.default_rng(0)
    ids, labels = [], []
    for length in (0, 1, 5, 17, 3, 40, 3, 2):
        row = rng.integers(0, 300, length).tolist()
        trained = rng.random(length) < 0.5
        ids.append(row)
        labels.append([t if k else -100 for t, k in zip(row, trained, strict=True)])
    ids[6], labels[6] = [1, 2, 3], [1, 2, 3]
    labels[7] = [-100, -100]
    table = pa.table(
        {"input_ids": pa.array(ids, pa.list_(pa.int32())), "labels": pa.array(labels, pa.list_(pa.int32()))}
    )
    for part in (table, table.slice(2, 5)):
        kept = compact(part, 320)
        assert kept.schema.field("input_ids").type == pa.list_(pa.uint16())
        back = expand(kept.to_pydict())
        assert back["input_ids"] == part.column("input_ids").to_pylist()
        assert back["labels"] == part.column("labels").to_pylist()
    assert compact(table, 200_000).schema.field("input_ids").type == pa.list_(pa.int32())  # a large vocabulary


def test_batches_are_short_enough_to_share_a_split_out_only_where_rows_are_prepared_apart(tokenizer):
    """The last batches of a split are what the other workers wait on: a job that prepares each row on its own
    reads at least TURNS batches per worker; a job whose rows depend on the batch (packing, CLM blocks) keeps
    its batches, so what it makes does not change."""
    from autotrain.data import pipeline
    from autotrain.data.blocks import BlockJob
    from autotrain.data.sft_rows import SftJob, SftSettings

    apart = SftJob(tokenizer, SftSettings("messages", True, False, 512, False))
    packed = SftJob(tokenizer, SftSettings("messages", True, False, 512, True))
    assert apart.rows_apart and not packed.rows_apart and not BlockJob(tokenizer, 64).rows_apart
    assert pipeline.batch_rows(apart, 5000, 2, 1000) == 313 == -(-5000 // (2 * pipeline.TURNS))
    assert pipeline.batch_rows(apart, 1_000_000, 2, 1000) == 1000
    kept = ((packed, 5000, 2), (BlockJob(tokenizer, 64), 5000, 2), (apart, None, 2), (apart, 5000, 0))
    for job, rows, workers in kept:
        assert pipeline.batch_rows(job, rows, workers, 1000) == 1000


# --- the cache ----------------------------------------------------------------------------------------------


class _Counting:
    """A job that counts the batches it prepares (in this process: small data)."""

    def __init__(self):
        self.batches = 0

    def columns(self, names, name, given):
        return {"text": "text"}

    @property
    def schema(self):
        import pyarrow as pa

        return pa.schema([("input_ids", pa.list_(pa.int32()))])

    def __call__(self, table, first_row):
        import numpy as np
        import pyarrow as pa

        self.batches += 1
        lengths = [len(t) for t in table.column("text").to_pylist()]
        return pa.table({"input_ids": pa.array([[n] for n in lengths], pa.list_(pa.int32()))}), np.zeros(0, int)


def _rows(path: Path, count: int, word: str = "sky") -> Path:
    path.write_text("".join(json.dumps({"text": f"{word} {i}"}) + "\n" for i in range(count)), encoding="utf-8")
    return path


def _prepare(path: Path, job, inputs=None):
    from autotrain.data.prepared import SplitSource, prepared_split

    return prepared_split(SplitSource(str(path), "train"), job, inputs or {"x": 1}, "data", 1)


def test_a_second_run_reuses_the_cache_and_a_changed_file_replaces_it(tmp_path, data_cache):
    from autotrain.data import cache

    data = _rows(tmp_path / "data.jsonl", 2500)
    job = _Counting()
    rows, record = _prepare(data, job)
    assert job.batches == 3 and len(rows) == 2500 and record["rows"] == 2500
    assert rows[2499]["input_ids"] == [len("sky 2499")]
    again = _Counting()
    rows, _ = _prepare(data, again)
    assert again.batches == 0 and len(rows) == 2500  # read from the cache, nothing prepared
    cache.release_all()  # this process is done with it, as a finished run is
    entries = [p for p in data_cache.rglob(cache.DONE) if str(data) in (p.parent.parent / cache.SOURCE).read_text()]
    assert len(entries) == 1
    _rows(data, 10, "sea")  # the file changes: prepared again, and its older entry removed
    os.utime(data, ns=(entries[0].stat().st_mtime_ns + 10**9,) * 2)
    changed = _Counting()
    rows, _ = _prepare(data, changed)
    assert changed.batches == 1 and rows[0]["input_ids"] == [len("sea 0")]
    assert not entries[0].exists()


def test_cleaning_spares_what_autotrain_did_not_make_and_what_a_run_holds(tmp_path):
    from autotrain.data import cache

    root = tmp_path / "cache"
    data = _rows(tmp_path / "gone.jsonl", 1)
    source = {"file": str(data)}
    held = cache.Entry(source, {"v": 1}, root)
    assert held.claim()
    held.publish({"rows": 0})
    held.hold()  # as a training process does
    data.unlink()
    foreign = held.parent / "not-ours"
    foreign.mkdir()
    (foreign / "data.arrow").write_text("a user's file")
    newer = cache.Entry(source, {"v": 2}, root)
    assert newer.claim()
    newer.publish({"rows": 0})  # cleans the other entries of the source, and sources whose file is gone
    assert held.folder.is_dir() and (foreign / "data.arrow").is_file()
    assert not newer.folder.is_dir()  # not held: its file is gone, so it was swept
    assert held.record() == {"rows": 0}


def test_one_process_prepares_and_the_others_wait_for_its_files(tmp_path):
    """The claim is taken once; a second claimant waits; a failure reaches the waiting processes; a claim
    whose process is gone is taken over."""
    import subprocess
    import sys

    from autotrain.data import cache
    from autotrain.errors import UserInputError

    entry = cache.Entry({"file": "x"}, {}, tmp_path)
    assert entry.claim() and not entry.claim()
    entry.fail("row 3: bad")
    with pytest.raises(UserInputError, match="row 3: bad"):
        cache.wait_for(entry, may_claim=False, say=lambda done, total: None)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    other = cache.Entry({"file": "y"}, {}, tmp_path)
    assert other.claim()
    claim = json.loads(other.file(cache.CLAIM).read_text())
    other.file(cache.CLAIM).write_text(json.dumps({**claim, "pid": int(gone.stdout), "started": "0"}))
    assert cache.wait_for(other, may_claim=True, say=lambda done, total: None) is False  # taken over


def test_progress_lines_without_a_terminal(capsys):
    """No terminal: a line at each interval (rows, rows/s, share, time left), and the summary last."""
    import io
    import time

    from autotrain.data.progress import RowProgress

    stream = io.StringIO()
    progress = RowProgress("data x", 1000, stream=stream, rich=False, interval=0.05)
    progress.update(250)
    time.sleep(0.3)
    progress.close("data x: 1,000 rows prepared")
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3 and lines[-1] == "data x: 1,000 rows prepared"
    assert lines[0].startswith("data x: 250 of 1,000 rows (25%), ") and " rows/s, eta " in lines[0]
    unknown = RowProgress("data y", None, stream=io.StringIO(), rich=False, interval=10)
    unknown.update(5)
    assert unknown.line().startswith("data y: 5 rows, ")
    unknown.close()


# --- the config's data rules -----------------------------------------------------------------------------


def _problems(tmp_path: Path, data: dict, **training) -> str:
    from autotrain.config.load import load_config
    from autotrain.errors import ConfigError, UserInputError

    config = {
        "task": "llm",
        "base_model": str(TINY),
        "project_name": str(tmp_path / "run"),
        "data": data,
        "training_args": training,
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    try:
        load_config(path, [])
    except (ConfigError, UserInputError) as exc:
        return str(exc)
    return ""


def test_bad_weights_are_located_errors(tmp_path):
    two = [{"path": "a.jsonl"}, {"path": "b.jsonl"}]
    assert _problems(tmp_path, {"sources": two}) == ""
    cases = [
        ([{"path": "a.jsonl", "weight": -1}, {"path": "b.jsonl"}], "sources.0.weight"),
        ([{"path": "a.jsonl", "fraction": 1.5}, {"path": "b.jsonl"}], "sources.0.fraction"),
        ([{"path": "a.jsonl", "weight": 0}, {"path": "b.jsonl", "weight": 0}], "every source's weight is 0"),
        ([{"path": "a.jsonl", "fraction": 0.7}, {"path": "b.jsonl", "fraction": 0.6}], "add up to 1.3: more than"),
        ([{"path": "a.jsonl", "fraction": 0.5}, {"path": "b.jsonl", "fraction": 0.3}], "must add up to 1"),
        ([{"path": "a.jsonl", "fraction": 0.5, "weight": 1}, {"path": "b.jsonl"}], "not both"),
        ([{"path": "a.jsonl", "fraction": 1.0}, {"path": "b.jsonl", "weight": 2}], "would never be drawn"),
        ([{"path": "a.jsonl", "column_mapping": {"txt": "body"}}, {"path": "b.jsonl"}], "`txt` is not a column"),
    ]
    for sources, expected in cases:
        assert expected in _problems(tmp_path, {"sources": sources}), sources
    assert "exclude each other" in _problems(tmp_path, {"path": "a.jsonl", "sources": two})
    assert "`data.path` is needed" in _problems(tmp_path, {"chat_template": "chatml"})


def test_streaming_says_what_it_cannot_offer(tmp_path):
    stream = {"path": "a.jsonl", "streaming": True}
    assert "needs `training_args.max_steps`" in _problems(tmp_path, stream)
    assert _problems(tmp_path, stream, max_steps=10) == ""
    grouped = _problems(tmp_path, stream, max_steps=10, length_grouping=True)
    assert "length_grouping` cannot be offered with `data.streaming: true`" in grouped


def test_a_hub_dataset_streams_its_split_and_subset_and_a_missing_split_is_one_line(tmp_path):
    """The hub branch of streaming, on a dataset repository's layout kept locally (a hub id resolves to the
    same files): a subset declared in the card's configs, each split read as it is iterated."""
    from autotrain.data.loading import Located
    from autotrain.data.reading import rows_dataset
    from autotrain.errors import UserInputError

    repo = tmp_path / "repo"
    for subset, rows in (("chat", 5), ("plain", 3)):
        (repo / subset).mkdir(parents=True)
        lines = [json.dumps({"text": f"{subset} {i}"}) for i in range(rows)]
        (repo / subset / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    card = ["---", "configs:"]
    for subset in ("chat", "plain"):
        card += [f"- config_name: {subset}", "  data_files:", "  - split: train", f"    path: {subset}/train.jsonl"]
    (repo / "README.md").write_text("\n".join([*card, "---", ""]), encoding="utf-8")

    def hub(split: str, subset: str | None) -> Located:
        return Located("hub", str(repo), split, f"{repo} [{split}]", subset, None)

    for subset, rows in (("chat", 5), ("plain", 3)):
        stream = rows_dataset(hub("train", subset), streaming=True)
        assert type(stream).__name__ == "IterableDataset"
        assert [row["text"] for row in stream] == [f"{subset} {i}" for i in range(rows)]
    with pytest.raises(UserInputError, match="cannot stream dataset") as raised:
        rows_dataset(hub("validation", "chat"), streaming=True)
    assert "\n" not in str(raised.value)


def test_shares_of_an_epoch(tmp_path):
    from autotrain.config.llm import LLMData
    from autotrain.data.mixture import quotas

    data = LLMData(sources=[{"path": "a", "weight": 5}, {"path": "b", "weight": 3}, {"path": "c", "weight": 2}])
    assert data.shares() == pytest.approx([0.5, 0.3, 0.2])
    mixed = LLMData(sources=[{"path": "a", "fraction": 0.5}, {"path": "b", "weight": 3}, {"path": "c", "weight": 2}])
    assert mixed.shares() == pytest.approx([0.5, 0.3, 0.2])
    assert quotas([0.5, 0.3, 0.2], 1001) == [501, 300, 200]  # largest remainder first
    assert LLMData(path="x").shares() == [1.0]


# --- several processes -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_prepare_once_and_wait_without_a_collective(tmp_path):
    """Two gloo processes whose collective timeout (15 s) is shorter than rank 0's preparation (30 s of
    waiting before it starts, as for a large file): both train; rank 0 prepared the data, rank 1 read it."""
    import socket
    import subprocess
    import sys

    rows = [{"messages": [{"role": "user", "content": f"what is {i}?"}, {"role": "assistant", "content": "blue."}]}
            for i in range(64)]  # fmt: skip
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = {
        "task": "llm",
        "base_model": str(TINY),
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(data)},
        "training_args": {"max_steps": 2, "batch_size": 4, "max_length": 64, "mixed_precision": "no"},
    }
    (tmp_path / "config.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    base["OMP_NUM_THREADS"] = "1"
    script = [sys.executable, str(ROOT / "prepare_ranks.py"), str(tmp_path / "config.yml"), "30", "15"]
    ranks = [
        subprocess.Popen(
            script,
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for r in range(2)
    ]
    outputs = [rank.communicate(timeout=600) for rank in ranks]
    for rank, (out, err) in zip(ranks, outputs, strict=True):
        assert rank.returncode == 0, err[-3000:]
        assert "trained 2 steps" in out
    assert outputs[0][1].count("rows prepared") == 1  # rank 0 prepared the data
    assert "rows prepared" not in outputs[1][1]  # rank 1 read what rank 0 wrote


@pytest.mark.slow
def test_the_app_shows_the_preparations_progress(tmp_path):
    """A run started from the app writes its progress lines to the log the app shows: the periodic lines of a
    preparation (here every 0.2 s: AUTOTRAIN_PROGRESS_INTERVAL) and its summary."""
    pytest.importorskip("fastapi", reason='the app needs its extra: pip install -e ".[app]"')
    import time

    from fastapi.testclient import TestClient

    from autotrain.app.server import create_app

    runs = tmp_path / "runs"
    data = tmp_path / "text.jsonl"
    data.write_text("".join(json.dumps({"text": f"the sea is blue {i} " * 20}) + "\n" for i in range(6000)))
    config = {
        "task": "llm",
        "trainer": "clm",
        "base_model": str(TINY),
        "project_name": str(runs / "prep"),
        "data": {"path": str(data), "num_proc": 1},
        "training_args": {"max_steps": 1, "batch_size": 2, "max_length": 32, "mixed_precision": "no"},
    }
    os.environ["AUTOTRAIN_PROGRESS_INTERVAL"] = "0.2"
    try:
        client = TestClient(create_app(runs, ROOT.parent), base_url="http://127.0.0.1")
        assert client.post("/api/runs", json={"yaml": yaml.safe_dump(config)}).status_code == 200
        deadline = time.monotonic() + 300
        while (run := client.get("/api/runs/prep").json())["status"] == "running" and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        del os.environ["AUTOTRAIN_PROGRESS_INTERVAL"]
    assert run["status"] == "completed", run["log"]
    assert "of 6,000 rows (" in run["log"] and " rows/s, eta " in run["log"]  # a line while it prepared
    assert "6,000 rows prepared in" in run["log"]


# --- mixtures ---------------------------------------------------------------------------------------------


def test_each_epoch_draws_the_shares_again_and_a_seed_draws_the_same():
    import numpy as np

    from autotrain.data.mixture import Mixture

    mixture = Mixture([1000, 500, 100], [0.5, 0.3, 0.2], seed=7)
    epochs = []
    for epoch in range(3):
        mixture.set_epoch(epoch)
        counts = np.bincount(mixture.source, minlength=3) / len(mixture.source)
        assert np.allclose(counts, [0.5, 0.3, 0.2], atol=1e-3)
        # a source larger than its quota: no row twice; a smaller one: each row about equally often
        assert len(set(mixture.row[mixture.source == 1].tolist())) == int((mixture.source == 1).sum())
        assert set(np.bincount(mixture.row[mixture.source == 2], minlength=100).tolist()) <= {3, 4}  # 320 of 100
        epochs.append(list(zip(mixture.source.tolist(), mixture.row.tolist(), strict=True)))
    assert epochs[0] != epochs[1] != epochs[2]
    again = Mixture([1000, 500, 100], [0.5, 0.3, 0.2], seed=7)
    again.set_epoch(1)
    assert list(zip(again.source.tolist(), again.row.tolist(), strict=True)) == epochs[1]


def test_a_mixture_reads_each_sources_rows():
    from autotrain.data.mixture import mixed_rows

    parts = [Dataset.from_dict({"input_ids": [[i] for i in range(10)]}), Dataset.from_dict({"input_ids": [[100]]})]
    rows, mixture = mixed_rows(parts, [0.5, 0.5], seed=0)
    assert len(rows) == 11 and isinstance(rows, Dataset)  # what TRL's SFTTrainer takes
    first = [row["input_ids"][0] for row in rows]
    assert first.count(100) == 5 and len(set(first) - {100}) == 6  # half the epoch from the one-row source
    mixture.set_epoch(1)
    assert [row["input_ids"][0] for row in rows] != first


def _llm_config(tmp_path: Path, data: dict, name: str = "config", **training) -> Path:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(TINY),
        "project_name": str(tmp_path / "run"),
        "data": data,
        "training_args": {"batch_size": 2, "max_length": 64, "mixed_precision": "no", "logging_steps": 1, **training},
    }
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _chat_rows(path: Path, count: int, answer: str = "blue.") -> str:
    rows = [
        [{"role": "user", "content": f"what is {i}?"}, {"role": "assistant", "content": answer}] for i in range(count)
    ]
    path.write_text("".join(json.dumps({"messages": r}) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.mark.slow
def test_a_mixture_trains_records_rows_per_source_and_previews_each(tmp_path, cli):
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps({"q": f"{i}?", "a": f"{i}."}) + "\n" for i in range(10)), encoding="utf-8")
    sources = [
        {"path": _chat_rows(tmp_path / "chat.jsonl", 30), "weight": 3},
        {"path": str(qa), "weight": 1, "column_mapping": {"prompt": "q", "completion": "a"}, "chat_template": "zephyr"},
    ]
    config = _llm_config(tmp_path, {"sources": sources}, max_steps=2)
    preview = cli("llm", "--config", config, "--preview", "1")
    assert preview.exit_code == 0, preview.output
    assert "--- example 0 from source 0 (" in preview.stdout and "--- example 1 from source 1 (" in preview.stdout
    assert "<|assistant|>" in preview.stdout  # the second source's own chat template
    result = cli("llm", "--config", config)
    assert result.exit_code == 0, result.output
    plan = json.loads((tmp_path / "run" / "run.json").read_text())["plan"]
    recorded = [(s["rows"], s["share"], s["per_epoch"]) for s in plan["data"]["sources"]]
    assert recorded == [(30, 0.75, 30), (10, 0.25, 10)]


@pytest.mark.slow
def test_a_mixture_resumed_mid_epoch_draws_what_it_would_have(tmp_path, cli):
    """6 + 2 rows, half of each epoch from each source, batches of 2: 4 steps an epoch, each epoch drawn
    again. Stopped after step 3 and resumed to step 6, the losses are those of the run never stopped."""
    sources = [
        {"path": _chat_rows(tmp_path / "a.jsonl", 6), "fraction": 0.5},
        {"path": _chat_rows(tmp_path / "b.jsonl", 2, "green, and very green."), "fraction": 0.5},
    ]
    config = _llm_config(tmp_path, {"sources": sources}, max_steps=6, save_steps=3, scheduler="constant", lr=1e-3)
    whole = _losses(cli, config, tmp_path / "whole")
    assert _losses(cli, config, tmp_path / "resumed", first_steps=3)[-3:] == pytest.approx(whole[-3:], abs=1e-6)


# --- streaming --------------------------------------------------------------------------------------------


def _losses(cli, config: Path, project: Path, first_steps: int | None = None) -> list[float]:
    """The logged losses of a run of `config` in `project`; with `first_steps`, a run stopped after that many
    steps (a checkpoint there) and then resumed to the config's end."""
    where = f"project_name={project}"
    if first_steps is not None:
        stopped = cli("llm", "--config", config, "--set", where, "--set", f"training_args.max_steps={first_steps}")
        assert stopped.exit_code == 0, stopped.output
        result = cli("llm", "--config", config, "--set", where, "--resume", project / f"checkpoint-{first_steps}")
    else:
        result = cli("llm", "--config", config, "--set", where)
    assert result.exit_code == 0, result.output
    state = json.loads((project / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


@pytest.mark.slow
def test_a_stream_trains_over_several_passes_and_resumes_mid_epoch_as_if_never_stopped(tmp_path, cli):
    """8 rows, batches of 2: 4 steps a pass; 6 steps cross into the second pass. Stopped after step 3
    (mid-pass) and resumed, the run takes the steps the uninterrupted one took: the same rows, same order."""
    data = {"path": _chat_rows(tmp_path / "chat.jsonl", 8), "streaming": True}
    config = _llm_config(tmp_path, data, max_steps=6, save_steps=3, scheduler="constant", lr=1e-3)
    whole = _losses(cli, config, tmp_path / "whole")
    assert len(whole) == 6
    assert _losses(cli, config, tmp_path / "resumed", first_steps=3)[-3:] == pytest.approx(whole[-3:], abs=1e-6)
    cached = [p.read_text() for p in Path(os.environ["AUTOTRAIN_DATA_CACHE"]).rglob("source.json")]
    assert not [text for text in cached if data["path"] in text]  # a stream caches nothing


def test_autotrain_advanced_data_options_among_its_parameters_translate(tmp_path, cli):
    """AutoTrain Advanced takes its data options as parameters too (`--data-path`, `--train-split`,
    `--text-column` on its command line): they land in the `data:` section, each error pointing at its line."""
    config = tmp_path / "advanced.yml"
    config.write_text(
        "task: llm-sft\nbase_model: m\nproject_name: p\nparams:\n  data_path: d.jsonl\n  train_split: train\n"
        "  valid_split: test.jsonl\n  text_column: body\n  chat_template: none\n",
        encoding="utf-8",
    )
    result = cli("migrate", config)
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)["data"]
    assert data == {"chat_template": "none", "path": "d.jsonl", "train_split": "train", "valid_split": "test.jsonl",
                    "column_mapping": {"text": "body"}}  # fmt: skip


def test_a_cache_folder_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    from autotrain.errors import UserInputError

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("AUTOTRAIN_DATA_CACHE", str(blocker / "cache"))
    with pytest.raises(UserInputError, match=r"the data cache .*a-file/cache cannot be written .*AUTOTRAIN_DATA_CACHE"):
        _prepare(_rows(tmp_path / "data.jsonl", 10), _Counting())


def test_a_parquet_or_csv_file_is_read_a_batch_at_a_time_and_counted_before(tmp_path):
    """The reader behind preparation, preview and streaming: Parquet (rows from its metadata) and CSV (from its
    lines) as JSON Lines, a batch of task columns at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from autotrain.data.loading import locate
    from autotrain.data.reading import batches, column_names, known_rows, rows_dataset

    texts = [f"row {i}" for i in range(2500)]
    pq.write_table(pa.table({"body": texts, "other": list(range(2500))}), tmp_path / "data.parquet", row_group_size=700)
    (tmp_path / "data.csv").write_text("body,other\n" + "".join(f"{t},{i}\n" for i, t in enumerate(texts)))
    for name in ("data.parquet", "data.csv"):
        located = locate(str(tmp_path / name), "train")
        dataset = rows_dataset(located, streaming=True)
        assert known_rows(located, dataset) == 2500 and column_names(dataset, located) == ["body", "other"]
        tables = list(batches(dataset, located, {"text": "body"}))
        assert [t.num_rows for t in tables] == [1000, 1000, 500] and tables[0].column_names == ["text"]
        assert [v for t in tables for v in t.column("text").to_pylist()] == texts


@pytest.mark.slow
def test_a_secret_in_the_data_path_is_never_printed_nor_saved(tmp_path, cli, monkeypatch):
    """A data path made with `${HF_TOKEN}`: the preparation's lines name the split by its place, and the plan,
    run.json and the model card redact it."""
    secret = "hf_datapathsecret123"
    folder = tmp_path / secret
    folder.mkdir()
    config = _llm_config(tmp_path, {"path": "${HF_TOKEN}/chat.jsonl"}, max_steps=1)
    _chat_rows(folder / "chat.jsonl", 8)
    monkeypatch.chdir(tmp_path)
    result = cli("llm", "--config", config, env={"HF_TOKEN": secret})
    assert result.exit_code == 0, result.output
    assert "data (training split): 8 rows prepared" in result.stderr and secret not in result.output
    for saved in ("run.json", "README.md", "autotrain.yaml"):
        assert secret not in (tmp_path / "run" / saved).read_text(), saved


def test_a_batch_with_every_row_left_out_keeps_the_columns_of_the_others(tokenizer):
    """Packed or not, a batch whose rows all fall out (no answer within max_length) has the others' columns,
    so that the split's file (and a stream) holds one schema."""
    from autotrain.data.rows import compact
    from autotrain.data.sft_rows import SftSettings, label_batch

    tokenizer.chat_template = (TINY / "chat_template.jinja").read_text()
    long = [{"role": "user", "content": "what color is the sky? " * 30}, {"role": "assistant", "content": "blue."}]
    for packing in (False, True):
        settings = SftSettings("messages", True, False, 32, packing)
        none, left_out = label_batch(tokenizer, {"messages": [long, long]}, settings)
        some, _ = label_batch(tokenizer, {"messages": [TURNS[:2], long]}, settings)
        assert none.num_rows == 0 and left_out.tolist() == [0, 1] and some.num_rows == 1
        assert compact(none, len(tokenizer)).schema == compact(some, len(tokenizer)).schema


def test_message_lists_written_as_json_text_are_read_back_and_the_text_row_is_named():
    """datasets' JSON reader writes a column that holds lists and text as JSON text in every row: the lists
    are read back as lists, and the row that held text is the one named, with the text as the file had it."""
    from autotrain.data.sft_rows import check_conversations
    from autotrain.errors import UserInputError

    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert check_conversations([json.dumps(turns), turns], 0) == [turns, turns]
    with pytest.raises(UserInputError, match=r"row 11 .*it holds str 'hello there'$"):
        check_conversations([json.dumps(turns), json.dumps("hello there")], 10)


def _mapped_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of `path`."""
    total, current = 0, None
    with open("/proc/self/smaps", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            if "-" in fields[0] and ":" not in fields[0]:
                current = fields[5] if len(fields) > 5 else None
            elif fields[0] == "Rss:" and current == str(path):
                total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads the kernel's /proc/self/smaps (Linux)")
def test_the_pages_a_run_read_from_a_mapped_split_are_let_go_of_and_read_again(tmp_path):
    import mmap
    import random

    from autotrain.data.mapped import ReleasedPages, file_mappings
    from autotrain.data.mixture import mixed_rows

    rng = random.Random(0)
    rows = {"input_ids": [[rng.randrange(30000) for _ in range(rng.randint(50, 500))] for _ in range(1500)]}
    Dataset.from_dict(rows).save_to_disk(tmp_path / "split")
    path = next((tmp_path / "split").glob("*.arrow")).resolve()
    mapped = Dataset.from_file(str(path))
    pages = ReleasedPages(mapped, Dataset.from_dict({"x": [1]}))  # an in-memory one has no file mapping
    whole_pages = -(-path.stat().st_size // mmap.PAGESIZE) * mmap.PAGESIZE
    assert [length for _, length in file_mappings(pages.datasets)] == [whole_pages]
    mixture, _ = mixed_rows([Dataset.from_dict({"x": [1]}), mapped], [0.5, 0.5], seed=0)
    assert file_mappings([mixture]) == file_mappings([mapped])  # a mixture's sources are found through it

    picked = rng.sample(range(len(mapped)), 40)
    read = mapped[picked]["input_ids"]
    assert _mapped_kib(path) > 0
    pages.release()
    assert _mapped_kib(path) == 0  # the pages left the process (they stay in the page cache)
    assert mapped[picked]["input_ids"] == read == [rows["input_ids"][i] for i in picked]


def _signal_actions(table, first_row: int):
    import signal

    return signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_a_preparation_worker_ends_at_the_pools_sigterm_whatever_the_run_handles():
    """The run's SIGTERM handler (a checkpoint, or an exception) is not a worker's: a worker that kept it lived
    on after the pool's terminate, which waited on it forever."""
    import signal

    import pyarrow as pa

    from autotrain.data.pipeline import Workers

    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # a handler that does not end the process
    try:
        results = []
        with Workers(_signal_actions, 2) as workers:
            workers.map(iter([pa.table({"x": [1, 2]})] * 4), lambda result, rows: results.append(result))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert results == [(True, True)] * 4


_TERMINATED_WHILE_STARTING = """
import os, signal, time
from autotrain.data.pipeline import Workers

signal.signal(signal.SIGTERM, lambda *_: None)  # the run's handler, one that does not end the process
os.register_at_fork(after_in_child=lambda: time.sleep(1.0))  # workers slow to start, as a large run's are
with Workers(len, 2):
    pass  # terminated at once: the pool's SIGTERM reaches each worker before it has started
print("ended", flush=True)
"""


def test_a_pool_terminated_while_its_workers_start_ends():
    """A pool terminated before a worker has set its own signal actions: the worker used to take the SIGTERM
    with the run's handler, live on, and leave the terminate waiting on it forever. Run in a process group of
    its own, killed whole if it hangs."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", _TERMINATED_WHILE_STARTING],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=120)  # about 1 s; a hang is the failure
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the pool's terminate waited on a worker that took its SIGTERM with the run's handler")
    assert proc.returncode == 0 and out.strip() == "ended", err[-2000:]

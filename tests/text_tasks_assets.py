"""Tiny models and synthetic data with something to learn, for the text tasks beyond classification.

Built offline, deterministically, into a folder the caller gives (the tests cache them per session):

- `tiny_bert(folder)`: a 2-layer BERT (hidden 32) with a word-level tokenizer over VOCABULARY; the Auto
  classes add a regression, token-classification or question-answering head, sentence-transformers adds
  mean pooling;
- `tiny_t5(folder)`: a 2-layer T5 (d_model 32) with a word-level tokenizer that ends each text with `</s>`;
- `tiny_sentence_transformer(folder, bert)`: a sentence-transformers model (tiny BERT + mean pooling).

And rows for each task, where the answer follows from the words in a way a small model learns in a few
dozen steps: a sentiment sum to regress, names and places to tag, a colour or animal to find in a long
context, a category and a word to write, sentences of one topic or another to embed.
"""

from __future__ import annotations

import random
from pathlib import Path

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
FILLER = ["the", "a", "was", "is", "and", "then", "of", "with", "near", "very", "it", "we", "saw", "in", "."]
SENTIMENT = {"great": 2.0, "good": 1.0, "fine": 0.5, "bad": -1.0, "awful": -2.0, "poor": -1.5}
NOUNS = ["movie", "meal", "trip", "book", "game", "show"]
PEOPLE = ["alice", "bob", "carol", "dave", "erin", "frank"]
SURNAMES = ["smith", "jones", "brown", "taylor"]
PLACES = ["paris", "london", "berlin", "rome", "madrid", "oslo"]
VERBS = ["lives", "works", "travels", "stays"]
TOPICS = {
    "animal": ["cat", "dog", "horse", "cow", "sheep", "goat"],
    "color": ["red", "blue", "green", "yellow", "purple", "orange"],
    "fruit": ["apple", "pear", "plum", "grape", "lemon", "cherry"],
    "tool": ["hammer", "saw", "drill", "wrench", "chisel", "spade"],
    "city": ["tokyo", "lima", "cairo", "delhi", "quito", "hanoi"],
    "sport": ["tennis", "golf", "rugby", "hockey", "boxing", "rowing"],
}
QA_WORDS = ["which", "what", "?", "about", "color", "animal", "summary", "topic"]
VOCABULARY = sorted(
    {*FILLER, *SENTIMENT, *NOUNS, *PEOPLE, *SURNAMES, *PLACES, *VERBS, *QA_WORDS}
    | {w for words in TOPICS.values() for w in words}
    | set(TOPICS)
)


def _word_tokenizer(out: Path, specials: list[str], template: str, pair: str | None, max_length: int, **tokens):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(specials + VOCABULARY)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=tokens["unk_token"]))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    ids = [(t, vocab[t]) for t in specials if t in template or (pair and t in pair)]
    tokenizer.post_processor = processors.TemplateProcessing(single=template, pair=pair, special_tokens=ids)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=max_length, **tokens)
    fast.save_pretrained(out)
    return fast


def tiny_bert(out: Path) -> Path:
    import torch
    from transformers import BertConfig, BertModel

    tokenizer = _word_tokenizer(
        out,
        SPECIALS,
        "[CLS] $A [SEP]",
        "[CLS] $A [SEP] $B:1 [SEP]:1",
        128,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
    )
    BertModel(config).save_pretrained(out)
    return out


def tiny_t5(out: Path) -> Path:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    tokenizer = _word_tokenizer(
        out, ["<pad>", "</s>", "<unk>"], "$A </s>", None, 128, unk_token="<unk>", pad_token="<pad>", eos_token="</s>"
    )
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=32,
        d_ff=64,
        d_kv=16,
        num_layers=2,
        num_heads=2,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        feed_forward_proj="relu",
        tie_word_embeddings=False,
    )
    T5ForConditionalGeneration(config).save_pretrained(out)
    return out


def tiny_sentence_transformer(out: Path, bert: Path) -> Path:
    from sentence_transformers import SentenceTransformer, models

    word = models.Transformer(str(bert), max_seq_length=64)
    pooling = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="mean")
    SentenceTransformer(modules=[word, pooling], device="cpu").save(str(out))
    return out


# --- rows ------------------------------------------------------------------------------------------------


def regression_rows(rng: random.Random, count: int) -> list[dict]:
    """A short review; its score is the sum of its sentiment words' values."""
    rows = []
    for _ in range(count):
        words = rng.choices(list(SENTIMENT), k=rng.randint(1, 3))
        text = " ".join([rng.choice(["the", "a"]), rng.choice(NOUNS), "was", *words, "."])
        rows.append({"text": text, "score": sum(SENTIMENT[w] for w in words)})
    return rows


def ner_rows(rng: random.Random, count: int) -> list[dict]:
    """`alice smith lives in paris .`: a person (B-PER I-PER) and a place (B-LOC), the rest O."""
    rows = []
    for _ in range(count):
        tokens, tags = [], []
        if rng.random() < 0.5:
            tokens += [rng.choice(["we", "it"]), "saw"]
            tags += ["O", "O"]
        person = [rng.choice(PEOPLE)] + ([rng.choice(SURNAMES)] if rng.random() < 0.5 else [])
        tokens += person
        tags += ["B-PER"] + ["I-PER"] * (len(person) - 1)
        tokens += [rng.choice(VERBS), rng.choice(["in", "near"]), rng.choice(PLACES), "."]
        tags += ["O", "O", "B-LOC", "O"]
        rows.append({"tokens": tokens, "tags": tags})
    return rows


def qa_rows(rng: random.Random, count: int, filler: tuple[int, int] = (6, 30)) -> list[dict]:
    """A context of filler words holding one colour or one animal; the question asks for it."""
    rows = []
    for _ in range(count):
        asked = rng.choice(["color", "animal"])
        answer = rng.choice(TOPICS[asked])
        words = rng.choices(FILLER + NOUNS, k=rng.randint(*filler))
        words.insert(rng.randint(0, len(words)), answer)
        context = " ".join(words)
        start = (" " + context + " ").index(f" {answer} ")
        rows.append(
            {
                "context": context,
                "question": f"which {asked} ?",
                "answers": {"text": [answer], "answer_start": [start]},
            }
        )
    return rows


def seq2seq_rows(rng: random.Random, count: int) -> list[dict]:
    """Words of one topic among fillers; the target names the topic and repeats its first word."""
    rows = []
    for _ in range(count):
        topic = rng.choice(list(TOPICS))
        picked = rng.sample(TOPICS[topic], 2)
        words = rng.choices(FILLER, k=rng.randint(2, 5)) + picked
        rng.shuffle(words)
        first = next(w for w in words if w in picked)
        rows.append({"text": " ".join(words), "summary": f"about {topic} {first}"})
    return rows


def _sentence(rng: random.Random, topic: str) -> str:
    return " ".join([rng.choice(["the", "a"]), *rng.sample(TOPICS[topic], 2), rng.choice(["is", "was"]), "."])


def sentence_rows(rng: random.Random, count: int, kind: str) -> list[dict]:
    """Two (or three) sentences of topic words, never sharing a word: kind `pair` (same topic), `score`
    (1.0 same topic, 0.0 another), `class` (label 1 same topic, 0 another), `triplet` (anchor, positive,
    negative)."""
    rows, topics = [], list(TOPICS)
    for i in range(count):
        topic = topics[i % len(topics)]
        other = rng.choice([t for t in topics if t != topic])
        same = kind == "pair" or kind == "triplet" or rng.random() < 0.5
        first = rng.sample(TOPICS[topic], 4)
        second_words = first[2:] if same else rng.sample(TOPICS[other], 2)
        row = {
            "sentence1": f"the {first[0]} {first[1]} is .",
            "sentence2": f"a {second_words[0]} {second_words[1]} was .",
        }
        if kind == "score":
            row["score"] = 1.0 if same else 0.0
        elif kind == "class":
            row["label"] = 1 if same else 0
        elif kind == "triplet":
            row["sentence3"] = _sentence(rng, other)
        rows.append(row)
    return rows


# --- files and runs ------------------------------------------------------------------------------------

_BUILT: dict[str, Path] = {}


def built(root: Path, name: str, build) -> Path:
    """`build(root / name)` once per session (the tests share tiny models and trained runs)."""
    if name not in _BUILT:
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        _BUILT[name] = build(folder)
    return _BUILT[name]


def trained_tiny_bert(root: Path, name: str, task: str, config: str, data_folder) -> Path:
    """A `task` run of the tiny BERT by the CLI, on `data_folder(folder)`'s files and `config` (a text with
    {model}, {project} and {data}); trained once per session, under `root / name`."""
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    def train(folder: Path) -> Path:
        model = built(root, "tiny-bert", tiny_bert)
        path = write_config(
            folder / "config.yml", config, model=model, project=folder / "run", data=data_folder(folder / "data")
        )
        result = CliRunner().invoke(app, [task, "--config", str(path)])
        assert result.exit_code == 0, result.output
        return folder

    return built(root, name, train)


def write_rows(path: Path, rows: list[dict]) -> Path:
    """Rows as .jsonl, .csv or .parquet, by the file's suffix."""
    import csv
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    elif path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_config(path: Path, text: str, **values) -> Path:
    import textwrap

    path.write_text(textwrap.dedent(text).format(**values), encoding="utf-8")
    return path


def results(run: Path) -> dict:
    import json

    return json.loads((run / "eval_results.json").read_text(encoding="utf-8"))

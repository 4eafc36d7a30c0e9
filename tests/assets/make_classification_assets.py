"""Build the tiny classifiers and data the classification quick starts and tests use.

Deterministic: running it again rewrites the same files. Nothing is downloaded.

    python tests/assets/make_classification_assets.py

- tiny-bert/: a 2-layer BERT-shaped sequence classifier (hidden 32) and a word-level tokenizer;
- tiny-vit/: a 2-layer ViT-shaped image classifier (32x32 pixels, 8x8 patches) and its image processor;
- data/sentiment.csv: short positive / negative sentences (`text`, `label` columns);
- data/colors/{train,validation}/{red,blue}/*.png: reddish and bluish pictures in the image-folder layout.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUBJECTS = ["movie", "film", "story", "plot", "acting", "ending", "music", "cast", "show", "book"]
ADVERBS = ["really", "very", "truly", "quite", "so", "rather"]
WORDS = {
    "positive": [
        "great",
        "wonderful",
        "lovely",
        "excellent",
        "fantastic",
        "brilliant",
        "delightful",
        "superb",
    ],
    "negative": ["awful", "terrible", "boring", "horrible", "dreadful", "dull", "poor", "painful"],
}
COLORS = {"red": (200, 40, 40), "blue": (40, 60, 200)}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def sentence(rng: random.Random, label: str) -> str:
    subject, adverb = rng.choice(SUBJECTS), rng.choice(ADVERBS)
    first, second = rng.sample(WORDS[label], 2)
    return rng.choice(
        [
            f"the {subject} was {adverb} {first}",
            f"what a {first} {subject} , {adverb} {second}",
            f"i found the {subject} {first} and {second}",
            f"this {subject} is {adverb} {first} .",
        ]
    )


def sentiment_rows(rng: random.Random, count: int) -> list[dict]:
    """`count` rows, alternating labels, as {text, label} with string labels."""
    labels = ["positive", "negative"]
    return [{"text": sentence(rng, labels[i % 2]), "label": labels[i % 2]} for i in range(count)]


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def make_tokenizer(out: Path):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted(
        {
            *SUBJECTS,
            *ADVERBS,
            *WORDS["positive"],
            *WORDS["negative"],
            "the",
            "was",
            "what",
            "a",
            ",",
            "i",
            "found",
            "and",
            "this",
            "is",
            ".",
        }
    )
    vocab = {token: i for i, token in enumerate(SPECIALS + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=64,
    )
    fast.save_pretrained(out)
    return fast


def make_text_model(out: Path, num_labels: int = 3) -> None:
    """A sequence classifier with a `num_labels` head (3: training on two labels replaces the head)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = make_tokenizer(out)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=num_labels,
        pad_token_id=tokenizer.pad_token_id,
    )
    BertForSequenceClassification(config).save_pretrained(out)


def color_image(rng: random.Random, color: str):
    """A picture in a shade of `color` with two grey blobs, 28-40 pixels a side."""
    from PIL import Image, ImageDraw

    base = tuple(max(0, min(255, c + rng.randint(-30, 30))) for c in COLORS[color])
    width, height = rng.randint(28, 40), rng.randint(28, 40)
    image = Image.new("RGB", (width, height), base)
    draw = ImageDraw.Draw(image)
    for _ in range(2):
        x, y = rng.randint(0, width - 8), rng.randint(0, height - 8)
        grey = rng.randint(60, 200)
        draw.rectangle([x, y, x + rng.randint(4, 8), y + rng.randint(4, 8)], fill=(grey, grey, grey))
    return image


def write_images(folder: Path, rng: random.Random, per_class: int) -> list[tuple[Path, str]]:
    """`per_class` PNGs of each colour in FOLDER/<colour>/; returns (path, colour) pairs."""
    written = []
    for color in COLORS:
        (folder / color).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            path = folder / color / f"{color}_{i:03d}.png"
            color_image(rng, color).save(path)
            written.append((path, color))
    return written


def make_image_model(out: Path) -> None:
    import torch
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    torch.manual_seed(0)
    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_channels=3,
        num_labels=2,
    )
    ViTForImageClassification(config).save_pretrained(out)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(out)


def main() -> None:
    rng = random.Random(0)
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    write_csv(data / "sentiment.csv", sentiment_rows(rng, 320))
    colors = data / "colors"
    write_images(colors / "train", rng, 40)
    write_images(colors / "validation", rng, 10)
    make_text_model(HERE / "tiny-bert")
    make_image_model(HERE / "tiny-vit")
    print(f"wrote {HERE / 'tiny-bert'}, {HERE / 'tiny-vit'}, {data / 'sentiment.csv'} and {colors}")


if __name__ == "__main__":
    main()

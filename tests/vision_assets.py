"""Tiny models and synthetic images with something to learn, for image regression, object detection and
vision-language models. Built offline, deterministically, into a folder the caller gives (the tests cache
them per session through `text_tasks_assets.built`):

- images of red squares on a 4x4 grid of 8x8-pixel cells (32x32 pixels): how many there are is the
  regression target (`count_rows`);
- images of one or two coloured squares on a grey ground, with their boxes and colours (`box_rows`), for
  detection; grey noise with one green square, anywhere or in a corner (`noise_square_rows`);
- images of one coloured square, with a question and its answer (`vqa_rows`): "what color is the square?" ->
  `red`, "where is the square?" -> `left` / `right`;
- `tiny_detr(folder)`: a DETR with a 2-stage ResNet backbone built from its config (no timm, no download)
  and its image processor; `tiny_yolos(folder)`: a 2-layer YOLOS; `tiny_rtdetr(folder)`: an RT-DETR on a
  3-stage ResNet, the tiny detector that learns where a square is (YOLOS and DETR this small, from
  scratch, learn its size but not its place in hundreds of steps);
- `tiny_paligemma(folder)`, `tiny_idefics3(folder)`: random vision-language models of 40-80 thousand
  parameters with word-level tokenizers (the `tokenizers` library) and processors from config. (Qwen2-VL's
  and SmolVLM's processors carry a video processor, which transformers 5 builds only with torchvision.)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

COLORS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 60, 220), "yellow": (230, 220, 30)}
GROUND = (128, 128, 128)


# --- images ----------------------------------------------------------------------------------------------


def _canvas(size: tuple[int, int]):
    from PIL import Image

    return Image.new("RGB", size, GROUND)


def count_rows(folder: Path, rng: random.Random, count: int, prefix: str = "") -> list[dict]:
    """`count` PNGs in `folder`, each with 0-6 red 6x6 squares in distinct cells of a 4x4 grid; the rows name
    each file (relative to `folder`) and its count."""
    from PIL import ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        image = _canvas((32, 32))
        draw = ImageDraw.Draw(image)
        squares = rng.randint(0, 6)
        for cell in rng.sample(range(16), squares):
            x, y = 8 * (cell % 4) + 1, 8 * (cell // 4) + 1
            draw.rectangle((x, y, x + 5, y + 5), fill=COLORS["red"])
        name = f"{prefix}{i:04d}.png"
        image.save(folder / name)
        rows.append({"file_name": name, "target": float(squares)})
    return rows


def box_rows(
    folder: Path, rng: random.Random, count: int, size: int = 64, most: int = 2, sides: tuple[float, float] = (0.2, 0.4)
) -> list[dict]:
    """`count` PNGs (size x size) with 1 to `most` (1 or 2) squares in `red` or `blue`, their sides `sides`
    of the image's (two: one in each half); each row has the file name and `objects` in COCO form
    ({bbox: [[x, y, width, height]], category: [name]})."""
    from PIL import ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        image = _canvas((size, size))
        draw = ImageDraw.Draw(image)
        boxes, categories = [], []
        squares = rng.randint(1, most)
        for half in rng.sample([0, 1], squares):
            side = rng.randint(round(size * sides[0]), round(size * sides[1]))
            left, right = (half * size // 2, (half + 1) * size // 2) if squares == 2 else (0, size)
            x, y = rng.randint(left, right - side), rng.randint(0, size - side)
            color = rng.choice(["red", "blue"])
            draw.rectangle((x, y, x + side - 1, y + side - 1), fill=COLORS[color])
            boxes.append([x, y, side, side])
            categories.append(color)
        name = f"{i:04d}.png"
        image.save(folder / name)
        rows.append({"file_name": name, "objects": {"bbox": boxes, "category": categories}})
    return rows


def noise_square_rows(
    folder: Path, rng: random.Random, count: int, size: tuple[int, int] = (64, 64), corners: bool = False
) -> list[dict]:
    """`count` PNGs (size = width, height) of grey noise with one green square (side 14-22 pixels), anywhere
    or (`corners`) 0-3 pixels from a random corner; rows as `box_rows` writes them (category `square`)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    noise = np.random.default_rng(rng.randrange(2**32))
    width, height = size
    rows = []
    for i in range(count):
        grey = noise.normal(128, 40, (height, width)).clip(0, 255).astype(np.uint8)
        pixels = np.repeat(grey[..., None], 3, axis=-1)
        side = rng.randint(14, 22)
        if corners:
            x = rng.choice([rng.randint(0, 3), width - side - rng.randint(0, 3)])
            y = rng.choice([rng.randint(0, 3), height - side - rng.randint(0, 3)])
        else:
            x, y = rng.randint(0, width - side), rng.randint(0, height - side)
        pixels[y : y + side, x : x + side] = COLORS["green"]
        name = f"{i:04d}.png"
        Image.fromarray(pixels).save(folder / name)
        rows.append({"file_name": name, "objects": {"bbox": [[x, y, side, side]], "category": ["square"]}})
    return rows


def vqa_rows(folder: Path, rng: random.Random, count: int, size: int = 32) -> list[dict]:
    """`count` PNGs with one coloured square on the left or right half; half the rows ask its colour, half
    where it is. Rows: file_name, question, answer (one word), caption (`a red square on the left`)."""
    from PIL import ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        image = _canvas((size, size))
        color, side = rng.choice(sorted(COLORS)), rng.choice(["left", "right"])
        x = rng.randint(1, size // 2 - 13) + (size // 2 if side == "right" else 0)
        y = rng.randint(1, size - 13)
        ImageDraw.Draw(image).rectangle((x, y, x + 11, y + 11), fill=COLORS[color])
        name = f"{i:04d}.png"
        image.save(folder / name)
        question, answer = ("what color is the square ?", color) if i % 2 else ("where is the square ?", side)
        caption = f"a {color} square on the {side}"
        rows.append({"file_name": name, "question": question, "answer": answer, "caption": caption})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# --- models ----------------------------------------------------------------------------------------------


def _labels(labels: tuple[str, ...]) -> dict:
    return {"id2label": dict(enumerate(labels)), "label2id": {name: i for i, name in enumerate(labels)}}


def tiny_detr(out: Path, labels: tuple[str, ...] = ("red", "blue"), size: int = 64, kind: str = "detr") -> Path:
    """DETR or Conditional DETR (`kind`: d_model 32, one encoder and one decoder layer, 4 queries) on a
    2-stage ConvNeXt built from its config (no timm, no download), and its image processor (PIL backend: no
    torchvision)."""
    import torch
    from transformers import (
        ConditionalDetrConfig,
        ConditionalDetrForObjectDetection,
        ConvNextConfig,
        DetrConfig,
        DetrForObjectDetection,
    )
    from transformers.models.conditional_detr.image_processing_pil_conditional_detr import (
        ConditionalDetrImageProcessorPil,
    )
    from transformers.models.detr.image_processing_pil_detr import DetrImageProcessorPil

    config_cls, model_cls, processor_cls = {
        "detr": (DetrConfig, DetrForObjectDetection, DetrImageProcessorPil),
        "conditional_detr": (
            ConditionalDetrConfig,
            ConditionalDetrForObjectDetection,
            ConditionalDetrImageProcessorPil,
        ),
    }[kind]
    backbone = ConvNextConfig(
        num_channels=3, patch_size=4, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], out_features=["stage2"]
    )
    config = config_cls(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=backbone,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_queries=4,
        **_labels(labels),
    )
    torch.manual_seed(0)
    model_cls(config).save_pretrained(out)
    processor_cls(size={"shortest_edge": size, "longest_edge": size}).save_pretrained(out)
    return out


def tiny_yolos(out: Path, labels: tuple[str, ...] = ("red", "blue"), size: int = 64, tokens: int = 1) -> Path:
    """YOLOS (a 2-layer ViT, hidden 64, 8x8 patches, `tokens` detection tokens) and its image processor.
    One detection token per object of the test images: with more, the set matching moves each box's target
    from token to token and a model this small needs several times the steps to settle."""
    import torch
    from transformers import YolosConfig, YolosForObjectDetection
    from transformers.models.yolos.image_processing_pil_yolos import YolosImageProcessorPil

    config = YolosConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        image_size=[size, size],
        patch_size=8,
        num_detection_tokens=tokens,
        **_labels(labels),
    )
    torch.manual_seed(0)
    YolosForObjectDetection(config).save_pretrained(out)
    # Pixels scaled to [-1, 1], as the tiny ViT's processor does: with ImageNet's mean and std this small a
    # model, trained from scratch, learns the boxes several times slower.
    square = {"shortest_edge": size, "longest_edge": size}
    YolosImageProcessorPil(size=square, image_mean=[0.5] * 3, image_std=[0.5] * 3).save_pretrained(out)
    return out


def tiny_rtdetr(out: Path, labels: tuple[str, ...] = ("square",), size: int = 64) -> Path:
    """RT-DETR (d_model 32, one encoder and one decoder layer, 4 queries, no denoising queries) on a 3-stage
    ResNet built from its config (feature maps at strides 16 and 32), and its image processor (PIL
    backend). Its queries start from the encoder's best grid cells and predict boxes relative to them, so
    even this small a model learns where a square is within a hundred steps."""
    import torch
    from transformers import RTDetrConfig, RTDetrForObjectDetection, RTDetrResNetConfig
    from transformers.models.rt_detr.image_processing_pil_rt_detr import RTDetrImageProcessorPil

    backbone = RTDetrResNetConfig(
        embedding_size=16,
        hidden_sizes=[16, 32, 64],
        depths=[1, 1, 1],
        layer_type="basic",
        out_features=["stage2", "stage3"],
    )
    config = RTDetrConfig(
        backbone_config=backbone,
        encoder_hidden_dim=32,
        encoder_in_channels=[32, 64],
        feat_strides=[16, 32],
        encode_proj_layers=[1],
        encoder_ffn_dim=64,
        encoder_attention_heads=2,
        d_model=32,
        decoder_in_channels=[32, 32],
        num_feature_levels=2,
        decoder_ffn_dim=64,
        decoder_layers=1,
        decoder_attention_heads=2,
        decoder_n_points=2,
        num_queries=4,
        num_denoising=0,
        **_labels(labels),
    )
    torch.manual_seed(0)
    RTDetrForObjectDetection(config).save_pretrained(out)
    RTDetrImageProcessorPil(size={"height": size, "width": size}).save_pretrained(out)
    return out


# --- vision-language models ------------------------------------------------------------------------------

VLM_WORDS = sorted(
    {"what", "color", "is", "the", "square", "?", "where", "left", "right", "caption", "en", "describe", "a", "on"}
    | {"user:", "assistant:"}
    | set(COLORS)
)


def _vlm_tokenizer(specials: list[str], template: str | None = None, **tokens):
    """A word-level fast tokenizer over VLM_WORDS (the `tokenizers` library; nothing downloaded): special
    tokens first, then the words; a pair of texts gets type ids 0 and 1 (PaliGemma's prompt and answer)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(specials + VLM_WORDS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=tokens["unk_token"]))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=512, chat_template=template, **tokens)


def tiny_paligemma(out: Path, side: int = 32) -> Path:
    """PaliGemma: a 1-layer SigLIP vision tower (8x8 patches: 16 image tokens) and a 2-layer Gemma (hidden
    32), its processor from config (SigLIP's image processor, the word-level tokenizer)."""
    import torch
    from transformers import (
        GemmaConfig,
        PaliGemmaConfig,
        PaliGemmaForConditionalGeneration,
        PaliGemmaProcessor,
        SiglipImageProcessor,
        SiglipVisionConfig,
    )

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<image>"]
    tokenizer = _vlm_tokenizer(specials, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>")
    images = SiglipImageProcessor(size={"height": side, "width": side}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    images.image_seq_length = (side // 8) ** 2  # PaliGemma's processor config carries it
    processor = PaliGemmaProcessor(image_processor=images, tokenizer=tokenizer)  # adds <loc..>/<seg..> tokens
    vision = SiglipVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=side, patch_size=8
    )
    text = GemmaConfig(
        vocab_size=len(processor.tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    config = PaliGemmaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=processor.image_token_id,
        projection_dim=32,
        hidden_size=32,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    PaliGemmaForConditionalGeneration(config).save_pretrained(out)
    processor.save_pretrained(out)
    return out


IDEFICS3_CHAT = (
    "<|begin_of_text|>{% for message in messages %}{{ message['role'] | capitalize }}:"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %} {{ part['text'] }}"
    "{% else %}<image>{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


def tiny_idefics3(out: Path, side: int = 32) -> Path:
    """Idefics3 (SmolVLM's architecture): a 1-layer SigLIP-style vision tower (8x8 patches, pixel-shuffled by
    2: 4 image tokens), a 2-layer Llama (hidden 32), the word-level tokenizer with Idefics3's chat layout, and
    Idefics3's image processor from config (no image splitting, the longer side at 32 pixels)."""
    import torch
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    specials = ["<pad>", "<|begin_of_text|>", "<end_of_utterance>", "<unk>", "<fake_token_around_image>"]
    specials += ["<image>", "<global-img>", "User:", "Assistant:"]
    tokenizer = _vlm_tokenizer(
        specials,
        IDEFICS3_CHAT,
        pad_token="<pad>",
        eos_token="<end_of_utterance>",
        bos_token="<|begin_of_text|>",
        unk_token="<unk>",
    )
    tokenizer.image_token = "<image>"  # read by the processor
    images = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": side},
        max_image_size={"longest_edge": side},
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    processor = Idefics3Processor(
        image_processor=images, tokenizer=tokenizer, image_seq_len=(side // 8) ** 2 // 4, chat_template=IDEFICS3_CHAT
    )
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in specials}
    config = Idefics3Config(
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": side,
            "patch_size": 8,
        },
        text_config={
            "model_type": "llama",
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "bos_token_id": ids["<|begin_of_text|>"],
            "eos_token_id": ids["<end_of_utterance>"],
            "pad_token_id": ids["<pad>"],
        },
        scale_factor=2,
        image_token_id=ids["<image>"],
        pad_token_id=ids["<pad>"],
    )
    torch.manual_seed(0)
    Idefics3ForConditionalGeneration(config).save_pretrained(out)
    processor.save_pretrained(out)
    return out

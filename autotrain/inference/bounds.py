"""Inputs cut to what the model uses, before they cost memory: the end (LLM prompts) or the start (texts a
classifier reads) of a long text, and images brought near the model's size as they are decoded.

A fast tokenizer holds several times a text's size while it encodes it, whatever `max_length` says, and
an image is decoded whole before any resize: one 8 MB row or one 12000x12000 PNG took `predict` past
2 GiB. Here a text is cut to a slice that still holds more tokens than the budget, and an image is
drafted (JPEG decodes at 1/2..1/8 scale), refused above `MAX_IMAGE_PIXELS`, and reduced after decoding.
"""

from __future__ import annotations

import warnings

from autotrain.errors import UserInputError

# Characters per token to start from: a slice of budget * this many characters is tried first, and made
# four times longer until it holds more tokens than the budget (or is the whole text).
_CHARS_PER_TOKEN = 16
# The largest image decoded (after a JPEG's draft scaling): 8192 x 8192 pixels, ~200 MB as RGB.
MAX_IMAGE_PIXELS = 8192 * 8192


def clip_text(tokenizer, text: str, budget: int, keep: str = "end") -> str:
    """A slice of `text` (its `end` or its `start`) that holds more than `budget` tokens, cut at a
    whitespace where there is one near the cut; the whole text when it is short."""
    if not isinstance(text, str):
        return text
    chars = budget * _CHARS_PER_TOKEN + 64
    while chars < len(text):
        part = _at_word(text[-chars:] if keep == "end" else text[:chars], keep)
        if len(tokenizer(part, add_special_tokens=False)["input_ids"]) > budget + 1:
            return part
        chars *= 4
    return text


def _at_word(part: str, keep: str) -> str:
    """Drop the word the cut went through: the tokens of the rest are those of the whole text."""
    half = len(part) // 2
    if keep == "end":
        space = next((i for i in range(min(half, 256)) if part[i].isspace()), None)
        return part[space:] if space is not None else part
    space = next((i for i in range(len(part) - 1, max(half, len(part) - 256), -1) if part[i].isspace()), None)
    return part[:space] if space is not None else part


def clip_messages(tokenizer, messages: list[dict], budget: int) -> list[dict]:
    """A conversation whose prompt keeps its last `budget` tokens: each message's text cut to its end."""
    return [
        {**m, "content": clip_text(tokenizer, m["content"], budget)} if isinstance(m.get("content"), str) else m
        for m in messages
    ]


def model_side(processor) -> int:
    """The longest side, in pixels, the image processor resizes or crops to (224 when it says none)."""
    sides = []
    for name in ("size", "crop_size"):
        value = getattr(processor, name, None)
        if isinstance(value, dict):
            sides += [v for v in value.values() if isinstance(v, int)]
        elif isinstance(value, int):
            sides.append(value)
    return max(sides, default=224)


def open_image(value, side: int):
    """An RGB PIL image from a path, {bytes, path} or a PIL image, decoded no larger than it needs to be:
    the shorter side stays at least twice `side`, so the processor's own resize does the rest."""
    import io

    from PIL import Image

    if not isinstance(value, (str, dict)):
        return _reduced(value, side).convert("RGB")
    if isinstance(value, dict):
        source = io.BytesIO(value["bytes"]) if value.get("bytes") else value.get("path")
        where = value.get("path") or "an image stored in the dataset"
    else:
        source = where = value
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the bound below is lower
            image = Image.open(source)
        with image:
            image.draft("RGB", (2 * side, 2 * side))  # JPEG: decode at a smaller scale; others: no-op
            if image.size[0] * image.size[1] > MAX_IMAGE_PIXELS:
                raise UserInputError(_too_large(where, "is {}x{} pixels".format(*image.size)))
            return _reduced(image, side).convert("RGB")
    except UserInputError:
        raise
    except Image.DecompressionBombError:
        raise UserInputError(_too_large(where, "has more pixels than PIL opens")) from None
    except Exception as exc:  # PIL raises many types for broken files
        raise UserInputError(f"cannot read image {where}: {exc}") from None


def _too_large(where: str, what: str) -> str:
    return f"image {where} {what}; images up to {MAX_IMAGE_PIXELS:,} pixels (8192x8192) are read: scale it down"


def _reduced(image, side: int):
    """`image` shrunk by a whole factor while its shorter side stays at least 2 * `side`."""
    factor = min(image.size) // (2 * side)
    if factor < 2:
        return image
    if image.mode not in ("L", "LA", "RGB", "RGBA"):  # palettes and others: reduce takes these modes
        image = image.convert("RGBA" if "A" in image.getbands() or "transparency" in image.info else "RGB")
    return image.reduce(factor)


# A chat's typed lines (LLM and VLM chats alike)
EXIT_COMMANDS = ("/exit", "/quit")


def checked_text(text: str, where: str) -> str:
    """`text` if it is valid Unicode; bytes that were not UTF-8 (decoded as lone surrogates) are bad input."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UserInputError(not_utf8(where)) from None
    return text


def not_utf8(where: str) -> str:
    return f"{where} is not valid UTF-8 text; send UTF-8"

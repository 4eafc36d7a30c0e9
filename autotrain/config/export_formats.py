"""What `autotrain export` can write, declared once and importable without pydantic or torch (the command
line's help reads it): formats, GGUF tensor types, the architectures a GGUF file can hold. The config's
`export:` section (`autotrain.config.export`), the app and the export package read these tables."""

from __future__ import annotations

FORMATS: dict[str, str] = {
    "merged": "a transformers folder (safetensors), LoRA adapters merged into the base model",
    "gguf": "one .gguf file for llama.cpp, LM Studio and Ollama (written in Python, nothing to build)",
    "ollama": "the .gguf file and a Modelfile beside it (`ollama create NAME -f Modelfile`)",
}

# Weight types the `gguf` package's own Python code can write. 1-D tensors (norms, biases) stay f32, as
# llama.cpp's converter keeps them; a matrix whose rows do not split into whole blocks falls back to f16.
GGUF_QUANTS: dict[str, str] = {
    "f32": "32-bit floats: exact, 4 bytes a weight",
    "f16": "16-bit floats: 2 bytes a weight (the default)",
    "bf16": "bfloat16: 2 bytes a weight, the range of f32",
    "q8_0": "8-bit blocks of 32: ~1.06 bytes a weight, close to f16",
    "q5_1": "5-bit blocks with offset: ~0.75 bytes a weight",
    "q5_0": "5-bit blocks: ~0.69 bytes a weight",
    "q4_1": "4-bit blocks with offset: ~0.63 bytes a weight",
    "q4_0": "4-bit blocks: ~0.56 bytes a weight",
}
# A merged folder is saved in one of the float types.
MERGED_DTYPES = ("f32", "f16", "bf16")
DEFAULT_QUANT = {"merged": "f32", "gguf": "f16", "ollama": "f16"}

# transformers `model_type` -> GGUF `general.architecture`, for the architectures transformers can read
# back from a GGUF file (the parity check does). llama.cpp writes Mistral as `llama`; readers tell it apart
# by "mistral" in `general.name`.
GGUF_ARCHITECTURES: dict[str, str] = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2"}


def quant_problem(fmt: str, quant: str | None) -> str | None:
    """Why `quant` does not go with `fmt` (or is unknown), else None."""
    if fmt not in FORMATS:
        return f"unknown format `{fmt}`; one of: {', '.join(FORMATS)}"
    if quant is None:
        return None
    allowed = MERGED_DTYPES if fmt == "merged" else tuple(GGUF_QUANTS)
    if quant not in allowed:
        return f"unknown {'dtype' if fmt == 'merged' else 'quant'} `{quant}` for {fmt}; one of: {', '.join(allowed)}"
    return None

"""Write a transformers causal LM and its tokenizer as one GGUF file, with the `gguf` package's own writer and
quantizers (pure Python: nothing to build). What llama.cpp's `convert_hf_to_gguf.py` does for the same
architectures, in the same names and layouts: tensor names from gguf's own table, Q and K of Llama-family
models permuted into llama.cpp's rotary layout, 1-D tensors kept f32, the vocabulary with its token types,
merges, special tokens and chat template."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autotrain.config.export_formats import GGUF_ARCHITECTURES
from autotrain.errors import UserInputError

# GGUF tensor type and file type (llama.cpp's LlamaFileType) of each quant name.
_TYPES = {
    "f32": ("F32", "ALL_F32"),
    "f16": ("F16", "MOSTLY_F16"),
    "bf16": ("BF16", "MOSTLY_BF16"),
    "q8_0": ("Q8_0", "MOSTLY_Q8_0"),
    "q5_1": ("Q5_1", "MOSTLY_Q5_1"),
    "q5_0": ("Q5_0", "MOSTLY_Q5_0"),
    "q4_1": ("Q4_1", "MOSTLY_Q4_1"),
    "q4_0": ("Q4_0", "MOSTLY_Q4_0"),
}
# The pre-tokenizer llama.cpp must split text with, named as llama.cpp names it (`tokenizer.ggml.pre`).
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SPLITS = {_LLAMA3_SPLIT: "llama-bpe", _QWEN2_SPLIT: "qwen2"}
SUPPORTED = ", ".join(sorted(GGUF_ARCHITECTURES))


@dataclass
class GgufSummary:
    """What was written: the figures the export report and the comparison with llama.cpp's files use."""

    architecture: str
    tensor_types: dict[str, str] = field(default_factory=dict)  # GGUF tensor name -> type written
    fallbacks: list[str] = field(default_factory=list)  # matrices written f16 because rows do not fill blocks
    tokenizer: str = ""  # gpt2 (byte-level BPE) or llama (sentencepiece-style BPE)
    pre_tokenizer: str = ""


def architecture_of(model_config) -> str:
    """The GGUF architecture for a transformers config, or a one-line refusal naming what is supported."""
    model_type = getattr(model_config, "model_type", None)
    if model_type not in GGUF_ARCHITECTURES:
        raise UserInputError(
            f"GGUF export does not support the `{model_type}` architecture; supported: {SUPPORTED} "
            "(`--format merged` writes any model)"
        )
    rope = getattr(model_config, "rope_parameters", None) or getattr(model_config, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if rope_type not in (None, "default"):
        raise UserInputError(
            f"GGUF export writes models with plain rotary embeddings; this one uses rope type `{rope_type}` "
            "(`--format merged` writes it)"
        )
    return GGUF_ARCHITECTURES[model_type]


def write_gguf(model, tokenizer, path: Path, quant: str, name: str) -> GgufSummary:
    """Write `model` (fp32, adapters merged) and `tokenizer` to `path` as GGUF with weights in `quant`."""
    import gguf

    arch = architecture_of(model.config)
    summary = GgufSummary(arch)
    writer = gguf.GGUFWriter(str(path), arch)
    try:
        _write_metadata(writer, model.config, quant, name)
        _write_tokenizer(writer, tokenizer, model.config.vocab_size, summary)
        _write_tensors(writer, model, arch, quant, summary)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    return summary


def _write_metadata(writer, config, quant: str, name: str) -> None:
    import gguf

    writer.add_type("model")
    writer.add_name(name)
    writer.add_vocab_size(config.vocab_size)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(_rope_theta(config)))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_file_type(int(getattr(gguf.LlamaFileType, _TYPES[quant][1])))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def _rope_theta(config) -> float:
    rope = getattr(config, "rope_parameters", None) or {}
    if isinstance(rope, dict) and "rope_theta" in rope:
        return rope["rope_theta"]
    return getattr(config, "rope_theta", 10000.0)


# --- tensors -----------------------------------------------------------------------------------------------


def _write_tensors(writer, model, arch: str, quant: str, summary: GgufSummary) -> None:
    import gguf

    config = model.config
    names = gguf.get_tensor_name_map(_model_arch(arch), config.num_hidden_layers)
    heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", None)
    tied = getattr(config, "tie_word_embeddings", False)
    for hf_name, tensor in model.state_dict().items():
        if hf_name.endswith("rotary_emb.inv_freq") or (tied and hf_name == "lm_head.weight"):
            continue
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise UserInputError(f"GGUF export: no GGUF name for the tensor `{hf_name}` of this {arch} model")
        data = tensor.detach().float().cpu().numpy()
        if arch == "llama" and gguf_name.endswith(("attn_q.weight", "attn_q.bias")):
            data = permute_for_llama_cpp(data, heads, heads)
        elif arch == "llama" and gguf_name.endswith(("attn_k.weight", "attn_k.bias")):
            data = permute_for_llama_cpp(data, heads, kv_heads)
        data, qtype = encode(data, quant, gguf_name, summary)
        writer.add_tensor(gguf_name, data, raw_dtype=qtype)
        summary.tensor_types[gguf_name] = qtype.name


def _model_arch(arch: str):
    import gguf

    return next(key for key, value in gguf.MODEL_ARCH_NAMES.items() if value == arch)


def permute_for_llama_cpp(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """transformers keeps each head's rotary halves apart ([x0..x63 | x64..x127]); llama.cpp interleaves them
    in pairs. The same reshaping as llama.cpp's converter, which transformers' GGUF loader undoes on read."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    shape = weights.shape
    return weights.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def encode(data: np.ndarray, quant: str, name: str, summary: GgufSummary):
    """(bytes or floats to write, GGUF type): 1-D tensors f32; matrices in `quant`, or f16 when a row does not
    split into whole blocks of the quant type."""
    import gguf

    qtype = gguf.GGMLQuantizationType[_TYPES[quant][0]]
    if data.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
        return data.astype(np.float32), gguf.GGMLQuantizationType.F32
    if qtype == gguf.GGMLQuantizationType.F16:
        return data.astype(np.float16), qtype
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if data.shape[-1] % block:
        summary.fallbacks.append(name)
        return data.astype(np.float16), gguf.GGMLQuantizationType.F16
    return gguf.quants.quantize(data, qtype), qtype


def round_trip(data: np.ndarray, quant: str) -> np.ndarray:
    """What a reader gets back for a matrix written in `quant`: the exact values the GGUF file holds."""
    import gguf

    encoded, qtype = encode(data, quant, "", GgufSummary(""))
    if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        return encoded.astype(np.float32)
    return gguf.quants.dequantize(encoded, qtype).reshape(data.shape)


# --- tokenizer ---------------------------------------------------------------------------------------------


def _write_tokenizer(writer, tokenizer, vocab_size: int, summary: GgufSummary) -> None:
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    model = spec["model"]
    if model.get("type") != "BPE":
        raise UserInputError(f"GGUF export writes BPE tokenizers; this run's tokenizer is {model.get('type')}")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    tokens, types = vocabulary(tokenizer, vocab_size)
    if model.get("byte_fallback"):  # sentencepiece-style BPE (Llama 2, Mistral): llama.cpp's `llama` vocab
        summary.tokenizer, summary.pre_tokenizer = "llama", "default"
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_scores(_merge_scores(tokens, merges))
    else:
        summary.tokenizer, summary.pre_tokenizer = "gpt2", pre_tokenizer_name(spec)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(summary.pre_tokenizer)
    writer.add_add_space_prefix(adds_space_prefix(spec))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    _write_special_tokens(writer, tokenizer)
    if tokenizer.chat_template:
        writer.add_chat_template(tokenizer.chat_template)


def pre_tokenizer_name(spec: dict) -> str:
    """llama.cpp's name for how a byte-level tokenizer splits text before merging, read from tokenizer.json."""
    pre = spec.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [part.get("type") for part in parts]
    if kinds == ["ByteLevel"] and parts[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and parts[0].get("individual_digits") and parts[1].get("use_regex", True):
        return "smollm"
    if kinds == ["Split", "ByteLevel"] and parts[0].get("pattern", {}).get("Regex") in _SPLITS:
        return _SPLITS[parts[0]["pattern"]["Regex"]]
    raise UserInputError(
        "GGUF export: this run's tokenizer splits text in a way llama.cpp has no name for "
        f"(pre-tokenizer {kinds}); known: GPT-2, SmolLM, Llama 3 and Qwen2 byte-level BPE"
    )


def adds_space_prefix(spec: dict) -> bool:
    """Whether the tokenizer puts a space before the text (ByteLevel's add_prefix_space, Metaspace's prepend)."""
    pre = spec.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    for part in parts:
        if part.get("type") == "ByteLevel" and part.get("add_prefix_space"):
            return True
        if part.get("type") == "Metaspace" and part.get("prepend_scheme", "always") != "never":
            return True
    normalizer = json.dumps(spec.get("normalizer") or {})
    return '"Prepend"' in normalizer


def vocabulary(tokenizer, vocab_size: int) -> tuple[list[str], list[int]]:
    """Every id up to the model's vocab_size: its token and llama.cpp's token type (as the converter does:
    special added tokens CONTROL, other added tokens USER_DEFINED, `<0xNN>` BYTE, ids with no token UNUSED)."""
    import gguf

    by_id = {index: token for token, index in tokenizer.get_vocab().items()}
    added = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for index in range(vocab_size):
        token = by_id.get(index)
        if token is None:
            tokens.append(f"[PAD{index}]")
            types.append(gguf.TokenType.UNUSED)
        elif re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", token):  # byte fallback, even when declared an added token
            tokens.append(token)
            types.append(gguf.TokenType.BYTE)
        elif index in added:
            tokens.append(token)
            types.append(gguf.TokenType.CONTROL if added[index].special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(token)
            types.append(gguf.TokenType.NORMAL)
    return tokens, [int(t) for t in types]


def _merge_scores(tokens: list[str], merges: list[str]) -> list[float]:
    """Sentencepiece vocabularies rank merges by token score: a merged token scores minus its merge's rank,
    so llama.cpp applies merges in the order the tokenizer learned them."""
    rank = {"".join(merge.split(" ")): -float(i) for i, merge in reversed(list(enumerate(merges)))}
    return [rank.get(token, 0.0) for token in tokens]


def _write_special_tokens(writer, tokenizer) -> None:
    for kind in ("bos", "eos", "unk", "pad"):
        token_id = getattr(tokenizer, f"{kind}_token_id", None)
        if token_id is not None:
            getattr(writer, f"add_{kind}_token_id")(int(token_id))
    ids = tokenizer("a")["input_ids"]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    writer.add_add_bos_token(bool(ids) and bos is not None and ids[0] == bos)
    writer.add_add_eos_token(bool(ids) and eos is not None and ids[-1] == eos and len(ids) > 1)


def tensor_listing(path: Path) -> dict[str, Any]:
    """Metadata keys and every tensor's name, GGUF shape and type, read from a GGUF file."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return {
        "keys": [key for key in reader.fields if not key.startswith("GGUF.")],
        "tensors": {t.name: {"shape": [int(n) for n in t.shape], "type": t.tensor_type.name} for t in reader.tensors},
    }

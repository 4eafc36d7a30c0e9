"""What a model's size and activations are, from its `config.json` alone: built on the meta device (no
weights are read or allocated) and run forward once there, so every architecture transformers knows is
counted as it really computes, not from a formula for one family.

The forward pass records the tensors autograd keeps for the backward pass (`saved_tensors_hooks`): their
bytes per token are what a batch costs on top of the weights. On the meta device `scaled_dot_product_attention`
would take its math path (attention probabilities: length^2 per head); the fused kernels that run on real
devices (flash / memory-efficient on CUDA, the flash kernel on the CPU) keep only q, k, v, the output and
one log-sum-exp per head and query, and that is what the trace records for them. Where the device's kernel
is not fused for a call (the CPU's flash kernel takes no grouped-query attention before torch 2.9 or so,
found by a probe), the trace keeps the math path's tensors, as the device will.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
from torch import nn

from autotrain.training.backward_trace import layer_backward_bytes
from autotrain.training.memory import ModelShape, Setup


class _FusedAttention(torch.autograd.Function):
    """Stands in for a fused attention kernel on the meta device: keeps what the kernel keeps for backward."""

    @staticmethod
    def forward(ctx, query, key, value):
        out = torch.empty_like(query)
        lse = query.new_empty(query.shape[:-1], dtype=torch.float32)
        ctx.save_for_backward(query, key, value, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):  # the kernel's gradients of q, k and v (autotrain.training.backward_trace runs it)
        query, key, value, _, _ = ctx.saved_tensors
        return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)


def _fused_sdpa(query, key, value, *args, **kwargs):
    return _FusedAttention.apply(query, key, value)


@lru_cache(maxsize=1)
def cpu_fuses_grouped_attention() -> bool:
    """Whether this torch's CPU `scaled_dot_product_attention` trains grouped-query attention (fewer key
    than query heads, `enable_gqa=True`) with its fused kernel, rather than the math path that keeps the
    length x length attention probabilities for backward (a tiny call, a few milliseconds)."""
    query = torch.zeros(1, 2, 8, 4, requires_grad=True)
    key = value = torch.zeros(1, 1, 8, 4, requires_grad=True)
    shapes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
        torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=True, enable_gqa=True)
    return not any(shape[-2:] == (8, 8) for shape in shapes)


def _sdpa_for(device: str):
    """The stand-in for `scaled_dot_product_attention` on `device`: the fused kernel's saved tensors, or
    the math path's (the real function on the meta device) where the device's kernel is not fused."""
    real = torch.nn.functional.scaled_dot_product_attention
    math_for_groups = device == "cpu" and not cpu_fuses_grouped_attention()

    def sdpa(query, key, value, *args, **kwargs):
        if math_for_groups and kwargs.get("enable_gqa") and key.shape[-3] != query.shape[-3]:
            return real(query, key, value, *args, **kwargs)
        return _FusedAttention.apply(query, key, value)

    return sdpa


@dataclass
class _Tally:
    """Saved-tensor bytes, by the decoder layer (or `None`: outside the layers) that saved them."""

    current: int | None = None

    def __post_init__(self):
        # Keyed by the storage's identity (views of a tensor share one), not by the storage object: holding
        # the storages would keep alive what a layer's backward releases (autotrain.training.backward_trace).
        # Saved tensors live until backward, so no two of them share an identity here.
        self.seen: dict[int, tuple[int | None, int]] = {}
        self.weights: set[int] = set()  # parameters saved for backward are weights, counted as such

    def pack(self, tensor):
        key = storage_key(tensor)
        if key not in self.weights:
            self.seen.setdefault(key, (self.current, tensor.untyped_storage().nbytes()))
        return tensor

    def by_layer(self) -> tuple[dict[int, int], int]:
        layers: dict[int, int] = {}
        rest = 0
        for where, nbytes in self.seen.values():
            if where is None:
                rest += nbytes
            else:
                layers[where] = layers.get(where, 0) + nbytes
        return layers, rest


def storage_key(tensor: torch.Tensor) -> int:
    """The identity of the storage `tensor` views, stable while the storage lives (a storage's Python wrapper
    may be a new object each time it is asked for; on the meta device every data pointer is 0)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(tensor.untyped_storage()).cdata


def _decoder_layers(model: nn.Module) -> nn.ModuleList | None:
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()), default=None)


def _lora_wrap(
    model: nn.Module, r: int, targets: str | list[str], dropout: float, dora: bool = False
) -> tuple[int, int]:
    """Freeze the model and add LoRA branches the way PEFT's `lora.Linear` computes them
    (base(x) + B(A(dropout(x))) * scale, or DoRA's forward); returns the adapter's parameter count (DoRA's
    magnitudes included) and, with DoRA, the bytes of the largest layer's weight-norm temporaries.

    `all-linear` means every Linear layer but the output layer, as in PEFT.
    """
    model.requires_grad_(False)
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    chosen = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or module is output:
            continue
        if targets == "all-linear" or name.rsplit(".", 1)[-1] in targets:
            chosen.append((name, module))
    count = scratch = 0
    for name, module in chosen:
        parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        setattr(parent, name.rsplit(".", 1)[-1], _LoraLinear(module, r, dropout, dora))
        count += r * (module.in_features + module.out_features) + (module.out_features if dora else 0)
        if dora:
            scratch = max(scratch, _dora_scratch(module.in_features, module.out_features))
    return count, scratch


def _dora_scratch(fan_in: int, fan_out: int) -> int:
    """Bytes at the peak of PEFT's DoRA weight norm for one layer, in its fp32 adapter dtype: an identity matrix of
    the input width (fan_in x fan_in, run through A and B) beside one fan_out x fan_in product. torch.profiler
    on one DoRA layer measured exactly this peak for 2048 x 2048, 4096 -> 1024 and 1024 -> 4096."""
    return 4 * (fan_in * fan_in + fan_in * fan_out)


class _LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int, dropout: float, dora: bool = False):
        super().__init__()
        self.base = base
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        kind = {"dtype": base.weight.dtype, "device": base.weight.device}  # the meta device: nothing allocated
        self.lora_a = nn.Linear(base.in_features, r, bias=False, **kind)
        self.lora_b = nn.Linear(r, base.out_features, bias=False, **kind)
        self.magnitude = nn.Parameter(torch.empty(base.out_features, **kind)) if dora else None

    @property
    def weight(self):  # models that read their Linear's weight (T5's dtype check) find the base's, as under PEFT
        return self.base.weight

    def forward(self, x):
        result = self.base(x)
        dropped = self.dropout(x)
        lora = self.lora_b(self.lora_a(dropped))
        if self.magnitude is None:
            return result + lora * 2.0
        # DoRA (PEFT's DoraLinearLayer.forward): magnitude / ||W + s B A|| (the norm detached) scales the base
        # output and the adapter's; with dropout the base output is computed again from the dropped input.
        with torch.no_grad():
            norm = (self.base.weight + 2.0 * (self.lora_b.weight @ self.lora_a.weight)).norm(dim=1)
        scale = (self.magnitude / norm).view(1, -1)
        base = result if isinstance(self.dropout, nn.Identity) else nn.functional.linear(dropped, self.base.weight)
        return result + (scale - 1) * base + scale * lora * 2.0


def _auto_class(task: str):
    import transformers

    from autotrain.config.tasks import TASKS

    return getattr(transformers, TASKS[task].auto_model)  # the task table names it


def _inputs(task: str, config, length: int, with_loss: bool) -> dict:
    from autotrain.config.tasks import TASKS

    if TASKS[task].auto_model in _TEXT_INPUTS:  # the other text tasks: the labels their heads take
        ids = torch.zeros((1, length), dtype=torch.long, device="meta")
        return {"input_ids": ids, **_TEXT_INPUTS[TASKS[task].auto_model](ids)}
    if TASKS[task].auto_model == "AutoModelForImageClassification":  # image-classification, image-regression
        return {"pixel_values": _pixels(config), "labels": None}
    if TASKS[task].auto_model == "AutoModelForObjectDetection":  # config.image_size: the square side it trains on
        return {"pixel_values": _pixels(config)}
    ids = torch.zeros((1, length), dtype=torch.long, device="meta")
    if task != "llm":
        return {"input_ids": ids, "labels": torch.zeros((1,), dtype=torch.long, device="meta")}
    return {"input_ids": ids, "labels": ids if with_loss else None}


def _pixels(config, side: int | None = None):
    """One image as the model's config sizes it (`side` pixels square when given)."""
    size = side or getattr(config, "image_size", 224)
    size = size if isinstance(size, int) else size[0]
    return torch.zeros((1, getattr(config, "num_channels", 3), size, size), device="meta")


def _position(ids):
    return torch.zeros((1,), dtype=torch.long, device="meta")


# Auto class -> the labels of one training sample `ids` long (the estimate counts what their loss keeps)
_TEXT_INPUTS = {
    "AutoModelForTokenClassification": lambda ids: {"labels": ids},
    "AutoModelForQuestionAnswering": lambda ids: {"start_positions": _position(ids), "end_positions": _position(ids)},
    "AutoModelForSeq2SeqLM": lambda ids: {"labels": ids},  # a target as long as the input: an upper bound
    "AutoModel": lambda ids: {},  # sentence embeddings: the loss is on pooled vectors, negligible beside
}


@lru_cache(maxsize=16)
def trace_model(
    config_json: str,
    task: str,
    length: int,
    dtype: str,
    attention: str,
    lora: tuple[int, str | tuple[str, ...], float] | tuple[int, str | tuple[str, ...], float, bool] | None,
    with_loss: bool = True,
    device: str = "cuda",
) -> ModelShape:
    """Count parameters and trace one training forward pass of one sample `length` tokens long, and the
    backward of its last decoder layer (autotrain.training.backward_trace).

    `config_json`: the model's config as a JSON string (hashable, for the cache); `dtype`: the dtype the
    activations are computed in ("float32", "bfloat16", "float16"); `lora`: (r, target modules, dropout[, DoRA]);
    `with_loss`: the model computes its own loss in the traced pass (False for an LLM: its decoder alone is
    traced, the loss step is counted by autotrain.training.loss_memory); `device`: where it trains ("cuda",
    "cpu"), for the attention kernel it has.
    """
    import json

    from transformers import AutoConfig

    from autotrain.config.tasks import TASKS

    if TASKS[task].auto_model == "AutoModelForImageTextToText":
        return _vision_language(config_json, length, dtype, attention, lora, with_loss, device)
    raw = json.loads(config_json)
    config = AutoConfig.for_model(**raw)
    if task != "llm":
        config.num_labels = max(2, getattr(config, "num_labels", 2))
    # eager as asked; else transformers' default, as a run loads the model: sdpa where the model has it
    # (flash_attention_2 keeps what sdpa's fused kernel keeps), eager where it has not
    kernel = {"attn_implementation": "eager"} if attention == "eager" else {}
    with torch.device("meta"):
        model = _auto_class(task).from_config(config, dtype=getattr(torch, dtype), **kernel)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    layers = _decoder_layers(model)
    linear = sum(m.weight.numel() for m in (layers or nn.ModuleList()).modules() if isinstance(m, nn.Linear))
    largest_layer = max((sum(p.numel() for p in layer.parameters()) for layer in layers or ()), default=0)
    largest_param = max(p.numel() for p in model.parameters())
    adapter = dora_scratch = 0
    if lora is not None:
        r, targets, dropout, *dora = lora
        targets = targets if targets == "all-linear" else list(targets)
        adapter, dora_scratch = _lora_wrap(model, r, targets, dropout, bool(dora and dora[0]))
    tally, backward = _trace(model, layers, task, config, length, with_loss, attention, device)
    per_layer, rest = tally.by_layer()
    tokens = 1 if task == "image-classification" or not _is_text(task) else length
    head_params, tied = _head(model)
    return ModelShape(
        params=params,
        linear_params=linear,
        lora_params=adapter,
        largest_param=largest_param,
        largest_layer_params=largest_layer,
        layers=len(layers) if layers is not None else 0,
        hidden=int(getattr(config, "hidden_size", 0) or 0),
        vocab=int(getattr(config, "vocab_size", 0) or 0) if task == "llm" else 0,
        layer_bytes_per_token=max(per_layer.values(), default=0) / tokens,
        rest_bytes_per_token=rest / tokens,
        activation_bytes=torch.finfo(getattr(torch, dtype)).bits // 8,
        dora_scratch=dora_scratch,
        layer_backward_bytes_per_token=None if backward is None else backward / tokens,
        head_params=head_params,
        tied=tied,
        stored_bytes=_stored_bytes(raw),
    )


def _trace(model, layers, task: str, config, length: int, with_loss: bool, attention: str, device: str):
    """(the saved tensors of one forward pass by layer, what the last layer's backward adds or None)."""
    tally = _Tally()
    tally.weights = {storage_key(t) for t in (*model.parameters(), *model.buffers())}
    _mark_layers(layers, tally)
    patch = torch.nn.functional, "scaled_dot_product_attention", _sdpa_for(device)
    inputs = _inputs(task, config, length, with_loss)
    # An LLM whose loss step the estimate counts (autotrain.training.loss_memory) runs its decoder alone: the
    # output head and what it keeps belong to that step.
    decoder = model.get_decoder() if task == "llm" and not with_loss and hasattr(model, "get_decoder") else None
    runs = decoder if isinstance(decoder, nn.Module) else model
    if runs is decoder:
        inputs = {"input_ids": inputs["input_ids"]}

    def forward():
        with torch.autograd.graph.saved_tensors_hooks(tally.pack, lambda t: t):
            runs(**inputs)

    with contextlib.ExitStack() as stack:
        if attention != "eager":
            stack.enter_context(_patched(*patch))
        if layers is None:
            forward()
            return tally, None
        return tally, layer_backward_bytes(model, layers, forward)


def _head(model) -> tuple[int, bool]:
    """(the output head's weight's elements, whether the input embedding is that same weight)."""
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = output.weight if isinstance(getattr(output, "weight", None), torch.Tensor) else None
    if head is None:
        return 0, False
    return head.numel(), embedding is not None and getattr(embedding, "weight", None) is head


def _stored_bytes(raw: dict) -> int:
    """Bytes per parameter of the checkpoint's tensors as its config.json says (`dtype` / `torch_dtype`; 0
    when it says nothing)."""
    name = raw.get("dtype") or raw.get("torch_dtype") or (raw.get("text_config") or {}).get("dtype")
    return {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}.get(str(name), 0)


def _is_text(task: str) -> bool:
    from autotrain.config.tasks import TASKS

    return TASKS[task].auto_model not in ("AutoModelForImageClassification", "AutoModelForObjectDetection")


def _vision_language(
    config_json: str, length: int, dtype: str, attention: str, lora, with_loss: bool, device: str
) -> ModelShape:
    """A vision-language model: its language model traced as an LLM on `length` tokens (the image's tokens
    are among them), plus its vision tower's activations for one image (spread over the tokens), and the
    parameters of the whole model (vision tower and projector included)."""
    import dataclasses
    import json

    from transformers import AutoConfig, AutoModel, AutoModelForImageTextToText

    config = AutoConfig.for_model(**json.loads(config_json))
    text = trace_model(config.text_config.to_json_string(), "llm", length, dtype, attention, lora, with_loss, device)
    with torch.device("meta"):
        whole = AutoModelForImageTextToText.from_config(config, dtype=getattr(torch, dtype))
        tower = AutoModel.from_config(config.vision_config, dtype=getattr(torch, dtype))
    tower.train()
    tally = _Tally()
    tally.weights = {storage_key(t) for t in (*tower.parameters(), *tower.buffers())}
    from autotrain.compat.transformers import bidirectional_mask_skipped

    # A tower whose patches all count (Idefics3's) asks its mask whether it can be skipped: a meta tensor
    # cannot say, and the answer is yes (every patch of the traced image is real).
    with bidirectional_mask_skipped(), torch.autograd.graph.saved_tensors_hooks(tally.pack, lambda t: t):
        tower(pixel_values=_pixels(config.vision_config))
    vision_bytes = sum(tally.by_layer()[0].values()) + tally.by_layer()[1]
    params = sum(p.numel() for p in whole.parameters())
    return dataclasses.replace(
        text,
        params=params,
        largest_param=max(text.largest_param, max(p.numel() for p in whole.parameters())),
        rest_bytes_per_token=text.rest_bytes_per_token + vision_bytes / length,
    )


def _mark_layers(layers: nn.ModuleList | None, tally: _Tally) -> None:
    for index, layer in enumerate(layers or ()):
        layer.register_forward_pre_hook(lambda module, args, i=index: setattr(tally, "current", i))
        layer.register_forward_hook(lambda module, args, out: setattr(tally, "current", None))


@contextlib.contextmanager
def _patched(owner, name: str, value):
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def shape_of(cfg, setup: Setup, token: str | None = None) -> ModelShape:
    """Read the base model's config.json (a local folder, a GGUF file's header, or the hub: that one
    file) and trace it on the meta device. Raises OSError / ValueError when the config cannot be read."""
    attention = getattr(cfg, "attn_implementation", "sdpa")
    config = _config_json(cfg, token)
    if hasattr(cfg.training_args, "image_square_size"):  # object detection: the square images it trains on
        raw, side = json.loads(config), cfg.training_args.image_square_size
        config = json.dumps({**raw, "image_size": [side, side] if isinstance(raw.get("image_size"), list) else side})
    own_loss = cfg.task != "llm"  # an LLM's loss step is counted by the estimate (autotrain.training.memory)
    args = (config, cfg.task, setup.length, setup.activation_dtype, attention, setup.lora, own_loss, setup.device)
    return trace_model(*args)


# Every text task's run but the generative ones (llm, vlm) trains at most as many tokens as base_model's
# position embeddings take, with a note (trainers/text_classification.py's `max_tokens`, which the text tasks
# share, and sentence-transformers' `sequence_length`); the estimate traces that length, not the one asked.
_UNCAPPED = ("llm", "vlm")


def capped_length_note(asked: int, used: int) -> str:
    """What a run says when it trains `used` tokens per sample where the config asked for `asked`."""
    return f"training_args.max_length {asked} is more than base_model takes; using {used}"


def position_cap(cfg, token: str | None = None) -> int | None:
    """The length a run of `cfg` trains at where its `max_length` is above base_model's positions, else None."""
    asked = getattr(cfg.training_args, "max_length", None)
    if asked is None or cfg.task in _UNCAPPED or not _is_text(cfg.task):
        return None
    from transformers import AutoConfig

    positions = getattr(AutoConfig.for_model(**json.loads(_config_json(cfg, token))), "max_position_embeddings", None)
    return positions if isinstance(positions, int) and 0 < positions < asked else None


def _config_json(cfg, token: str | None) -> str:
    from transformers import AutoConfig

    from autotrain.training.hub import offline

    kwargs: dict[str, Any] = {"revision": cfg.revision, "token": token, "trust_remote_code": cfg.trust_remote_code}
    source = cfg.base_model
    gguf = getattr(cfg, "gguf", None)
    if gguf is not None:
        source, kwargs["gguf_file"] = gguf
    try:  # the cache first: a dry run without network must not wait on the hub's retries
        return AutoConfig.from_pretrained(source, local_files_only=True, **kwargs).to_json_string()
    except (OSError, ValueError):
        if offline() or _unreachable(cfg):
            raise
    return AutoConfig.from_pretrained(source, **kwargs).to_json_string()


def _unreachable(cfg) -> bool:
    """True when base_model is a hub id and the hub does not answer a connection within two seconds (the
    hub client would retry for half a minute before giving up)."""
    import socket
    from urllib.parse import urlparse

    from autotrain.training.hub import found_unreachable, hub_id

    if hub_id(cfg.base_model) is None:
        return False
    if found_unreachable():  # the hub check said so already (a hub that takes connections and drops them)
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), 2).close()
    except OSError:
        return True
    return False

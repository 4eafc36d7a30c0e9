"""The causal-LM loss from the decoder's last hidden states and the output head, without the whole logits tensor.

`cross_entropy: chunked` (the default) computes a batch's loss a chunk of its labelled tokens at a time
(autotrain.training.chunked_loss sizes the chunks): the chunk's logits (hidden @ W^T in the compute dtype), their
softmax in fp32 (transformers' own loss upcasts the logits so), the loss, and at once the gradients with respect
to the chunk's hidden states and, when the head trains, its weight. The backward only scales what the forward
kept, so nothing is recomputed: one head matmul forward and two backward, as on the plain path, and only on the
labelled tokens. `liger` and `cut_cross_entropy` hand the same hidden states and head to Liger's fused linear
cross-entropy or Apple's Cut Cross-Entropy (CUDA kernels). `full` is the model's own forward and loss.

The hidden states come from the model's own forward (through DDP, PEFT and gradient checkpointing) asked for the
logits of the last position only (`logits_to_keep=1`), read by a forward hook on `get_decoder()`; the head is
`get_output_embeddings()`. A model whose logits are not that head applied to those states (soft-capping, a logit
scale, a head that is not a plain Linear) keeps the plain path: `head_problem` says why, before training.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch.autograd.function import once_differentiable

from autotrain.training.chunked_loss import chunk_tokens

IGNORE = -100
# Config fields of models whose forward post-processes the logits (TRL's fused LM head reads the same ones).
POST_PROCESSING = (
    "final_logit_softcapping",
    "logit_scale",
    "logits_scaling",
    "lm_head_multiplier",
    "output_multiplier",
)


def compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """The dtype matmuls run in here: autocast's, when it is on, else the tensor's own."""
    device = tensor.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else tensor.dtype


class ChunkedCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of `hidden @ weight.T + bias` against `targets` (every one a real label), and, without
    gradient, the summed entropy of the predictions and how many targets are the most likely token.

    With label smoothing `s` each token's loss is (1 - s) * nll + s * mean_v(-log p_v), as torch's
    `cross_entropy(label_smoothing=s)` and transformers' LabelSmoother compute it.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, smoothing: float, chunk: int):
        ctx.set_materialize_grads(False)
        dtype = compute_dtype(hidden)
        wants = ctx.needs_input_grad
        grads = _Gradients(hidden, weight, bias, wants[:3]) if any(wants[:3]) else None
        sums = _Sums(hidden.device)
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(dtype)
            b = bias.to(dtype) if bias is not None else None
            for start in range(0, hidden.shape[0], chunk):
                h = hidden[start : start + chunk].to(dtype)
                probs = _chunk(h, w, b, targets[start : start + chunk], smoothing, sums)
                if grads is not None:
                    grads.add(start, probs, h, w)
                del probs  # before the next chunk's logits exist: two chunks' buffers at most, never three
        ctx.grads, ctx.dtypes = grads, (weight.dtype, bias.dtype if bias is not None else None)
        ctx.mark_non_differentiable(sums.entropy, sums.correct)
        return sums.loss, sums.entropy, sums.correct

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss, _grad_entropy, _grad_correct):
        grads, ctx.grads = ctx.grads, None
        if grad_loss is None or grads is None:
            return None, None, None, None, None, None
        return (*grads.scaled(grad_loss, *ctx.dtypes), None, None, None)


class _Sums:
    def __init__(self, device: torch.device) -> None:
        self.loss = torch.zeros((), dtype=torch.float32, device=device)
        self.entropy = torch.zeros((), dtype=torch.float32, device=device)
        self.correct = torch.zeros((), dtype=torch.int64, device=device)


def _chunk(h, w, b, targets, smoothing: float, sums: _Sums) -> torch.Tensor:
    """One chunk's loss, entropy and top-1 hits into `sums`; returns the gradient of its summed loss with respect
    to its logits (fp32)."""
    logits = torch.mm(h, w.t())
    if b is not None:
        logits += b
    return _from_logits(logits, targets, smoothing, sums)


def _from_logits(logits, targets, smoothing: float, sums: _Sums) -> torch.Tensor:
    """`_chunk` from the chunk's logits. Two fp32 buffers of them at most: the logits (`logits` itself when it is
    fp32: it is overwritten), then their exponentials, which become the softmax and then the gradient in place."""
    logits = logits.float()
    logits -= logits.amax(-1, keepdim=True)  # the largest logit of each token is 0: exp cannot overflow
    target = logits.gather(1, targets[:, None]).squeeze(1)
    exps = torch.exp(logits)
    total = exps.sum(-1)
    log_total = total.log()  # log-sum-exp of the shifted logits
    loss = log_total - target
    if smoothing:
        loss = (1 - smoothing) * loss + smoothing * (log_total - logits.mean(-1))
    sums.loss += loss.sum()
    expected = torch.bmm(exps[:, None, :], logits[:, :, None]).view(-1) / total  # E[logit], without a V-sized temp
    sums.entropy += (log_total - expected).sum()
    sums.correct += (target == 0).sum()
    del logits
    exps /= total[:, None]  # the softmax
    exps[torch.arange(len(targets), device=exps.device), targets] -= 1 - smoothing
    if smoothing:
        exps -= smoothing / exps.shape[1]
    return exps


class _Gradients:
    """What the forward leaves for the backward: the gradients of the summed loss with respect to the hidden
    states (their dtype), the head's weight and bias (fp32 accumulators), each only where it is wanted."""

    def __init__(self, hidden, weight, bias, wants) -> None:
        self.hidden = torch.empty_like(hidden) if wants[0] else None
        self.weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if wants[1] else None
        self.bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if wants[2] else None

    def add(self, start: int, probs: torch.Tensor, h: torch.Tensor, w: torch.Tensor) -> None:
        grad = probs.to(h.dtype)  # the logits' gradient in the compute dtype (the same buffer in fp32)
        if self.hidden is not None:
            self.hidden[start : start + len(h)] = grad @ w
        if self.weight is not None:
            if grad.dtype != torch.float32 and grad.is_cuda:  # half inputs, fp32 sums: no rounding per chunk
                torch.addmm(self.weight, grad.t(), h, out_dtype=torch.float32, out=self.weight)
            else:
                self.weight.addmm_(probs.t(), h.float())
        if self.bias is not None:
            self.bias += probs.sum(0)

    def scaled(self, grad_loss: torch.Tensor, weight_dtype, bias_dtype) -> tuple:
        hidden = self.hidden.mul_(grad_loss) if self.hidden is not None else None
        weight = self.weight.mul_(grad_loss).to(weight_dtype) if self.weight is not None else None
        bias = self.bias.mul_(grad_loss).to(bias_dtype) if self.bias is not None else None
        return hidden, weight, bias


def summed_cross_entropy(hidden, weight, bias, targets, method: str, smoothing: float = 0.0):
    """(summed loss, summed entropy or None, top-1 hits or None) of the labelled tokens' `hidden` states."""
    if method == "chunked":
        return ChunkedCrossEntropy.apply(hidden, weight, bias, targets, smoothing, chunk_tokens(weight.shape[0]))
    dtype = compute_dtype(hidden)
    hidden, weight = hidden.to(dtype), weight.to(dtype)
    if method == "liger":
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        total = liger_fused_linear_cross_entropy(
            hidden, weight, targets, bias=bias, label_smoothing=smoothing, reduction="sum"
        )
        return total, None, None
    if method == "cut_cross_entropy":
        from cut_cross_entropy import linear_cross_entropy

        if bias is not None or smoothing:
            raise ValueError("cut_cross_entropy computes no output-head bias and no label smoothing")
        return linear_cross_entropy(hidden, weight, targets, reduction="sum"), None, None
    raise ValueError(f"Invalid cross_entropy: {method}")


@torch.no_grad()
def logit_stats(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(labelled tokens, summed entropy, top-1 hits) of a batch's full `logits` against its next-token `labels`,
    a chunk of labelled tokens at a time (the plain path's statistics, without a second logits-sized buffer)."""
    targets = torch.nn.functional.pad(labels, (0, 1), value=IGNORE)[..., 1:].to(logits.device)
    flat = logits.reshape(-1, logits.shape[-1])
    rows = (targets.reshape(-1) != IGNORE).nonzero().squeeze(1)
    sums, chunk = _Sums(logits.device), chunk_tokens(logits.shape[-1])
    for start in range(0, len(rows), chunk):
        picked = rows[start : start + chunk]
        _from_logits(flat.index_select(0, picked), targets.reshape(-1)[picked], 0.0, sums)
    return torch.as_tensor(len(rows), device=logits.device), sums.entropy, sums.correct


# --- from a model ---------------------------------------------------------------------------------------------


def language_model(model):
    """The causal LM inside `model`: PEFT's base model (`get_base_model()`), or `model` itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@dataclass
class LossParts:
    loss: torch.Tensor  # normalised as the model's own loss: by num_items_in_batch when given, else per token
    labelled: torch.Tensor  # the batch's labelled tokens
    entropy: torch.Tensor | None  # summed over them, without gradient (chunked only)
    correct: torch.Tensor | None  # how many of their labels are the most likely token (chunked only)


def causal_lm_loss(model, inner, inputs: dict, method: str, smoothing: float = 0.0, num_items_in_batch=None):
    """The next-token loss of `inputs` (with `labels`, or pre-shifted `shift_labels`) as LossParts.

    `model` is what the Trainer calls (wrapped by DDP or PEFT); `inner` the causal LM inside it (`language_model`
    of the unwrapped model), whose decoder and head are read.
    """
    model_inputs = {k: v for k, v in inputs.items() if k not in ("labels", "shift_labels")}
    hidden = last_hidden_state(model, inner, model_inputs)
    if "shift_labels" in inputs:
        targets = inputs["shift_labels"]
    else:
        targets = torch.nn.functional.pad(inputs["labels"], (0, 1), value=IGNORE)[..., 1:]
    targets = targets.to(hidden.device)
    mask = targets != IGNORE
    head = inner.get_output_embeddings()
    if type(head) is not torch.nn.Linear:  # an adapter on it, a custom head: its weight alone is not its output
        raise ValueError(f"cross_entropy: {method} needs a plain Linear output head, not a {type(head).__name__}")
    total, entropy, correct = summed_cross_entropy(
        hidden[mask], head.weight, head.bias, targets[mask], method, smoothing
    )
    labelled = mask.sum()
    if num_items_in_batch is None:
        return LossParts(total / labelled.clamp(min=1), labelled, entropy, correct)
    denominator = num_items_in_batch.to(total.device) if torch.is_tensor(num_items_in_batch) else num_items_in_batch
    return LossParts(total / denominator, labelled, entropy, correct)


def last_hidden_state(model, inner, inputs: dict) -> torch.Tensor:
    """The decoder's output for `inputs`, from a forward of `model` that projects only the last position."""
    captured = []
    hook = inner.get_decoder().register_forward_hook(lambda module, args, output: captured.append(output[0]))
    try:
        model(**inputs, use_cache=False, logits_to_keep=1)
    finally:
        hook.remove()
    return captured[0]


def head_problem(model) -> str | None:
    """Why the loss of `model` (a loaded causal LM) cannot be computed from its decoder's last hidden states and
    its output head as its own forward computes its logits; None when it can. Reads the config, the head's type
    and the forward's arguments, then compares the logits of one short forward with the head applied to the
    captured hidden states."""
    inner = language_model(model)
    config = inner.config.get_text_config()
    for name in POST_PROCESSING:
        value = getattr(config, name, None)
        if value is not None and (name == "final_logit_softcapping" or value != 1):
            return f"its config sets `{name}: {value}`: its forward post-processes the logits"
    try:
        head = inner.get_output_embeddings()
        inner.get_decoder()
    except (AttributeError, NotImplementedError, ValueError):
        return "it exposes no decoder or output head (`get_decoder()`, `get_output_embeddings()`)"
    if type(head) is not torch.nn.Linear:
        return f"its output head is a {type(head).__name__}, not a plain Linear"
    if "logits_to_keep" not in inspect.signature(inner.forward).parameters:
        return "its forward takes no `logits_to_keep`"
    return None if _same_logits(inner, head) else "its logits are not its output head applied to its last hidden state"


def adapts_head(model, target_modules) -> bool:
    """Whether LoRA's `target_modules` (a list of module names, matched as PEFT matches them: the whole name or its
    last parts; `all-linear` leaves the output layer out) name the output head of `model`."""
    if isinstance(target_modules, str):
        return False
    head = language_model(model).get_output_embeddings()
    names = [name for name, module in model.named_modules() if module is head]
    return any(name == key or name.endswith("." + key) for name in names for key in target_modules)


def _same_logits(inner, head) -> bool:
    device = head.weight.device
    ids = (torch.arange(1, 9, device=device) % head.out_features)[None]
    captured = []
    hook = inner.get_decoder().register_forward_hook(lambda module, args, output: captured.append(output[0]))
    was_training = inner.training
    inner.eval()
    try:
        with torch.no_grad():
            logits = inner(input_ids=ids, use_cache=False).logits.float()
            mine = head(captured[0]).float()
    except Exception:  # noqa: BLE001 - whatever fails here, the plain path is the safe answer
        return False
    finally:
        hook.remove()
        inner.train(was_training)
    if mine.shape != logits.shape:
        return False
    return bool(((mine - logits).abs().max() / logits.abs().max().clamp_min(1e-6)) < 1e-3)

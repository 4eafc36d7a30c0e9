"""What an LLM's loss step holds on top of the activations: the output head's logits (whole, or a tile at a
time), their softmax and gradients, for each way a trainer computes the loss. No torch: arithmetic only.

- `fused`: TRL's fused LM head (`trl.trainer.utils.add_fused_lm_head`, the SFT, DPO and GRPO trainers). It
  projects the hidden states through the head a tile of at most 4096 tokens x 32768 vocabulary entries at a
  time and keeps no logits. On the CPU each tile is folded by torch operations: the forward holds the tile
  (compute dtype) and, at its highest, its fp32 transform, the mask of entries before the target and two
  fp32 temporaries (the exponentials, and one product); the backward forms the tile again and holds five
  fp32 arrays of its size (scaled logits, logits, log-probabilities, probabilities, gradient), a boolean
  target mask and two fp32 temporaries, beside its fp32 accumulators of the gradients of the hidden states
  (tokens x hidden) and, when the head trains, of the head's weight (vocabulary x hidden). On CUDA a Triton
  kernel folds the tile in place: the tile and the accumulators.
- `full`: the model's own forward and loss (transformers' `ForCausalLMLoss`): the logits of every position in
  the compute dtype, an fp32 copy when that dtype is half, the log-softmax cross-entropy keeps (fp32), and
  while its gradient is formed the incoming gradient and the result (fp32, and its cast to the compute dtype).
- `chunked`: autotrain's chunked cross-entropy (`training_args.cross_entropy: chunked`), as its own module
  says (`autotrain.training.chunked_loss.extra_peak_bytes`).
- `model`: a loss inside the traced forward pass (classifiers' heads, a scorer's one value per sequence), counted there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE and trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE (TRL 1.16)
TRL_TOKEN_TILE = 4096
TRL_VOCAB_TILE = 32768
FP32 = 4
# bytes of a memory page: what a touched row of a strided CPU buffer makes resident at least
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# TRL's entropy of full logits (`entropy_from_logits`) goes 128 rows at a time: three fp32 arrays of a chunk
ENTROPY_ROWS = 128


@dataclass(frozen=True)
class LossStep:
    forward: int  # the most the loss's forward pass holds above the activations
    backward: int  # the most its backward pass holds, the head's gradient accumulators included
    kept: int = 0  # the hidden states it keeps for backward (an activation from its forward on)


@dataclass(frozen=True)
class Head:
    """The output head's sizes and dtypes for one micro-batch."""

    sequences: int
    length: int
    vocab: int
    hidden: int
    compute_bytes: int  # of the activations (4 fp32, 2 bf16 / fp16)
    weight_bytes: int  # of the head's weight
    trained: bool  # the head's weight gets a gradient (a full fine-tune)
    device: str


def loss_step(path: str, head: Head) -> LossStep:
    if path == "model" or head.vocab == 0:
        return LossStep(0, 0)
    if path == "fused":
        return _fused(head)
    if path == "chunked":
        return _chunked(head)
    return _full(head)


def _fused(head: Head) -> LossStep:
    tokens = head.sequences * max(1, head.length - 1)  # every position but the last (CPU: masked ones too)
    rows, columns = min(tokens, TRL_TOKEN_TILE), min(head.vocab, TRL_VOCAB_TILE)
    fp32, mask = rows * columns * FP32, rows * columns
    # The tile is a view of a buffer TRL_VOCAB_TILE wide: a GPU allocates all of it; on the CPU only the pages
    # a row of the view touches become resident (a narrower vocabulary leaves the rest of each row untouched).
    tile = rows * TRL_VOCAB_TILE * head.compute_bytes
    if head.device != "cuda":
        tile = rows * _pages(columns * head.compute_bytes) if columns < TRL_VOCAB_TILE else tile
    accumulators = tokens * head.hidden * FP32 + (head.vocab * head.hidden * FP32 if head.trained else 0)
    kept = tokens * head.hidden * head.compute_bytes  # the hidden states, flattened: a copy the head keeps
    if head.device == "cuda":  # Triton folds the tile in place
        casts = tokens * head.hidden * head.compute_bytes if head.compute_bytes != FP32 else 0
        if head.trained and head.weight_bytes != FP32:
            casts += head.vocab * head.hidden * head.weight_bytes
        return LossStep(tile, tile + accumulators + casts, kept)
    return LossStep(tile + 3 * fp32 + mask, tile + 7 * fp32 + mask + accumulators, kept)


def _pages(size: int) -> int:
    return -(-size // PAGE) * PAGE


def _full(head: Head) -> LossStep:
    cells = head.sequences * head.length * head.vocab
    half = head.compute_bytes if head.compute_bytes != FP32 else 0
    upcast = FP32 if half else 0
    entropy = 3 * ENTROPY_ROWS * head.vocab * FP32
    forward = cells * (head.compute_bytes + upcast + FP32) + entropy
    grads = head.vocab * head.hidden * FP32 if head.trained else 0
    kept = head.sequences * head.length * head.hidden * head.compute_bytes if head.trained else 0  # for its gradient
    return LossStep(forward, cells * (3 * FP32 + half) + grads, kept)


def _chunked(head: Head) -> LossStep:
    from autotrain.training.chunked_loss import extra_peak_bytes

    tokens = head.sequences * max(1, head.length - 1)
    extra = extra_peak_bytes(tokens, head.vocab, head.hidden, head.compute_bytes, head.trained)
    # "beyond the gradients it leaves": the head weight's gradient (the parameter's own) is added here
    left = head.vocab * head.hidden * head.weight_bytes if head.trained else 0
    return LossStep(extra, extra + left)

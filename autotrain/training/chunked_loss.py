"""How the chunked cross-entropy sizes its chunks, and the memory its loss step adds (no torch: the memory
estimate imports it).

`cross_entropy: chunked` (autotrain.training.lm_loss) computes a batch's loss a chunk of labelled tokens at a
time: the chunk's logits, their softmax, the loss and at once the gradients. A chunk holds a fixed number of
bytes of fp32 logits whatever the batch, so the loss step's extra memory depends on the vocabulary, not on
the sequence length or the batch size. The plain path (`full`) holds the logits of every token of the batch
and their gradient, in fp32 and in the compute dtype.
"""

from __future__ import annotations

CHUNK_BYTES = 32 * 2**20  # fp32 logits of one chunk (32 MiB: 170 tokens of a 49k vocabulary, 65 of a 128k one)
MIN_CHUNK_TOKENS = 8
FP32 = 4


def chunk_tokens(vocab_size: int) -> int:
    """Tokens per chunk: as many as keep one chunk's fp32 logits within CHUNK_BYTES, a multiple of 8 (whole
    tiles for the matrix units), at least MIN_CHUNK_TOKENS."""
    tokens = CHUNK_BYTES // (FP32 * max(1, vocab_size))
    return max(MIN_CHUNK_TOKENS, tokens // 8 * 8)


def extra_peak_bytes(tokens: int, vocab_size: int, hidden_size: int, dtype_bytes: int, head_trainable: bool) -> int:
    """The most memory the chunked loss step holds beyond the hidden states it is given and the gradients
    it leaves (of those hidden states and, when it trains, of the head's weight), for `tokens` labelled
    tokens computed in a dtype of `dtype_bytes` (4: fp32; 2: bf16 / fp16).

    Within a chunk: its logits in the compute dtype, then in fp32, their exponentials (fp32), and the
    gradient of the logits cast back to the compute dtype (2-byte dtypes only: in fp32 it is the
    exponentials' own buffer). For the whole step: the labelled tokens' hidden states gathered and the
    gradient with respect to them (as the hidden states' dtype, counted at `dtype_bytes`), and with a
    trainable head an fp32 accumulator of its weight's gradient, held from the forward to the backward.
    """
    chunk = min(max(tokens, 0), chunk_tokens(vocab_size))
    half = dtype_bytes if dtype_bytes != FP32 else 0
    per_chunk = chunk * vocab_size * (FP32 + FP32 + half)
    per_token = 2 * tokens * hidden_size * dtype_bytes
    head = vocab_size * hidden_size * FP32 if head_trainable else 0
    return per_chunk + per_token + head


def full_extra_peak_bytes(tokens: int, vocab_size: int, dtype_bytes: int) -> int:
    """The same for the plain path (`cross_entropy: full`): the logits of every token in the compute dtype (the
    model returns them, so they live through the step), and in fp32 the log-softmax, its gradient and the
    logits' gradient (transformers' loss upcasts the logits; the fp32 copy itself is freed once the log-softmax
    exists). Its head gradient is the parameter's own."""
    return tokens * vocab_size * (dtype_bytes + 3 * FP32)

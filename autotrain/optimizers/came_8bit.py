"""CAME with its first moment stored in 8 bits (block-wise, square-root companded int8 codes)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from autotrain.optimizers.came import CAME
from autotrain.optimizers.sharding import local, shards_of

_LEVELS = 127  # signed codes -127..127; -128 is never produced, so the map is symmetric
_MIN_ABSMAX = 1e-30  # keeps 1/absmax * 127**2 finite; blocks below it are numerically zero anyway
_SQRT_CHUNK = 1 << 18  # elements per fp64 copy in sqrt_


def sqrt_(x: Tensor) -> Tensor:
    """``x.sqrt_()``, correctly rounded.

    On the CPU, ATen's float sqrt goes through MKL's vector math, which is an ulp off for about 0.7% of
    inputs, while compiled code (came_fused) uses the exact instruction: a code whose sqrt lands near a
    half-integer would round differently. fp64 sqrt rounded to fp32 is the correctly rounded result, so
    the CPU takes that, a slice at a time.
    """
    if x.device.type != "cpu":
        return x.sqrt_()
    for part in x.view(-1).split(_SQRT_CHUNK):
        part.copy_(part.double().sqrt_())
    return x


def quantize_blockwise_(x: Tensor, codes: Tensor, absmax: Tensor, scratch: Tensor | None = None) -> None:
    """Encode fp32 ``x`` (n_blocks, block_size) into int8 ``codes`` and fp32 ``absmax`` (n_blocks,).

    code = sign(x) * round(127 * sqrt(|x| / absmax)). ``scratch`` (same shape as ``x``) avoids a
    full-size allocation; ``x`` itself is left untouched.
    """
    scratch = torch.abs(x, out=scratch) if scratch is not None else x.abs()
    torch.amax(scratch, dim=1, out=absmax)
    absmax.clamp_(min=_MIN_ABSMAX)
    # Truncation toward zero after +0.5 on the magnitude rounds half away from zero.
    sqrt_(scratch.mul_((_LEVELS**2 / absmax).unsqueeze(1))).add_(0.5).copysign_(x)
    codes.copy_(scratch)


def dequantize_blockwise(
    codes: Tensor, absmax: Tensor, out: Tensor | None = None, scratch: Tensor | None = None
) -> Tensor:
    """Decode int8 ``codes`` (n_blocks, block_size) to fp32: c * |c| * absmax / 127^2.

    ``out`` receives the result and ``scratch`` (fp32, same shape) is clobbered; both are
    allocated when not given.
    """
    # Same-dtype element-wise ops are several times faster than int8/fp32 mixed ones on CPU.
    scratch = scratch.copy_(codes) if scratch is not None else codes.float()
    scratch.mul_((absmax.sqrt() / _LEVELS).unsqueeze(1))  # c * sqrt(absmax) / 127
    out = torch.abs(scratch, out=out) if out is not None else scratch.abs()
    return out.mul_(scratch)


def row_aligned_block(cols: int, block_size: int) -> int:
    """The block size, at most ``block_size``, for a matrix of rows ``cols`` wide: a multiple of ``cols``
    when a row fits (each block holds whole rows), else the largest divisor of ``cols`` of at least half
    of ``block_size`` (each row is whole blocks), else ``block_size``. Either way a block costs at most
    twice its share of scales: at most 8 / block_size bytes per parameter."""
    if cols <= block_size:
        return cols * (block_size // cols)
    return next((size for size in range(block_size, block_size // 2 - 1, -1) if size and cols % size == 0), block_size)


def _unpadded(blocks: Tensor, shape: torch.Size) -> Tensor:
    return blocks.view(-1)[: shape.numel()].view(shape)


class CAME8Bit(CAME):
    r"""CAME (see :class:`~autotrain.optimizers.came.CAME` for the update rule) with an 8-bit ``m``.

    For params CAME factors (``ndim >= 2``) with at least ``min_8bit_size`` elements, the first
    moment ``m`` is stored as int8 codes in flat blocks of at most ``block_size`` elements over the
    flattened tensor (``state["exp_avg_codes"]``, shape ``(n_blocks, block)``, the tail
    zero-padded) with one fp32 scale per block (``state["exp_avg_absmax"]``). Each matrix gets the
    block (``row_aligned_block``) under which its rows are whole blocks, or its blocks whole rows,
    where one of at least half of ``block_size`` exists: the compiled step then finds a block's scale
    by a division or none at all, rather than by comparisons. The factored
    statistics, 1-D params and small tensors stay fp32, so with the defaults a large matrix costs
    about 1.006 bytes of state per parameter (fp32 CAME: ~4, fp32 AdamW: 8).

    Quantization map: square-root companding,
    ``code = sign(m) * round(127 * sqrt(|m| / absmax))`` and ``m = sign(code) (code/127)^2 absmax``.
    Like the signed dynamic map of bitsandbytes it is non-linear, spending its levels on small
    magnitudes: relative precision near ``1e-2 * absmax`` is ~8% against ~40% for linear absmax
    int8, and a value is only flushed to zero below ``~1.5e-5 * absmax`` (linear absmax: below
    ``absmax / 254``, which zeroes about half of the small entries of a block with one outlier).
    Unlike a table map it encodes and decodes with a few element-wise ops (no search, no gather),
    so dequantize -> update -> requantize stays vectorised over all blocks. Zero is code 0 and
    decodes to exactly 0; an all-zero block has a clamped positive scale (no 0/0); code 127
    decodes to ``absmax`` (to an ulp or two), so constant blocks round-trip.

    The eager step works on two full-size fp32 buffers per quantized param, one after the other:
    the dequantized ``m``, and one buffer that holds in turn ``G^2``, the change of ``m``, the
    instability, the step and the requantization scratch (plus fp32 copies of the grad and param when those
    are fp16/bf16; math is fp32 and the result is written back in the param dtype). The compiled
    step (``compile``, see :class:`CAME`) decodes, updates and re-encodes ``m`` inside its fused
    passes and allocates nothing full-size; on the CPU it writes the eager step's codes bit for bit
    (on CUDA, up to rounding). Codes and
    scales are plain tensors in ``optimizer.state`` and keep their dtypes through
    ``load_state_dict`` (also for bf16 params).
    With ``min_8bit_size`` larger than every param this is exactly :class:`CAME`.

    Under FSDP2 the blocks tile each rank's shard (counted as the largest shard, so every rank has
    the same number of blocks), the choice to quantize follows the param's global size, and each
    rank stores about ``1/world`` of the state; the codes and scales are evenly dim-0 sharded
    DTensors. Their blocks depend on the shard sizes, so resume with the same number of processes.

    Args:
        params, lr, eps, clip_threshold, betas, weight_decay, compile: as :class:`CAME`.
        block_size: elements per quantization block (one fp32 scale each).
        min_8bit_size: params with fewer elements keep an fp32 ``m``.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float,
        eps: tuple[float, float] = (1e-30, 1e-16),
        clip_threshold: float = 1.0,
        betas: tuple[float, float, float] = (0.9, 0.999, 0.9999),
        weight_decay: float = 0.0,
        block_size: int = 2048,
        min_8bit_size: int = 16384,
        compile: bool | None = None,
    ) -> None:
        if not block_size >= 1:
            raise ValueError(f"Invalid block_size value: {block_size}")
        if not min_8bit_size >= 0:
            raise ValueError(f"Invalid min_8bit_size value: {min_8bit_size}")
        self.block_size = block_size
        self.min_8bit_size = min_8bit_size
        super().__init__(params, lr, eps, clip_threshold, betas, weight_decay, compile)

    def __getstate__(self) -> dict[str, Any]:
        # Optimizer pickles only defaults/state/param_groups.
        return {**super().__getstate__(), "block_size": self.block_size, "min_8bit_size": self.min_8bit_size}

    def _init_exp_avg(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        # Global shape and size (p is a DTensor under FSDP2): every rank quantizes the same params.
        if p.ndim < 2 or p.numel() < self.min_8bit_size:
            super()._init_exp_avg(p, group, state)
            return
        # Blocks tile this rank's shard, counted as the largest shard so that every rank holds as
        # many blocks and the codes form one evenly dim-0 sharded (world * n_blocks, block_size) tensor.
        shards = shards_of(p)
        block = row_aligned_block(p.shape[-1], self.block_size)
        n_blocks = -(-shards.padded_local_numel // block)
        codes = torch.zeros((n_blocks, block), dtype=torch.int8, device=p.device)
        absmax = torch.full((n_blocks,), _MIN_ABSMAX, dtype=torch.float32, device=p.device)
        state["exp_avg_codes"] = shards.state(codes, (shards.world * n_blocks, block))
        state["exp_avg_absmax"] = shards.state(absmax, (shards.world * n_blocks,))

    def _step_param(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        if "exp_avg_codes" not in state:
            super()._step_param(p, grad, state, group)
            return
        codes, absmax, shape = local(state["exp_avg_codes"]), local(state["exp_avg_absmax"]), local(p).shape
        if self._compiles(p):
            # Decoded, updated and re-encoded inside the passes: no full-size fp32 copy of m.
            self._fused_update(p, grad, (codes, absmax), state, group)
            return
        grad = grad.float()
        scratch = torch.empty(codes.shape, dtype=torch.float32, device=codes.device)
        blocks = dequantize_blockwise(codes, absmax, scratch=scratch)
        self._update(p, grad, _unpadded(blocks, shape), state, group, out=_unpadded(scratch, shape))
        # The padded tail of the last block decodes to 0 and is never updated, so it stays 0.
        quantize_blockwise_(blocks, codes, absmax, scratch)

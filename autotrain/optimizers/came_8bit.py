"""CAME with its first moment stored in 8 bits (block-wise, square-root companded int8 codes)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from autotrain.optimizers.came import CAME
from autotrain.optimizers.came_math import MIN_ABSMAX
from autotrain.optimizers.common import check_arg
from autotrain.optimizers.sharding import local, shards_of


def row_aligned_block(cols: int, block_size: int) -> int:
    """The block size, at most ``block_size``, for rows ``cols`` wide: a multiple of ``cols`` where a row fits,
    else the largest divisor of ``cols`` of at least half of ``block_size``, else ``block_size`` (at most
    twice the scales of ``block_size``)."""
    if cols <= block_size:
        return cols * (block_size // cols)
    return next((size for size in range(block_size, block_size // 2 - 1, -1) if size and cols % size == 0), block_size)


class CAME8Bit(CAME):
    r"""CAME (see :class:`~autotrain.optimizers.came.CAME` for the update rule) with an 8-bit ``m``.

    For factored params (``ndim >= 2``) of at least ``min_8bit_size`` elements, the first moment is stored
    as int8 codes in flat blocks of at most ``block_size`` elements (``state["exp_avg_codes"]``,
    ``(n_blocks, block)``, the tail zero-padded) with one fp32 scale per block (``state["exp_avg_absmax"]``):
    about 1 byte of state per parameter of a large matrix. Each matrix gets the block under which its rows
    are whole blocks or its blocks whole rows (``row_aligned_block``), so the compiled step finds the scales
    in loops it makes anyway. Statistics, 1-D and small params stay fp32; with ``min_8bit_size`` above every
    param this is exactly :class:`CAME`.

    The map is square-root companding, ``code = sign(m) round(127 sqrt(|m| / absmax))``, decoded as
    ``sign(code) (code/127)^2 absmax``: non-linear like bitsandbytes' dynamic map (small values survive),
    but a few element-wise ops, with no table to search. A state another variant or other blocks wrote is
    refused with a message. Under FSDP2 the blocks tile each rank's shard (counted as the largest, so every
    rank holds as many), and the codes and scales are dim-0 sharded DTensors: resume with as many processes.

    Args:
        params, lr: as :class:`CAME`; its other arguments (``eps``, ``betas``, ``compile``, ...) by keyword.
        block_size: elements per quantization block (one fp32 scale each).
        min_8bit_size: params with fewer elements keep an fp32 ``m``.
    """

    _FLAGS = {**CAME._FLAGS, "block_size": 2048, "min_8bit_size": 16384}

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float | Tensor,
        *,
        block_size: int = 2048,
        min_8bit_size: int = 16384,
        **came: Any,
    ) -> None:
        check_arg(block_size >= 1, "block_size value", block_size)
        check_arg(min_8bit_size >= 0, "min_8bit_size value", min_8bit_size)
        self.block_size = block_size
        self.min_8bit_size = min_8bit_size
        super().__init__(params, lr, **came)

    def _quantized(self, p: Tensor) -> bool:
        # Global shape and size (p is a DTensor under FSDP2): every rank quantizes the same params.
        return p.ndim >= 2 and p.numel() >= max(self.min_8bit_size, 1)

    def _moment_keys(self, p: Tensor) -> tuple[str, ...]:
        return ("exp_avg_codes", "exp_avg_absmax") if self._quantized(p) else ("exp_avg",)

    def _blocks(self, p: Tensor) -> tuple[int, int]:
        """(blocks, block) of ``p``'s codes on this rank. They tile the shard, counted as the largest one,
        so every rank holds as many blocks and the codes form one evenly dim-0 sharded tensor."""
        block = row_aligned_block(p.shape[-1], self.block_size)
        return -(-shards_of(p).padded_local_numel // block), block

    def _init_exp_avg(self, p: Tensor, state: dict[str, Any]) -> None:
        if not self._quantized(p):
            super()._init_exp_avg(p, state)
            return
        shards, (n_blocks, block) = shards_of(p), self._blocks(p)
        codes = torch.zeros((n_blocks, block), dtype=torch.int8, device=p.device)
        absmax = torch.full((n_blocks,), MIN_ABSMAX, dtype=torch.float32, device=p.device)
        state["exp_avg_codes"] = shards.state(codes, (shards.world * n_blocks, block))
        state["exp_avg_absmax"] = shards.state(absmax, (shards.world * n_blocks,))

    def _check_saved(self, p: Tensor, saved: dict[str, Any]) -> None:
        super()._check_saved(p, saved)
        if "exp_avg_codes" in saved and tuple(local(saved["exp_avg_codes"]).shape) != self._blocks(p):
            raise ValueError(
                f"This CAME8Bit state holds a {tuple(p.shape)} parameter's first moment in blocks of "
                f"{local(saved['exp_avg_codes']).shape[-1]}, not {self._blocks(p)[1]}: resume with the "
                "block_size (and number of processes) that wrote it"
            )

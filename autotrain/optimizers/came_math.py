"""CAME's update rule, stated once, for a group of same-shaped parameters stacked along a leading dim.

Plain torch on stacked fp32 tensors: ``p`` and ``g`` are ``[G, L, R, C]`` (a matrix is ``L = 1``; a 3-D+
tensor is factored within each of its ``L`` leading slices) or ``[G, N]`` for 1-D params. The eager step runs
these functions as they are, the compiled step the same functions compiled by inductor. Hyper-parameters
arrive as one fp32 tensor ``hp``, so no value recompiles. A param whose gradient is not finite (or whose
square overflows fp32) is skipped in the same pass (its ``ok`` flag), with no host synchronisation.
``reduce`` (FSDP2 shards) sums partial results over the ranks between the phases. Why each pass is written
as it is (measured): docs/came.md.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.nn import functional

# 1 - beta and 1 - lr * weight_decay are computed in float64 (1 - fp32(0.9999) is 1.7e-4 off 1e-4).
HP = ("lr", "beta1", "1-beta1", "beta2", "1-beta2", "beta3", "1-beta3", "eps1", "eps2", "clip_threshold", "decay")
LR, BETA1, BETA1_C, BETA2, BETA2_C, BETA3, BETA3_C, EPS1, EPS2, CLIP, DECAY = range(len(HP))


def hyper_values(lr: float, betas: tuple, eps: tuple, clip_threshold: float, weight_decay: float) -> tuple:
    b1, b2, b3 = betas
    return (lr, b1, 1.0 - b1, b2, 1.0 - b2, b3, 1.0 - b3, *eps, clip_threshold, 1.0 - lr * weight_decay)


LEVELS = 127  # signed 8-bit codes -127..127; -128 is never produced, so the map is symmetric
MIN_ABSMAX = 1e-30  # a block's smallest scale: keeps 127^2 / absmax finite; zero blocks decode to 0
PARTIAL_SUMS = 1 << 17  # the most elements of a column sum's first stage (see _col_sum)
STORED_MOMENT = 1 << 20  # a chunk this small keeps its new first moment in a buffer (in cache), not recomputed

Reduce = Callable[[str, tuple[Tensor, ...]], tuple[Tensor, ...]] | None
Run = Callable[..., Any]  # calls a phase: run(fn, *args)


class Dims(NamedTuple):
    """Counts of the whole (unsharded) tensor: rows (dim -2), elements; its 8-bit blocks' size (0: none)."""

    rows: int
    numel: int
    block: int = 0


# --- 8-bit first moment: square-root companded codes in flat blocks ---------------------------------


def encode(m: Tensor, absmax: Tensor) -> Tensor:
    """int8 codes of ``m`` (..., blocks, block) under per-block scales ``absmax`` (..., blocks):
    sign(m) * round(127 * sqrt(|m| / absmax)), rounding half away from zero (|m| <= absmax: no clamp)."""
    return _encoded(m, absmax).to(torch.int8)


def _encoded(m: Tensor, absmax: Tensor) -> Tensor:
    """``encode``'s values in fp32, before the cast (which truncates towards zero)."""
    scaled = m.abs().mul_(_realized(LEVELS**2 / absmax).unsqueeze(-1)).sqrt_().add_(0.5)
    return scaled.copysign_(m)


def decode(codes: Tensor, absmax: Tensor) -> Tensor:
    """fp32 values of ``codes`` (..., blocks, block): sign(c) * (c / 127)^2 * absmax."""
    scaled = codes.float().mul_(_realized(absmax.sqrt() / LEVELS).unsqueeze(-1))
    return scaled.abs().mul_(scaled)


# --- the update rule -------------------------------------------------------------------------------


def _ema(stat: Tensor, value: Tensor, hp: Tensor, beta: int) -> Tensor:
    return stat * hp[beta] + value * hp[beta + 1]


def _per_param(x: Tensor, like: Tensor) -> Tensor:
    """A per-parameter value (G,) broadcast against ``like`` (G, ...)."""
    return x.view(-1, *([1] * (like.dim() - 1)))


def _keep(ok: Tensor, new: Tensor, old: Tensor) -> Tensor:
    return torch.where(_per_param(ok, new), new, old)


def _realized(x: Tensor) -> Tensor:
    """``x`` itself (a view, eagerly), but written to memory once in a compiled graph: inductor would inline
    a pointwise result (a row factor's division and square root) into every full-size loop that reads it;
    ``as_strided`` needs a buffer under it."""
    return x.as_strided(x.size(), x.stride())


def _col_sum(x: Tensor) -> Tensor:
    """``x`` (..., R, C) summed over its rows in two stages where R has a divisor ``k`` (the smallest of at
    least 16 that keeps the partial sums within ``PARTIAL_SUMS`` elements): a compiled step then reads the
    rows in order, where one stage swept each strip of columns down every row."""
    rows, cols = x.shape[-2:]
    least = max(16, -(-rows * cols // PARTIAL_SUMS))
    block = next((k for k in range(least, rows // 2 + 1) if rows % k == 0), rows)
    if block == rows:
        return x.sum(-2)
    return x.unflatten(-2, (rows // block, block)).sum(-2).sum(-2)


def _clip(update_sq: Tensor, hp: Tensor, numel: int) -> Tensor:
    return ((update_sq / numel).sqrt() / hp[CLIP]).clamp(min=1.0)


def eager(fn: Callable, *args: Any) -> Any:
    """``fn(*args)``: the eager step's ``run``."""
    return fn(*args)


def _whole(kind: str, tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    return tensors  # a whole tensor's sums span no other rank


def step(p: Tensor, g: Tensor, state: tuple[Tensor, ...], moment: tuple[Tensor, ...], hp: Tensor, dims: Dims) -> None:
    """One CAME step of a whole (unsharded) group: factored params with their first ``moment``, or 1-D params
    (no ``moment``: it is in ``state``). What the compiled step compiles as one graph."""
    if moment:
        factored_step(p, g, (*state, *moment), hp, dims)
    else:
        plain_step(p, g, state, hp, dims)


def factored_step(
    p: Tensor, g: Tensor, state: tuple[Tensor, ...], hp: Tensor, dims: Dims, reduce: Reduce = None, run: Run = eager
):
    """One CAME step of a group of factored params, in place. ``state`` is (row, col, res_row, res_col, rms,
    skipped, *moment): the statistics of ``G^2`` and of the instability, the weights' RMS (G,), the count of
    skipped tensors, and the first moment: ``(m,)``, or ``(codes, absmax)`` (int8 codes in blocks, or laid out
    like ``p``: ``rows_align``; the blocks' scales)."""
    m_new, ok = factored_update(p, g, state, hp, dims, reduce, run)
    run(write_moment, tuple(state[6:]), m_new, ok, dims)


def factored_update(
    p: Tensor, g: Tensor, state: tuple[Tensor, ...], hp: Tensor, dims: Dims, reduce: Reduce = None, run: Run = eager
):
    """``factored_step`` up to the first moment, which it returns (fp32) with which params took the step, for
    ``write_moment`` (a call of its own for 8-bit codes in blocks that cut rows: the new moment made once).
    ``run`` calls each phase: a whole tensor's compiled step traces them all into one graph; a shard's
    compiles each phase, with the all-reduces (``reduce``) between them."""
    row, col, res_row, res_col, rms, skipped, *moment = state
    reduce = reduce or _whole
    row_new, slices, totals = run(factored_stats, g, row, hp)
    slices, totals = reduce("slices", slices), reduce("totals", totals)
    col_new, rf, cf, update_sq = run(factored_factors, row_new, col, slices, hp, dims)
    (update_sq,) = reduce("update", (update_sq,))
    m_new, res_row_new, res_slices = run(factored_moment, g, tuple(moment), rf, cf, update_sq, res_row, hp, dims)
    res_slices = reduce("slices", res_slices)
    stats, new = (row, col, res_row, res_col), (row_new, col_new, res_row_new)
    weights, ok = run(factored_apply, p, stats, new, m_new, res_slices, totals, hp, dims)
    (weights,) = reduce("totals", (weights,))
    run(_record, rms, skipped, weights, ok, dims)
    return m_new, ok


def factored_stats(g: Tensor, row: Tensor, hp: Tensor) -> tuple[Tensor, tuple, tuple]:
    """Pass 1: the row EMA of ``G^2 + eps1``; the per-slice sums (columns of ``G^2`` and of ``G^2 / row``, the
    rows) and per-parameter totals (``G^2``) that the rest needs summed over the whole tensor."""
    sq = g * g
    row_new = _ema(row, sq.mean(-1) + hp[EPS1], hp, BETA2)
    col_sq = _col_sum(sq)
    weighted = _col_sum(sq.mul_(_realized(row_new.reciprocal()).unsqueeze(-1)))  # a product: no division each
    del sq
    return row_new, (col_sq, weighted, row_new.sum(-1)), (col_sq.sum((-2, -1)),)


def factored_factors(row_new: Tensor, col: Tensor, slices: tuple, hp: Tensor, dims: Dims) -> tuple:
    """The column EMA, the update's row and column factors r, c (``u = G * r * c``) and the per-parameter
    sum of ``u^2`` (for clipping), from the sums of pass 1."""
    col_sq, weighted, row_sum = slices
    col_new = _ema(col, col_sq / dims.rows + hp[EPS1], hp, BETA2)
    row_mean = row_sum / dims.rows
    rf = (row_new / row_mean.unsqueeze(-1)).rsqrt()
    update_sq = (row_mean * (weighted / col_new).sum(-1)).sum(-1)  # sum of G^2 * r^2 * c^2
    return col_new, rf, col_new.rsqrt(), update_sq


def factored_moment(g: Tensor, moment: tuple, rf: Tensor, cf: Tensor, update_sq: Tensor, res_row: Tensor, hp, dims):
    """Pass 2: the clipped update, the new first moment (from the stored one, decoded from 8 bits where it is),
    the instability's row EMA and its sums. A compiled step recomputes the new moment in each later loop that
    reads it, except in a chunk of at most ``STORED_MOMENT`` elements, where those loops load it from a buffer."""
    rf = _realized(rf / _per_param(_clip(update_sq, hp, dims.numel), rf))
    u = (g * rf.unsqueeze(-1)).mul_(_realized(cf).unsqueeze(-2))
    m_new = (moment_value(moment, g.shape, dims) * hp[BETA1]).add_(u * hp[BETA1_C])
    if g.numel() <= STORED_MOMENT or (len(moment) == 2 and moment[0].dim() == 3):  # (blocks that cut rows)
        m_new = _realized(m_new)
    res = u.sub_(m_new).square_()  # u is not needed again
    res_row_new = _ema(res_row, _row_sum(res, dims) / res.shape[-1] + hp[EPS2], hp, BETA3)
    return m_new, res_row_new, (_col_sum(res), res_row_new.sum(-1))


def factored_apply(p: Tensor, stats: tuple, new: tuple, m_new: Tensor, res_slices: tuple, totals: tuple, hp, dims):
    """Pass 3: the instability's column EMA and ``p <- p * (1 - lr*wd) - lr * m * R * C``, written where the
    gradient is finite (``ok``); returns ``ok`` and the squared new weights' sums (``state["RMS"]``)."""
    ok = totals[0].isfinite()
    (res_col_sum, res_row_sum), res_row_new = res_slices, new[2]
    res_col_new = _ema(stats[3], res_col_sum / dims.rows + hp[EPS2], hp, BETA3)
    rf = _realized((res_row_new / (res_row_sum / dims.rows).unsqueeze(-1)).rsqrt())
    step = (m_new * rf.unsqueeze(-1)).mul_(_realized(res_col_new.rsqrt()).unsqueeze(-2))
    p_new = _realized(_keep(ok, (p * hp[DECAY]).sub_(step.mul_(hp[LR])), p))
    for stat, value in zip(stats, (*new, res_col_new), strict=True):
        stat.copy_(_keep(ok, value, stat))
    p.copy_(p_new)
    return _weights_sq(p_new), ok


def _record(rms: Tensor, skipped: Tensor, weights: Tensor, ok: Tensor, dims: Dims) -> None:
    """The weights' RMS after the step (from the sum of their squares), and the count of skipped params."""
    rms.copy_((weights / dims.numel).sqrt())
    skipped.add_((~ok).sum())


def _weights_sq(p_new: Tensor) -> Tensor:
    rows = torch.linalg.vector_norm(p_new, 2, dim=-1).square()  # no full-size square
    return rows.reshape(rows.shape[0], -1).sum(-1)  # (not .sum(()), which would sum every dim)


def _row_sum(x: Tensor, dims: Dims) -> Tensor:
    """``x`` (..., C) summed over each row; first by 8-bit blocks where a row holds several whole ones, so
    that a compiled step finds these sums and the blocks' maxima (``write_moment``) in one loop."""
    segments = _segmented(x, dims.block)
    return x.sum(-1) if segments is x else segments.sum(-1).sum(-1)


def _segmented(x: Tensor, block: int) -> Tensor:
    """``x`` (..., C) as (..., C // block, block) where rows hold several whole blocks, else ``x``."""
    cols = x.shape[-1]
    if not block or cols <= block or cols % block:
        return x
    return x.unflatten(-1, (cols // block, block))


def rows_align(cols: int, block: int) -> bool:
    """Whether 8-bit blocks of ``block`` elements hold whole rows ``cols`` wide, or rows whole blocks. Such codes
    reach the step laid out like the weights, (G, L, R, C) (``row_codes``), so a compiled step finds the block
    maxima and writes the codes in loops over rows it makes anyway; others as their blocks, (G, blocks, block)."""
    return block % cols == 0 or cols % block == 0


def row_codes(codes: Tensor, shape: tuple[int, ...]) -> Tensor:
    """The codes (G, blocks, block) of params ``shape`` (G, L, R, C) laid out like them, less the padded tail."""
    return codes.view(codes.shape[0], -1)[:, : prod(shape[1:])].view(shape)


def _segment_scales(absmax: Tensor, segments: torch.Size, block: int) -> Tensor:
    """Each segment's block scale, (G, L, R, C // seg) from ``absmax`` (G, blocks)."""
    count, blocks = absmax.shape
    per_block = block // segments[-1]
    scales = absmax.unsqueeze(-1).expand(count, blocks, per_block).reshape(count, -1)
    return scales[:, : prod(segments[1:-1])].view(segments[:-1])


def moment_value(moment: tuple[Tensor, ...] | list[Tensor], shape: torch.Size, dims: Dims) -> Tensor:
    """The first moment in fp32 as ``shape`` (G, L, R, C)."""
    if len(moment) == 1:
        return moment[0]
    codes, absmax = moment
    if codes.dim() == 3:
        return decode(codes, absmax).reshape(len(codes), -1)[:, : shape[1:].numel()].reshape(shape)
    segments = _segmented(codes, dims.block)
    return decode(segments, _segment_scales(absmax, segments.shape, dims.block)).view(shape)


def write_moment(moment: tuple[Tensor, ...] | list[Tensor], m_new: Tensor, ok: Tensor, dims: Dims) -> None:
    """Store the new first moment ``m_new`` (G, L, R, C) where ``ok``: in place (fp32), or as the codes and
    scales of its blocks."""
    if len(moment) == 1:
        moment[0].copy_(_keep(ok, m_new, moment[0]))
        return
    codes, absmax = moment
    if codes.dim() == 3:
        flat = m_new.reshape(len(m_new), -1)
        if flat.shape[1] != codes[0].numel():  # zero-padded into whole blocks
            flat = functional.pad(flat, (0, codes[0].numel() - flat.shape[1]))
        blocks = flat.view(codes.shape)
        scale = torch.linalg.vector_norm(blocks, float("inf"), dim=-1).clamp_(min=MIN_ABSMAX)  # no full-size abs()
        new_codes = _encoded(blocks, scale)
    else:  # as their rows' segments (rows_align)
        count, n_blocks = absmax.shape
        segments = _segmented(m_new, dims.block)
        seg_max = torch.linalg.vector_norm(segments, float("inf"), dim=-1).reshape(count, -1)
        per_block = dims.block // segments.shape[-1]
        if seg_max.shape[1] != n_blocks * per_block:  # the padded tail of the last block
            seg_max = functional.pad(seg_max, (0, n_blocks * per_block - seg_max.shape[1]))
        scale = seg_max.view(count, n_blocks, per_block).amax(-1).clamp_(min=MIN_ABSMAX)
        # Encoded by segments, written as rows: in the loop that writes the weights, once compiled.
        new_codes = _encoded(segments, _segment_scales(scale, segments.shape, dims.block)).view(codes.shape)
    # Selected in fp32, then cast (exact): inductor's C++ select between int8 vectors ran 8x slower.
    codes.copy_(_keep(ok, new_codes, codes.float()).to(torch.int8))
    absmax.copy_(_keep(ok, scale, absmax))


def plain_step(
    p: Tensor, g: Tensor, state: tuple[Tensor, ...], hp: Tensor, dims: Dims, reduce: Reduce = None, run: Run = eager
):
    """One CAME step of a group of 1-D params (G, N): ``v`` an EMA of ``G^2 + eps1``, ``u = G / sqrt(v)``,
    clipped, and the step ``m`` itself. ``state`` is (v, m, rms, skipped); ``reduce``, ``run``: as above."""
    v, m, rms, skipped = state
    reduce = reduce or _whole
    v_new, u, totals = run(_plain_stats, g, v, hp)
    weights, ok = run(_plain_apply, p, (v, m), v_new, u, reduce("totals", totals), hp, dims)
    (weights,) = reduce("totals", (weights,))
    run(_record, rms, skipped, weights, ok, dims)


def _plain_stats(g: Tensor, v: Tensor, hp: Tensor) -> tuple[Tensor, Tensor, tuple]:
    sq = g * g
    v_new = _ema(v, sq + hp[EPS1], hp, BETA2)
    u = g * v_new.rsqrt()
    return v_new, u, (sq.sum(-1), (u * u).sum(-1))


def _plain_apply(p: Tensor, stats: tuple, v_new: Tensor, u: Tensor, totals: tuple, hp: Tensor, dims: Dims):
    v, m = stats
    ok = totals[0].isfinite()
    u = u / _per_param(_clip(totals[1], hp, dims.numel), u)
    m_new = m * hp[BETA1] + u * hp[BETA1_C]
    p_new = _realized(_keep(ok, p * hp[DECAY] - hp[LR] * m_new, p))
    for stat, new in ((v, v_new), (m, m_new)):
        stat.copy_(_keep(ok, new, stat))
    p.copy_(p_new)
    return _weights_sq(p_new), ok

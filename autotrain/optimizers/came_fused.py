"""CAME's step on one matrix as three fused passes, each a function that torch.compile turns into a
few loops per shape (C++ on CPU, Triton on CUDA), as torchao's low-bit optimizers do.

The eager step (``came.came_update_``) makes a dozen passes over a matrix and its state, through a
full-size buffer; the passes here read what they need and allocate nothing full-size:

1. ``second_moment_sums``: the row EMA of ``G^2``, its column sums (plain, and weighted by the new row
   statistics, for the update's RMS) and the squared weights;
2. ``first_moment``: ``u = G * r * c``, ``m <- m + (u - m) * (1 - beta1)``, the row EMA and the column
   sums of the instability ``(u - m)^2``. An fp32 ``m`` is written back; an 8-bit ``m`` is decoded on the
   fly, and only the largest ``|m|`` of each block (its new scale) comes out;
3. ``apply_step``: ``p <- p * (1 - lr*wd) - lr * m * R * C``. An 8-bit ``m`` is recomputed from the grad
   and the old codes (a few operations, where a full-size fp32 copy between the passes would cost a
   write, a read and a fresh allocation) and encoded with the new scales in the same loop.

Between the passes run the small per-row and per-column formulas and, for an FSDP2 shard, the
all-reduces: those of the eager step, in the same order, so that ranks may even mix the two paths.
The math is plain torch: without compiling, the same functions run eagerly (``eager``). On the CPU the
compiled passes and the eager step compute m, and so the 8-bit codes, bit for bit alike (see "Sums"
below), and the parameters within a few fp32 roundings.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from functools import lru_cache
from math import gcd, prod
from typing import Any

import torch
from torch import Tensor

from autotrain.optimizers.sharding import Shards

_LEVELS = 127  # as in came_8bit: signed codes -127..127
_MIN_ABSMAX = 1e-30
# Compiling costs seconds per shape; below this many elements the eager step is quick enough anyway.
AUTO_COMPILE_MIN_NUMEL = 1 << 20


# --- the math (plain functions; torch.compile fuses each one) -----------------------------------------


# --- sums ----------------------------------------------------------------------------------------------
# On the CPU, the sums that decide the first moment (and so the 8-bit codes) come out the same in the
# eager step and in the compiled passes, although each adds in its own order: fp32 sums in two orders
# differ in their last bits, which moves a code that sits on a rounding boundary, and such a flip
# carries forward. These are the sums of G^2 (over rows and columns), of the row statistics and of
# G^2 / row (the update's RMS, for clipping). Each is taken as a fixed tree of fp32 adds (the same
# operations in both paths) down to a sixteenth of the row or column, then in fp64, rounded to fp32
# once: an fp64 sum of fp32 terms is exact to far below fp32's resolution, so both orders round to the
# same value (short of a tie within ~1e-13 relative). Element-wise, both paths spell the same
# operations in the same order (no lerp, no add with alpha: eager CPU kernels fuse those into an FMA,
# inductor's C++ code does not). So the compiled step writes the eager step's codes bit for bit. The
# instability's sums set only the step's factors, not m: they stay plain fp32 sums, which spares the
# second pass the exact sums' cost, and leaves parameters within a few fp32 roundings of the eager ones.
# On CUDA all sums are plain fp32 (eager fp64 sums would copy the tensor), so there the two paths
# agree up to rounding.
_EAGER_SUM_CHUNK = 1 << 18  # elements per slice of the eager step's sums (its fp64 copies)


def _exact(x: Tensor) -> bool:
    return x.device.type == "cpu"


def _slices(x: Tensor, multiple: int = 1) -> tuple[Tensor, ...]:
    """Slices of rows (dim -2) of about _EAGER_SUM_CHUNK elements, each a multiple of ``multiple`` rows."""
    per_row = max(1, x.numel() // max(1, x.shape[-2]))
    rows = max(multiple, _EAGER_SUM_CHUNK // per_row // multiple * multiple)
    return x.split(rows, dim=-2)


def _halves(x: Tensor) -> Tensor:
    """``x`` (..., cols) folded onto its first cols / k columns by adding halves, k = gcd(cols, 16): a
    fixed tree of fp32 adds, the same in both paths."""
    for _ in range(gcd(x.shape[-1], 16).bit_length() - 1):
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x


def row_sums(x: Tensor, keepdim: bool = False) -> Tensor:
    """``x.sum(-1)``, on the CPU as a fixed fp32 tree down to a sixteenth of the row, then in fp64,
    rounded once (see above)."""
    if not _exact(x):
        return x.sum(-1, keepdim=keepdim)
    if torch.compiler.is_compiling() or x.numel() <= _EAGER_SUM_CHUNK or x.ndim < 2:
        return _halves(x).double().sum(-1, keepdim=keepdim).float()
    # A slice of rows at a time: the tree's temporaries and the fp64 copy stay small.
    parts = [_halves(part).double().sum(-1, keepdim=keepdim) for part in _slices(x)]
    return torch.cat(parts, dim=-1 - keepdim).float()


def _group_sums(x: Tensor, chunk: int) -> Tensor:
    """Sums of each ``chunk`` (a power of 2) consecutive rows of ``x`` (lead, rows, cols), as a pairwise
    tree of fp32 adds: (lead, rows // chunk, cols)."""
    groups = x.unflatten(-2, (x.shape[-2] // chunk, chunk))
    parts = [groups[:, :, i] for i in range(chunk)]
    while len(parts) > 1:
        parts = [a + b for a, b in zip(parts[::2], parts[1::2], strict=True)]
    return parts[0]


def col_sums(x: Tensor, chunk: int) -> Tensor:
    """``x.sum(-2)`` of ``x`` (lead, rows, cols), rows a multiple of ``chunk``; on the CPU, groups of
    ``chunk`` rows in fp32 (a fixed tree), then the groups in fp64, rounded once (see above).

    Inductor's C++ code for a plain column sum walks each strip of 16 columns down all the rows, a page
    per load; adding groups of ``chunk`` rows first streams them side by side (4x faster).
    """
    if not _exact(x):
        return x.sum(-2)
    if torch.compiler.is_compiling() or x.numel() <= _EAGER_SUM_CHUNK:
        return _group_sums(x, chunk).double().sum(-2).float()
    total = None
    for part in _slices(x, chunk):
        partial = _group_sums(part, chunk).double().sum(-2)
        total = partial if total is None else total.add_(partial)
    return total.float()


def _plain_col_sums(x: Tensor, chunk: int) -> Tensor:
    """``x.sum(-2)`` in fp32, ``chunk`` rows at a time first when compiled on the CPU (see col_sums)."""
    if chunk == 1 or not torch.compiler.is_compiling():
        return x.sum(-2)
    lead, rows, cols = x.shape
    return x.view(lead, rows // chunk, chunk, cols).sum(2).sum(1)


def ema_(stat: Tensor, total: Tensor, count: int, beta: float, eps: float) -> None:
    """``stat <- beta * stat + (1 - beta) * (total / count + eps)``, the same operations in both paths."""
    stat.mul_(beta).add_(total.div(count).add_(eps).mul_(1.0 - beta))


def second_moment_sums(
    grad: Tensor, param: Tensor, row: Tensor, *, beta2: float, eps1: float, chunk: int
) -> tuple[Tensor, ...]:
    """Pass 1: EMA of the row means of ``G^2`` into ``row``; sums of ``G^2`` over the rows, of ``row``,
    of ``G^2 / row`` over the rows, and of the squared weights.

    ``grad``, ``param``: (lead, rows, cols) local views; ``row``: (lead, rows).
    """
    g = grad.float()
    sq = g * g
    ema_(row, row_sums(sq), g.shape[-1], beta2, eps1)
    sums = (col_sums(sq, chunk), row_sums(row, keepdim=True), col_sums(sq / row.unsqueeze(-1), chunk))
    # Per row first, so that this reduction shares the loop over the rows with the one of G^2.
    weights = param.float()
    return (*sums, (weights * weights).sum(-1).sum())


def flat_view(blocks: Tensor, shape: torch.Size) -> Tensor:
    """The first prod(shape) elements of the (n_blocks, block_size) ``blocks``, shaped as ``shape``."""
    return blocks.reshape(-1)[: prod(shape)].view(shape)


# 8-bit blocks run through the flattened tensor, while the passes walk it row by row: a row of a
# (rows, cols) view meets a few blocks, in runs of columns [starts[r, s], starts[r, s + 1]) (see
# ``block_runs``). A per-block value reaches an element through its row's table of run values, by
# comparisons of the column index: element-wise code without gathers, for any shape and block size.
# When the row length is a multiple of the block size, every row starts on a block boundary and run s
# is simply columns [s * block, (s + 1) * block): ``starts`` is then the block size (an int), and a
# run's value is found by the column index divided by it, which costs less than the comparisons
# (about a third of the 8-bit step's extra time over fp32 on a 4096x4096 matrix, on the CPU).


def aligned_runs(cols: int, block: int) -> bool:
    return cols % block == 0


def _by_run(values: Tensor, starts: Tensor | int, shape: torch.Size) -> Tensor:
    """``values[r, s]`` (rows, runs) at every element of run s of row r, for a tensor of ``shape``."""
    if isinstance(starts, int):
        rows, runs = values.shape
        return values[:, :, None].expand(rows, runs, starts).reshape(shape)
    col = torch.arange(shape[-1], device=values.device, dtype=starts.dtype)
    out = values[:, -1:]
    for s in reversed(range(values.shape[1] - 1)):
        out = torch.where(col < starts[:, s + 1, None], values[:, s, None], out)
    return out.expand(values.shape[0], shape[-1]).reshape(shape)


def _run_amax(m: Tensor, starts: Tensor | int) -> Tensor:
    """The largest ``|m|`` over each run of each row: (rows, runs)."""
    magnitude = m.abs().flatten(0, -2)
    if isinstance(starts, int):
        return magnitude.view(magnitude.shape[0], m.shape[-1] // starts, starts).amax(-1)  # rows may be 0
    if starts.shape[1] == 2:  # one run: each row lies in one block (the block holds whole rows)
        return magnitude.amax(-1, keepdim=True)
    col = torch.arange(m.shape[-1], device=m.device, dtype=starts.dtype)
    runs = [(col >= starts[:, s, None]) & (col < starts[:, s + 1, None]) for s in range(starts.shape[1] - 1)]
    return torch.stack([torch.where(run, magnitude, 0.0).amax(-1) for run in runs], dim=1)


def _decoded(codes: Tensor, decode_scale: Tensor, starts: Tensor | int) -> Tensor:
    """fp32 ``m`` from codes shaped like the param and each run's sqrt(absmax) / 127, with the operations
    of came_8bit.dequantize_blockwise."""
    scaled = codes.float() * _by_run(decode_scale, starts, codes.shape)
    return scaled.abs() * scaled


def new_moment(grad: Tensor, rf: Tensor, cf: Tensor, old: Tensor, beta1: float) -> tuple[Tensor, Tensor]:
    """The update ``u = (G * r) * c``; returns ``d = (u - m) * (1 - beta1)`` and the new ``m = m + d``.

    The instability ``u - m_new`` is then ``d * beta1 / (1 - beta1)``.
    """
    step = (grad.float() * rf * cf - old) * (1.0 - beta1)
    return step, old + step


def instability(step: Tensor, beta1: float) -> Tensor:
    """``(u - m_new)^2`` from ``step`` = ``(u - m_old) * (1 - beta1)``."""
    residual = step * (beta1 / (1.0 - beta1))
    return residual * residual


def first_moment(
    grad: Tensor,
    rf: Tensor,
    cf: Tensor,
    moment: tuple[Tensor, ...],
    res_row: Tensor,
    *,
    beta1: float,
    beta3: float,
    eps2: float,
    chunk: int,
) -> tuple[Tensor, ...]:
    """Pass 2: the new first moment ``m``, the instability's row EMA (into ``res_row``) and its sums.

    ``moment`` is ``(exp_avg,)`` (fp32, updated in place), or ``(codes, scales, starts)``: the codes
    shaped like ``grad`` (``flat_view``), left as they are (pass 3 re-encodes), with their runs' decode
    scales sqrt(absmax) / 127. Returns the instability's sums over the rows, the sum of ``res_row``
    and, for codes, the largest ``|m|`` of each run, from which the new block scales come.
    """
    old = moment[0] if len(moment) == 1 else _decoded(*moment)
    step, m = new_moment(grad, rf, cf, old, beta1)
    residual = instability(step, beta1)
    # Plain fp32 sums: the instability sets only the step's factors, not m (see above).
    ema_(res_row, residual.sum(-1), grad.shape[-1], beta3, eps2)
    sums = (_plain_col_sums(residual, chunk), res_row.sum(-1, keepdim=True))
    if len(moment) == 1:
        moment[0].copy_(m)
        return sums
    return (*sums, _run_amax(m, moment[2]))


def apply_step(
    param: Tensor,
    grad: Tensor,
    factors: tuple[Tensor, Tensor, Tensor, Tensor],
    moment: tuple[Tensor, ...],
    keep: Tensor | None,
    neg_lr: Tensor,
    *,
    beta1: float,
) -> None:
    """Pass 3: ``p <- p * (1 - lr*wd) + ((m * R) * C) * -lr``.

    ``factors`` are (r, c, R, C); ``keep`` = 1 - lr*wd (None without weight decay, as the eager step
    skips it) and ``neg_lr`` = -lr are 0-d tensors, so that a schedule's new lr needs no recompilation.
    ``moment`` is ``(exp_avg,)`` (already updated), or ``(codes, decode scales, encode scales
    127^2 / new absmax, starts)`` per run: ``m`` is recomputed from the grad and the old codes, exactly
    as in pass 2, and encoded into the codes with the operations of came_8bit.quantize_blockwise_.
    """
    rf, cf, res_rf, res_cf = factors
    if len(moment) == 1:
        m = moment[0]
    else:
        codes, decode_scale, encode_scale, starts = moment
        m = new_moment(grad, rf, cf, _decoded(codes, decode_scale, starts), beta1)[1]
        scaled = (m.abs() * _by_run(encode_scale, starts, m.shape)).sqrt().add(0.5)
        # |m| <= absmax, so a code is at most 127.5 before truncation: no clamp (nor in the eager step).
        codes.copy_(scaled.copysign(m).to(torch.int8))
    target = param.float()
    if keep is not None:
        target = target * keep
    param.copy_(target + m * res_rf * res_cf * neg_lr)


@lru_cache(maxsize=256)
def block_runs(rows: int, cols: int, block_size: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Where the blocks of a flattened (rows, cols) tensor cut each row.

    Returns ``starts`` (rows, runs + 1): run s of row r is columns [starts[r, s], starts[r, s + 1]),
    possibly empty; and the block of each run (rows, runs). A row begins ``offset`` elements into a
    block, so its cuts are at multiples of ``block_size`` minus the offset.
    """
    first = torch.arange(rows, device=device, dtype=torch.int64) * cols
    offset = first % block_size
    runs = -(-(cols + block_size - gcd(cols, block_size)) // block_size)  # the most any row needs
    cuts = torch.arange(runs + 1, device=device, dtype=torch.int64) * block_size
    starts = (cuts - offset.unsqueeze(1)).clamp_(0, cols)
    # int32 column indices: half the vector width of int64 in the comparisons, and cols < 2**31.
    return starts.to(torch.int32), (first // block_size).unsqueeze(1) + torch.arange(runs, device=device)


# --- the small math between the passes (per row / column), and the all-reduces ------------------------


def factors(
    row: Tensor, col: Tensor, sums: list[Tensor], beta: float, eps: float, shards: Shards
) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
    """Column EMA from the column sums, and the factors r, c of rsqrt(row/mean(row)) x rsqrt(col).

    ``sums`` are (column sums, sum of ``row``, more...), all already summed over the shards; returns
    r (lead, rows, 1), c (lead, 1, cols), mean(row) and the rest of ``sums``.
    """
    rows = shards.shape[-2]
    ema_(col, sums[0], rows, beta, eps)
    row_mean = sums[1].div(rows)
    return row.div(row_mean).rsqrt_().unsqueeze(-1), col.rsqrt().unsqueeze(-2), row_mean, sums[2:]


def update_factors(
    sums: tuple[Tensor, ...], row: Tensor, col: Tensor, shards: Shards, group: dict[str, Any]
) -> tuple[Tensor, Tensor, Tensor]:
    """r and c of the update, r divided by the clipping scale, and the sum of squared weights.

    The all-reduces are the eager step's: the column sums with everything when dim 0 of a matrix is
    split, else only the scalars.
    """
    numel = prod(shards.shape)
    sums = list(sums)
    if shards.splits_columns:
        sums = shards.all_sum(*sums)
    rf, cf, row_mean, (weighted, param_sq) = factors(row, col, sums, group["betas"][1], group["eps"][0], shards)
    update_sq = (row_mean * weighted.div(col).sum(dim=-1, keepdim=True)).sum()
    if not shards.splits_columns:
        update_sq, param_sq = shards.all_sum(update_sq, param_sq)
    rf.div_((update_sq.div(numel).sqrt() / group["clip_threshold"]).clamp(min=1.0))
    return rf, cf, param_sq


def step_scalars(lr: float, weight_decay: float, device: torch.device) -> tuple[Tensor | None, Tensor]:
    """``1 - lr*wd`` (None without weight decay) and ``-lr`` as fp32 0-d tensors.

    Filled on the device: no host-to-device copy, no synchronisation.
    """
    keep = torch.full((), 1.0 - lr * weight_decay, dtype=torch.float32, device=device) if weight_decay else None
    return keep, torch.full((), -lr, dtype=torch.float32, device=device)


# --- compiling, once per shape, with an eager fallback ----------------------------------------------


class StepCompiler:
    """torch.compile of the pass functions, shared by every optimizer of the process.

    Each function is compiled once per input shape and dtype (``dynamic=False``: kernels specialised
    to the shape); a first call per shape is the compilation, and its time is added to ``seconds``. If
    compiling fails (no C++ compiler, no Triton, an unsupported platform), one line on stderr says so
    and every later step runs eagerly.
    """

    def __init__(self) -> None:
        self._compiled: dict[Callable, Callable] = {}
        self._seen: set[tuple] = set()
        self.failure: str | None = None
        self.seconds = 0.0

    def __call__(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        if self.failure is not None or torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        key = (fn, *(_signature(a) for a in args), *sorted(kwargs.items()))
        first = key not in self._seen
        start = time.perf_counter()
        try:
            with _no_recompile_limit():
                out = self._compiled_fn(fn)(*args, **kwargs)
        except Exception as exc:  # compiling failed: the eager step does the same
            if not first:
                raise
            self._fail(exc)
            return fn(*args, **kwargs)
        if first:
            self._seen.add(key)
            self.seconds += time.perf_counter() - start
        return out

    def _compiled_fn(self, fn: Callable) -> Callable:
        if fn not in self._compiled:
            self._compiled[fn] = torch.compile(fn, dynamic=False, fullgraph=True, options=_RECOMPUTE)
        return self._compiled[fn]

    def _fail(self, exc: Exception) -> None:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        self.failure = f"{type(exc).__name__}: {reason}"[:300]
        print(
            f"autotrain: CAME's compiled step is unavailable ({self.failure}); using the eager step "
            "(same results, slower)",
            file=sys.stderr,
        )

    @property
    def shapes(self) -> int:
        """How many (function, shapes) were compiled so far."""
        return len(self._seen)


def _signature(value: Any) -> Any:
    if isinstance(value, Tensor):
        return (tuple(value.shape), value.dtype, value.device.type)
    if isinstance(value, tuple):
        return tuple(_signature(v) for v in value)
    return value


def _no_recompile_limit() -> Any:
    # Dynamo recompiles a function for at most 8 shapes by default; a model has more distinct matrices.
    disable = getattr(getattr(torch._dynamo, "utils", None), "disable_cache_limit", None)
    return disable() if disable is not None else nullcontext()


# Recompute the update and m (a few element-wise ops on what is read anyway) in each kernel that needs
# them, rather than storing them in a full-size fp32 buffer between kernels.
_RECOMPUTE = {"realize_reads_threshold": 64, "realize_opcount_threshold": 4096, "realize_acc_reads_threshold": 64}
COMPILER = StepCompiler()


def eager(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


# --- one step --------------------------------------------------------------------------------------


def row_chunk(rows: int, device: torch.device) -> int:
    return gcd(rows, 16) if device.type == "cpu" else 1


def fused_came_update_(
    param: Tensor,
    grad: Tensor,
    stats: dict[str, Tensor],
    moment: tuple[Tensor, ...],
    group: dict[str, Any],
    shards: Shards,
    run: Callable | None = None,
) -> Tensor:
    """One CAME step of a factored param (``ndim >= 2``) in three passes; returns the weights' RMS before.

    Same contract as ``came.came_update_`` (local shards, sums over ``shards``), with the first moment as
    ``(exp_avg,)`` or 8-bit ``(codes, absmax)``, and ``grad`` in any float dtype. ``run(fn, *args)``
    runs each pass: by default the shared ``COMPILER``; ``eager`` runs the same functions uncompiled.
    """
    shape = param.shape
    lead = (prod(shape[:-2]), shape[-2], shape[-1])  # factored within each slice of the leading dims
    run = COMPILER if run is None else run
    if param.numel() == 0:
        run = eager  # nothing to compile on a rank that holds no rows; the all-reduces still happen
    p3, g3 = param.view(lead), grad.view(lead)
    row, col = stats["exp_avg_sq_row"].view(lead[:2]), stats["exp_avg_sq_col"].view(lead[0], lead[2])
    res_row, res_col = stats["exp_avg_res_row"].view(lead[:2]), stats["exp_avg_res_col"].view(lead[0], lead[2])
    beta1, beta2, beta3 = group["betas"]
    chunk = row_chunk(lead[1], param.device)
    sums = run(second_moment_sums, g3, p3, row, beta2=beta2, eps1=group["eps"][0], chunk=chunk)
    rf, cf, param_sq = update_factors(sums, row, col, shards, group)
    kw = dict(beta1=beta1, beta3=beta3, eps2=group["eps"][1], chunk=chunk)
    if len(moment) == 1:
        exp_avg = moment[0].view(lead)
        res_sums = run(first_moment, g3, rf, cf, (exp_avg,), res_row, **kw)
        last: tuple[Tensor, ...] = (exp_avg,)
    else:
        codes, absmax, block = flat_view(moment[0], lead), moment[1], moment[0].shape[-1]
        rows = lead[0] * lead[1]
        if aligned_runs(lead[2], block):
            # Each row is whole blocks, in order: run s of row r is block r * runs + s, and it is found by
            # division, not by comparisons. Blocks past the rows (padding to the largest shard) stay zero.
            starts, used = block, absmax[: rows * (lead[2] // block)]
            decode = (used.sqrt() / _LEVELS).view(rows, lead[2] // block)
        else:
            starts, blocks = block_runs(rows, lead[2], block, param.device)
            blocks = blocks.clamp(max=absmax.numel() - 1)  # a last row's empty runs may point past the end
            decode = (absmax.sqrt() / _LEVELS)[blocks]  # per-block factors once per block, not per element
        *res_sums, run_max = run(first_moment, g3, rf, cf, (codes, decode, starts), res_row, **kw)
        if isinstance(starts, int):
            encode = (_LEVELS**2 / used.copy_(run_max.view(-1)).clamp_(min=_MIN_ABSMAX)).view(decode.shape)
        else:
            # A block's scale is the largest |m| of its runs (the zero tail and padding blocks: the minimum).
            absmax.zero_().scatter_reduce_(0, blocks.flatten(), run_max.flatten(), "amax").clamp_(min=_MIN_ABSMAX)
            encode = (_LEVELS**2 / absmax)[blocks]
        last = (codes, decode, encode, starts)
    res_sums = shards.all_sum(*res_sums) if shards.splits_columns else list(res_sums)
    res_rf, res_cf, _, _ = factors(res_row, res_col, res_sums, beta3, group["eps"][1], shards)
    keep, neg_lr = step_scalars(group["lr"], group["weight_decay"], param.device)
    run(apply_step, p3, g3, (rf, cf, res_rf, res_cf), last, keep, neg_lr, beta1=beta1)
    return param_sq.div(prod(shards.shape)).sqrt()

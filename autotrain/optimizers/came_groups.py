"""How CAME steps many params at once: the same-shaped params of a param group form a ``Group`` whose state
is stacked, and each step calls ``came_math``'s functions once per chunk of the group, eager or compiled: a
fixed number of operations whatever the number of params. ``optimizer.state[p][key]`` stays a view of row
``i`` of the stacked tensor, so ``state_dict()`` and checkpoints see per-parameter state. A chunk's weights
and gradients are stacked in fp32 (unless they are one fp32 tensor, stepped in place), so its size bounds
the step's scratch memory. A chunk's first compiled step is guarded: a failure restores what it wrote and
the eager step runs instead. Figures: docs/came.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate
from math import prod
from typing import Any

import torch
from torch import Tensor

from autotrain.compat.torch import foreach_copy_
from autotrain.optimizers import came_math
from autotrain.optimizers.came_compile import Compiler, layout, tensors_of
from autotrain.optimizers.sharding import DTensor, Shards, is_sharded, local, shards_of

FACTORED_KEYS = ("exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_res_row", "exp_avg_res_col")
PLAIN_KEYS = ("exp_avg_sq",)
MOMENT_KEYS = ("exp_avg", "exp_avg_codes", "exp_avg_absmax")  # the first moment: fp32, or 8-bit codes and scales
CHUNKS = 8  # a chunk holds at least an eighth of a param group's elements (or half its largest param) ...
CPU_CHUNK = 1 << 17  # ... and on the CPU at most this many (a larger matrix steps alone, in place, in cache)


@dataclass
class Group:
    """Same-shaped params of one param group, stepped together; ``state_keys`` are stacked in ``stacked``."""

    params: list[Tensor]
    state_keys: tuple[str, ...]
    shards: Shards
    stacked: dict[str, Tensor] = field(default_factory=dict)
    views: list[Tensor] = field(default_factory=list)  # state[p]["RMS"] of each param: the group's marker
    chunks: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of the params stepped at once
    chunk_state: dict = field(default_factory=dict)  # (start, end) -> _state_views of that chunk
    sites: dict = field(default_factory=dict)  # (start, end) -> that chunk's graphs, and whether it ran them
    warm: bool = False  # every chunk's layout was compiled on the warm-up thread

    @property
    def factored(self) -> bool:
        return len(self.shards.shape) >= 2

    @property
    def slices(self) -> int:
        """How many slices a factored param is factored within (its leading dims: 1 for a matrix)."""
        return prod(self.shards.shape[:-2]) if self.factored else 1

    @property
    def local_shape(self) -> torch.Size:
        return local(self.params[0]).shape

    def dims(self) -> came_math.Dims:
        shape = self.shards.shape
        codes = self.stacked.get("exp_avg_codes")
        block = 0 if codes is None else codes.shape[-1]
        return came_math.Dims(rows=shape[-2] if self.factored else 1, numel=prod(shape), block=block)

    def still_valid(self, state: dict) -> bool:
        """Whether the params' state still holds this group's views (nothing replaced it since)."""
        return all(state[p].get("RMS") is view for p, view in zip(self.params, self.views, strict=True))


def groups_of(params: list[Tensor], state: dict, moment_keys: Callable[[Tensor], tuple[str, ...]]) -> list[Group]:
    """``params`` (with their state) in groups of one local and global shape, device, shard group and kind
    (first moment, master weights), each in chunks of at most ``chunk_budget`` elements."""
    buckets: dict[tuple, list[Tensor]] = {}
    for p in params:
        moment = moment_keys(p)
        key = (local(p).shape, p.shape, p.device, moment, id(shards_of(p).group), "master_param" in state[p])
        buckets.setdefault(key + tuple(local(state[p][k]).shape for k in moment), []).append(p)
    return [build(ps, state, moment_keys(ps[0]), chunk_budget(params, ps[0].device)) for ps in buckets.values()]


def chunk_budget(params: list[Tensor], device: torch.device) -> int:
    """The most elements a chunk steps at once: the step's scratch stays a few chunks of fp32, and a GPU's chunks
    number at most the groups plus ``CHUNKS`` whatever the depth. Global sizes: the same chunks on every rank."""
    budget = max(max((p.numel() for p in params), default=0) // 2, sum(p.numel() for p in params) // CHUNKS)
    return min(budget, CPU_CHUNK) if device.type == "cpu" else budget


def chunks_of(count: int, numel: int, budget: int) -> list[tuple[int, int]]:
    """``count`` params of ``numel`` elements in runs of at most ``budget`` elements (one param at least): equal
    runs (one compiled shape) where up to twice the fewest runs divide ``count``, else two lengths."""
    fewest = -(-count // max(1, budget // numel))  # runs of at most budget // numel params
    parts = next((n for n in range(fewest, min(2 * fewest, count) + 1) if count % n == 0), fewest)
    size, extra = divmod(count, parts)
    ends = list(accumulate(size + (i < extra) for i in range(parts)))
    return list(zip([0, *ends[:-1]], ends, strict=True))


def build(params: list[Tensor], state: dict, moment_keys: tuple[str, ...], budget: int | None = None) -> Group:
    """Stack the per-parameter state of ``params`` (same shape and kind) and leave views behind."""
    shards = shards_of(params[0])
    keys = (FACTORED_KEYS if len(shards.shape) >= 2 else PLAIN_KEYS) + moment_keys + ("RMS",)
    keys += ("master_param",) if "master_param" in state[params[0]] else ()
    numel = prod(shards.shape)
    group = Group(params, keys, shards, chunks=chunks_of(len(params), numel, budget or len(params) * numel))
    for key in keys:
        values = [state[p][key] for p in params]
        stacked = torch.stack([local(v) for v in values])
        group.stacked[key] = stacked
        for i, (p, value) in enumerate(zip(params, values, strict=True)):
            state[p][key] = _like(value, stacked[i])
    group.views = [state[p]["RMS"] for p in params]
    return group


def _like(original: Tensor, view: Tensor) -> Tensor:
    """``view`` as the state tensor ``original`` was: a DTensor with its layout, or plain."""
    if not is_sharded(original):
        return view
    mesh, placements = original.device_mesh, original.placements
    return DTensor.from_local(view, mesh, placements, shape=original.shape, stride=original.stride())


class Scratch:
    """Buffers a ``step()`` lends to each of its chunks in turn, and frees when it ends (a fresh buffer's page
    faults are paid once a step): the stacked weights and gradients."""

    def __init__(self) -> None:
        self._buffers: dict[tuple, Tensor] = {}

    def take(self, size: int, device: torch.device, slot: str) -> Tensor:
        """``size`` fp32 elements from the buffer of ``slot``, grown as needed."""
        buffer = self._buffers.get((device, slot))
        if buffer is None or buffer.numel() < size:
            self._buffers.pop((device, slot), None)  # freed before the larger one is made
            buffer = self._buffers[(device, slot)] = torch.empty(size, device=device)
        return buffer[:size]


def step_group(group: Group, hp: Tensor, skipped: Tensor, scratch: Scratch, compiler: Compiler | None) -> None:
    """One step of ``group``, chunk by chunk: eager (``compiler`` None) or compiled."""
    for start, end in group.chunks:
        args, locals_ = chunk_args(group, start, end, hp, skipped, scratch)
        if compiler is None or compiler.failure is not None:
            chunk_maths(came_math.eager, *args)
        else:
            _compiled_chunk(group, group.sites.setdefault((start, end), {}), args, compiler)
        if locals_ is not None:  # the params were gathered: copied back
            foreach_copy_(locals_, list(args[0].view(len(locals_), *group.local_shape).unbind(0)))


def _compiled_chunk(group: Group, site: dict, args: tuple, compiler: Compiler) -> None:
    """The chunk's compiled step. Its first one (where graphs compile, load and first run) is guarded: what it
    writes is copied first, and a failure restores the failed call's part of it, records the failure and
    runs that call and the rest eagerly: the eager step, exactly. A shard's calls have all-reduces between
    them that every rank makes once, so only the failed call runs again. A later failure cannot be undone (its
    kernels may have written): it stops the step with the reason."""
    p, _, state, moment, _, _, _ = args
    kept = None if site.get("proven") else [(t, t.clone()) for t in (p, *state, *moment)]

    def run(fn: Callable, *phase: Any) -> Any:
        if compiler.failure is None:
            try:
                return compiler(site, fn, *phase)
            except Exception as exc:
                compiler.fail(exc, tuple(group.local_shape), len(group.params))
                if kept is None:
                    raise RuntimeError(
                        f"CAME's compiled step failed after it had run ({compiler.failure['failure']}); the optimizer "
                        "state may be partly updated: resume from the last checkpoint (compile: false never "
                        "compiles)"
                    ) from exc
                among = tensors_of(phase)
                for t, copy in kept:
                    if any(t is a for a in among):
                        t.copy_(copy)
        return fn(*phase)

    chunk_maths(run, *args)
    site["proven"] = compiler.failure is None


def warm_up(group: Group, hp: Tensor, skipped: Tensor, compiler: Compiler) -> bool:
    """Whether every chunk layout of ``group`` is compiled; those that are not are queued for ``compiler``'s
    thread, which compiles each by a step on scratch tensors of its layout (they cost its memory while it
    runs; the real tensors are never touched)."""
    if not group.warm:
        device, who = group.params[0].device, (tuple(group.local_shape), len(group.params))
        ready = True
        for start, end in group.chunks:
            args, _ = chunk_args(group, start, end, hp, skipped, None)
            key = (layout(args[:-1]), args[-1] is None)  # (a shard's reducer is a closure of its own)
            ready &= compiler.warmed(key, partial(_scratch, args, device), _warm_step, who)
        group.warm = ready
    return group.warm


def _scratch(value: Any, device: torch.device) -> Any:
    """``value`` with each tensor replaced by an uninitialised one of its layout on ``device``."""
    if isinstance(value, Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device)
    if type(value) in (tuple, list):
        return type(value)(_scratch(v, device) for v in value)
    return value


def _warm_step(run: Callable, p: Tensor, g: Tensor, state: tuple, moment: tuple, hp: Tensor, dims, reduce) -> None:
    """A chunk's step on scratch tensors: a shard's calls as they are made, with no all-reduce between them."""
    chunk_maths(run, p, g, state, moment, hp, dims, None if reduce is None else _no_reduce)


def _no_reduce(kind: str, tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    return tensors


def _in_place(tensors: list[Tensor]) -> bool:
    """Whether ``tensors`` are one fp32, contiguous tensor, which the step reads and writes where it is."""
    return len(tensors) == 1 and tensors[0].dtype == torch.float32 and tensors[0].is_contiguous()


def _stacked(tensors: list[Tensor], lead: tuple[int, ...], scratch: Scratch | None, slot: str) -> Tensor:
    """``tensors`` as one fp32 tensor ``lead``: the one fp32 tensor itself, or stacked in ``scratch``'s buffer of
    ``slot`` (None: a meta tensor of that layout)."""
    if _in_place(tensors):
        return tensors[0].detach().view(lead)
    if scratch is None:
        return torch.empty(lead, device="meta")
    into = scratch.take(prod(lead), tensors[0].device, slot)
    return torch.stack(tensors, out=into.view(len(tensors), *tensors[0].shape)).view(lead)


def chunk_args(group: Group, start: int, end: int, hp: Tensor, skipped: Tensor, scratch: Scratch | None):
    """``chunk_maths``'s arguments for params ``[start, end)``, and the params' local tensors that ``p`` (their
    stack or master weights) is copied to after the step (None: ``p`` is the param). ``scratch`` None: only
    the layouts (``warm_up``), nothing gathered."""
    locals_ = [local(p) for p in group.params[start:end]]
    shape = group.local_shape
    lead = (len(locals_), *((prod(shape[:-2]), *shape[-2:]) if group.factored else (prod(shape),)))
    g = _stacked([local(q.grad) for q in group.params[start:end]], lead, scratch, "g")
    master = group.stacked.get("master_param")
    if master is not None:  # stepped in place, then copied to the params
        p, in_place = master[start:end].view(lead), False
    else:
        p, in_place = _stacked(locals_, lead, scratch, "p"), _in_place(locals_)
    views, moment, dims, reduce = _state_views(group, start, end, lead)
    return (p, g, (*views, skipped), moment, hp, dims, reduce), None if in_place else locals_


def _state_views(group: Group, start: int, end: int, lead: tuple[int, ...]) -> tuple:
    """The state of params ``[start, end)`` as came_math takes it (views made once), moment, dims and reducer."""
    cached = group.chunk_state.get((start, end))
    if cached is not None:
        return cached
    stacked = {key: value[start:end] for key, value in group.stacked.items()}
    if group.factored:
        stats = [stacked[k].view(lead[:3] if k.endswith("row") else (*lead[:2], lead[3])) for k in FACTORED_KEYS]
        moment = [stacked[k] for k in group.state_keys if k in MOMENT_KEYS]
        if len(moment) == 1:
            moment = [moment[0].view(lead)]
        elif came_math.rows_align(lead[-1], moment[0].shape[-1]):
            moment = [came_math.row_codes(moment[0], lead), moment[1]]
        views = (*stats, stacked["RMS"])
    else:
        views, moment = (stacked["exp_avg_sq"].view(lead), stacked["exp_avg"].view(lead), stacked["RMS"]), []
    reduce = None if group.shards.group is None else _reducer(group.shards)
    cached = group.chunk_state[(start, end)] = (views, tuple(moment), group.dims(), reduce)
    return cached


def chunk_maths(run: Callable, p: Tensor, g: Tensor, state: tuple, moment: tuple, hp: Tensor, dims, reduce):
    """came_math's step of one chunk through ``run`` (``eager`` or a compiler): a whole chunk's as one call,
    a shard's as its phases, the all-reduces (``reduce``) between them."""
    if reduce is None:
        run(came_math.step, p, g, state, moment, hp, dims)
    elif moment:
        came_math.factored_step(p, g, (*state, *moment), hp, dims, reduce, run)
    else:
        came_math.plain_step(p, g, state, hp, dims, reduce, run)


def _reducer(shards: Shards) -> Callable:
    """Sums over the shards what spans them: totals always, per-slice sums where a matrix's rows are split, the
    update's total where its slices are."""

    def reduce(kind: str, tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        needed = kind == "totals" or (kind == "slices") == shards.splits_columns
        return tuple(shards.all_sum(*tensors)) if needed else tensors

    return reduce

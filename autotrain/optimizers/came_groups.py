"""How CAME steps many params at once: the same-shaped params of a param group form a ``Group`` whose state
is stacked, and each step calls ``came_math``'s functions once per chunk of the group, eager or compiled: a
fixed number of operations whatever the number of params. ``optimizer.state[p][key]`` stays a view of row
``i`` of the stacked tensor, so ``state_dict()`` and checkpoints see per-parameter state. A chunk's weights
and gradients are stacked in fp32 (unless they are one fp32 tensor, stepped in place), so its size bounds
the step's scratch memory. A compiled call is guarded: whatever fails restores what it wrote, and the group
takes the eager step. Figures: docs/came.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate
from math import prod
from typing import Any

import torch
from torch import Tensor

from autotrain.optimizers import came_compile, came_math
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
    compiled: bool = False  # Background: its chunk layouts were all compiled (one seen later compiles on use)
    chunk_state: dict = field(default_factory=dict)  # (start, end) -> _state_views of that chunk
    sites: dict = field(default_factory=dict)  # (start, end) -> that chunk's compiled graphs (StepCompiler)
    trial: list = field(default_factory=list)  # where auto measures: ("compiled"/"eager", Timing)s
    choice: dict | None = None  # ... and what it measured and kept (came_policy), or why it failed
    failure: str | None = None  # why its compiled step failed: it takes the eager step from then on

    def fail(self, reason: str, say: bool = True) -> None:
        """The compiled step failed: the eager step from now on, one line (``say``), and ``choice`` says why."""
        if self.failure is not None:
            return
        self.failure = reason
        self.choice = {"shape": list(self.local_shape), "params": len(self.params), **(self.choice or {})}
        self.choice.update(kept="eager", failure=reason)
        if say:
            shape = "x".join(map(str, self.local_shape)) or "scalar"
            print(
                f"autotrain: CAME's compiled step failed for the group of {len(self.params)} {shape} "
                f"parameter(s) ({reason}); it takes the eager step from the state before that step (same maths)",
                file=sys.stderr,
            )

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
    faults are paid once a step): the stacked weights and gradients, and the copies a guarded call keeps."""

    def __init__(self) -> None:
        self._buffers: dict[tuple, Tensor] = {}

    def take(self, size: int, device: torch.device, dtype: torch.dtype = torch.float32, slot: str = "p") -> Tensor:
        """``size`` elements from the buffer of ``slot``, grown as needed."""
        key = (device, dtype, slot)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < size:
            self._buffers.pop(key, None)  # freed before the larger one is made
            buffer = self._buffers[key] = torch.empty(size, dtype=dtype, device=device)
        return buffer[:size]

    def keep(self, tensors: list[Tensor]) -> Kept:
        """Copies of ``tensors`` (one buffer per dtype, lent for this chunk), to restore them."""
        by_dtype: dict[torch.dtype, list[Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        kept = Kept([], [])
        for dtype, group in by_dtype.items():
            buffer, start = self.take(sum(t.numel() for t in group), group[0].device, dtype, "kept"), 0
            for t in group:
                kept.originals.append(t)
                kept.copies.append(buffer[start : start + t.numel()].view(t.shape))
                start += t.numel()
        if kept.originals:
            torch._foreach_copy_(kept.copies, kept.originals)
        return kept


@dataclass
class Kept:
    """What a chunk's compiled step writes in place, as it was before the step (``Scratch.keep``)."""

    originals: list[Tensor]
    copies: list[Tensor]

    def restore(self, among: Any = None) -> None:
        """Write the copies back: all of them, or those of the tensors in ``among`` (a phase's arguments)."""
        pairs = list(zip(self.originals, self.copies, strict=True))
        if among is not None:
            found: list[Tensor] = []
            came_compile._tensors(among, found)
            pairs = [(t, copy) for t, copy in pairs if any(t is f for f in found)]
        if pairs:
            torch._foreach_copy_([t for t, _ in pairs], [copy for _, copy in pairs])


def step_group(
    group: Group, hp: Tensor, skipped: Tensor, compiler: came_compile.StepCompiler | None, scratch: Scratch | None
) -> None:
    """One step of ``group``, chunk by chunk: eager (``compiler`` None, or the group's compiled step failed) or
    compiled."""
    scratch = scratch or Scratch()
    if compiler is not None and group.failure is None:
        if compiler.failure is not None:  # recorded; the compiler said why, once
            group.fail(compiler.failure, say=False)
        elif group.slices > 1 and not came_compile.slices_compile_right(group.params[0].device):
            group.fail(came_compile.SLICES_WRONG)
    for start, end in group.chunks:
        args, locals_ = chunk_args(group, start, end, hp, skipped, scratch)
        site = group.sites.setdefault((start, end), {})  # the chunk's graphs
        if compiler is None or group.failure is not None:
            eager_chunk(*args)
        elif not _compiled_or_restored(group, args, locals_, compiler, scratch, site):
            args, locals_ = chunk_args(group, start, end, hp, skipped, scratch)  # gathered again: the call wrote there
            eager_chunk(*args)
        if locals_ is not None:  # the params were gathered: copied back
            torch._foreach_copy_(locals_, list(args[0].view(len(locals_), *group.local_shape).unbind(0)))


def _compiled_or_restored(group: Group, args: tuple, locals_, compiler, scratch: Scratch, site: dict) -> bool:
    """The chunk's compiled step, guarded: what it writes in place (state; params stepped in place; a stack is
    gathered again) is kept first, and whatever fails at any call (compiling, autotuning, a launch, memory)
    restores it and fails the group; False: the caller takes the eager step. Nothing is kept where the chunk's
    graphs all ran before and fail, if at all, before they write (``writes_once``). A shard's phases have
    all-reduces between them that every rank makes once: there the failed phase alone runs again eagerly."""
    p, _, state, moment, _, _, reduce = args
    p_in_place = locals_ is None or reduce is not None or "master_param" in group.stacked
    proven = site and all(getattr(graph, "writes_once", False) for graph in site.values())
    if proven and (reduce is not None or len(site) == 1):
        kept = Kept([], [])
    else:
        kept = scratch.keep([*([p] if p_in_place else []), *state, *moment])
    if reduce is None:
        try:
            chunk_maths(partial(compiler, site=site), *args)
            return True
        except Exception as exc:  # the eager step goes on
            kept.restore()
            group.fail(came_compile.describe(exc), say=compiler.failure is None)
            return False

    def run(fn: Callable, *phase: Any) -> Any:
        if group.failure is None:
            try:
                return compiler(fn, *phase, site=site)
            except Exception as exc:  # this phase, eagerly
                kept.restore(among=phase)
                group.fail(came_compile.describe(exc), say=compiler.failure is None)
        return fn(*phase)

    chunk_maths(run, *args)
    return True


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
    into = scratch.take(prod(lead), tensors[0].device, slot=slot)
    return torch.stack(tensors, out=into.view(len(tensors), *tensors[0].shape)).view(lead)


def chunk_args(group: Group, start: int, end: int, hp: Tensor, skipped: Tensor, scratch: Scratch | None):
    """``chunk_maths``'s arguments for params ``[start, end)``, and the params' local tensors that ``p`` (their
    stack or master weights) is copied to after the step (None: ``p`` is the param). ``scratch`` None: only
    the layouts (``Background``), nothing gathered."""
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
    """came_math's step of one chunk, each function through ``run`` (``eager`` or a compiler); a shard's phases
    one by one, the all-reduces (``reduce``) between them."""
    if reduce is not None:
        if moment:
            came_math.factored_step(p, g, (*state, *moment), hp, dims, reduce, run)
        else:
            came_math.plain_step(p, g, state, hp, dims, reduce, run)
    elif not moment:  # 1-D params
        run(came_math.plain_step, p, g, state, hp, dims, reduce)
    elif moment[0].dim() == 3:  # 8-bit codes in blocks that cut rows: the new moment made once, then encoded
        m_new, ok = run(came_math.factored_update, p, g, (*state, *moment), hp, dims, reduce)
        run(came_math.write_moment, moment, m_new, ok, dims)
    else:
        run(came_math.factored_step, p, g, (*state, *moment), hp, dims, reduce)


def _reducer(shards: Shards) -> Callable:
    """Sums over the shards what spans them: totals always, per-slice sums where a matrix's rows are split, the
    update's total where its slices are."""

    def reduce(kind: str, tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        needed = kind == "totals" or (kind == "slices") == shards.splits_columns
        return tuple(shards.all_sum(*tensors)) if needed else tensors

    return reduce


def eager_chunk(*args: Any) -> None:
    """A chunk's step, eager."""
    chunk_maths(came_math.eager, *args)

"""Decisions that change which collectives run, taken the same on every rank.

A rank that decides from what only it sees (a tolerance check on its own forward pass, the loss of its own
batch, the gradients of its own shard, the files on its own disk) can take the other branch from its
peers. Where the branches issue different collectives (one rank calls `gather_for_metrics`, another does
not; one raises, the others go on to the next all-reduce), the ranks wait on each other until a watchdog
ends the run, or reduce tensors that do not belong together. Each such decision is combined here over
every rank in one small collective on a gloo group (CPU tensors: no device synchronisation), so every
rank takes the same branch. In one process each function returns the local answer and runs nothing.

Every rank must call these functions at the same points, in the same order: they are collectives.
"""

from __future__ import annotations

_GROUP: tuple = (None, None)  # (the default process group it was made for, a gloo group of every rank)


def group():
    """A gloo group of every rank of the default process group (made on first use; the stop flag shares
    it), or None in a single process."""
    import torch.distributed as dist

    global _GROUP
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    world = dist.group.WORLD
    if _GROUP[0] is not world:  # a new default group (a test, a second run in this process): a new group
        _GROUP = (world, dist.new_group(backend="gloo"))
    return _GROUP[1]


def largest(value: int) -> int:
    """The largest `value` of any rank (a non-negative int)."""
    chosen = group()
    if chosen is None:
        return value
    import torch
    import torch.distributed as dist

    flag = torch.tensor([int(value)], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=chosen)
    return int(flag.item())


def on_every_rank(flag: bool) -> bool:
    """True when `flag` is true on every rank: one rank that says no decides for all."""
    return largest(0 if flag else 1) == 0


def on_any_rank(flag: bool) -> bool:
    """True when `flag` is true on at least one rank."""
    return largest(1 if flag else 0) == 1


def main_rank_value(value):
    """Rank 0's `value` (anything picklable) on every rank."""
    chosen = group()
    if chosen is None:
        return value
    import torch.distributed as dist

    carried = [value]
    dist.broadcast_object_list(carried, src=0, group=chosen)
    return carried[0]

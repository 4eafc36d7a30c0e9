"""What an optimizer needs to know about a parameter sharded on dim 0 by FSDP2 (a DTensor).

Element-wise math runs on each rank's local shard unchanged; only reductions over the whole tensor (or
over dim 0) need the other shards, and those are small: a few scalars and, for a 2-D matrix, one vector
of column sums. :class:`Shards` carries the global shape and the process group to sum them over, and
builds optimizer state with the same layout as the parameter, so ``state_dict`` and
``torch.distributed.checkpoint`` save and reshard it like any FSDP2 state. A plain tensor is its own
single shard: no communication, plain tensors as state.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

try:
    from torch.distributed.tensor import DTensor, Replicate, Shard
except ImportError:  # torch built without distributed support: every tensor is whole
    DTensor = None  # type: ignore[assignment,misc]


def is_sharded(t: Any) -> bool:
    return DTensor is not None and isinstance(t, DTensor)


def local(t: Tensor) -> Tensor:
    """The rank's shard of a DTensor (a view: in-place changes reach the DTensor), else ``t``."""
    return t.to_local() if is_sharded(t) else t


@dataclass(frozen=True)
class Shards:
    """A tensor of global ``shape`` split on dim 0 over ``group`` (None: the whole tensor is here).

    ``placements`` are the DTensor's, on ``mesh``: ``Shard(0)`` on at most one mesh dim (the one
    ``group`` spans), ``Replicate()`` on the others (HSDP replicas hold the same shard).
    """

    shape: torch.Size
    group: Any = None
    mesh: Any = None
    placements: tuple = ()

    @property
    def world(self) -> int:
        return 1 if self.group is None else dist.get_world_size(self.group)

    @property
    def splits_columns(self) -> bool:
        """Column statistics of a factored tensor sum over dim 0, across ranks, only when it is 2-D."""
        return self.group is not None and len(self.shape) == 2

    @property
    def padded_local_numel(self) -> int:
        """Elements of the largest shard (dim 0 split as ``torch.chunk`` does); 1 for a 0-d tensor."""
        if not self.shape:
            return 1
        rows = -(-self.shape[0] // self.world)
        return rows * prod(self.shape[1:])

    def all_sum(self, *tensors: Tensor) -> list[Tensor]:
        """Each tensor summed over the shards, in one all-reduce; the tensors themselves when whole."""
        if self.group is None or not tensors:
            return list(tensors)
        flat = torch.cat([t.reshape(-1).float() for t in tensors])
        # Under FSDP2's CPU offload the shards live on the CPU, while the group (NCCL) needs the mesh's device.
        reduced = flat.to(_device_of(self.mesh)) if flat.device.type != self.mesh.device_type else flat
        dist.all_reduce(reduced, group=self.group)
        flat = reduced.to(flat.device)
        sizes = [t.numel() for t in tensors]
        return [part.view(t.shape) for part, t in zip(flat.split(sizes), tensors, strict=True)]

    def state(self, local_tensor: Tensor, shape: tuple[int, ...], *, sharded: bool = True) -> Tensor:
        """``local_tensor`` as this rank's part of a state tensor of global ``shape``.

        ``sharded``: split on dim 0 like the parameter; otherwise the same on every rank. Plain
        tensors stay plain.
        """
        if self.mesh is None:
            return local_tensor
        placements = [p if sharded else Replicate() for p in self.placements]
        stride = torch.empty(shape, device="meta").stride()
        return DTensor.from_local(local_tensor, self.mesh, placements, shape=torch.Size(shape), stride=stride)


def _device_of(mesh: Any) -> torch.device:
    kind = mesh.device_type
    return torch.device(kind, getattr(torch, kind).current_device()) if kind != "cpu" else torch.device("cpu")


def shards_of(p: Tensor) -> Shards:
    """How ``p`` is split. Raises on layouts other than dim-0 sharding (what FSDP2 does by default)."""
    if not is_sharded(p):
        return Shards(p.shape)
    sharded_dims = [i for i, pl in enumerate(p.placements) if not isinstance(pl, Replicate)]
    if any(p.placements[i] != Shard(0) for i in sharded_dims) or len(sharded_dims) > 1:
        raise NotImplementedError(
            f"parameters sharded as {p.placements} are not supported; only Shard(0) on one mesh dim "
            "(FSDP2's default layout)"
        )
    group = p.device_mesh.get_group(sharded_dims[0]) if sharded_dims else None
    return Shards(p.shape, group, p.device_mesh, tuple(p.placements))

"""What one decoder layer's backward pass holds beyond what the forward pass kept, found by running that
backward on the meta device (sizes only: nothing is read or computed) and following which tensors are alive.

While a layer runs backward, the gradients of its inputs and intermediate values, the gradients of its
trained weights and the temporaries of each backward kernel exist beside everything the forward pass kept;
the layer's saved tensors are released as its nodes finish. How much that adds at its highest depends on the
architecture's backward formulas (an MLP's gate and up gradients, attention's q, k, v gradients), so it is
measured here as autograd runs it rather than written down for one family. A storage counts from the op
that created it until the last tensor holding it is gone (a weak reference to the storage says when).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

from autotrain.compat.torch import TorchDispatchMode


class LiveStorages(TorchDispatchMode):
    """Every storage an op creates, with its bytes while any tensor holds it; `peak` is the highest total
    seen since `watch()` (the storages in `skip`, the weights, never count)."""

    def __init__(self, skip: set[int]):
        super().__init__()
        self.storages: dict[int, tuple[StorageWeakRef, int]] = {}
        self.skip = skip
        self.watching = False
        self.start = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in _tensors(out):
            storage = tensor.untyped_storage()
            ref = StorageWeakRef(storage)
            key = ref.cdata  # the storage's identity (its Python wrapper may be another object each call)
            known = self.storages.get(key)
            if key not in self.skip and (known is None or known[0].expired()):
                self.storages[key] = (ref, storage.nbytes())
        if self.watching:
            self.peak = max(self.peak, self.live())
        return out

    def live(self) -> int:
        for key in [key for key, (ref, _) in self.storages.items() if ref.expired()]:
            del self.storages[key]
        return sum(nbytes for _, nbytes in self.storages.values())

    def watch(self) -> None:
        self.start = self.peak = self.live()
        self.watching = True

    def stop(self) -> int:
        """The most the watched span held above what was alive when it began."""
        self.watching = False
        return max(0, self.peak - self.start)


class _Measured(Exception):
    """Raised from the gradient hook once the layer is measured: it ends the backward pass there."""


def _finish(done: list[int], grown: int) -> None:
    done.append(grown)
    raise _Measured


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def _first_tensor(value) -> torch.Tensor | None:
    found = _tensors(value)
    return found[0] if found else None


def layer_backward_bytes(model: nn.Module, layers: nn.ModuleList, forward: Callable[[], object]) -> int | None:
    """Bytes the last of `layers` adds during its backward pass over what was alive as it began, for the
    forward pass `forward()` of `model` on the meta device; None when the backward cannot be traced (an op
    without a meta kernel, a layer whose output needs no gradient)."""
    last = layers[len(layers) - 1]
    seen: dict[str, torch.Tensor | None] = {}
    hooks = [
        last.register_forward_pre_hook(
            lambda module, args, kwargs: seen.update(input=_first_tensor((args, kwargs.get("hidden_states")))),
            with_kwargs=True,
        ),
        last.register_forward_hook(lambda module, args, out: seen.update(output=_first_tensor(out))),
    ]
    weights = {StorageWeakRef(t.untyped_storage()).cdata for t in (*model.parameters(), *model.buffers())}
    live = LiveStorages(weights)
    try:
        with live:
            forward()
            output, given = seen.get("output"), seen.get("input")
            if output is None or not output.requires_grad:
                return None
            done: list[int] = []
            output.register_hook(lambda grad: live.watch())
            if given is not None and given.requires_grad:
                given.register_hook(lambda grad: _finish(done, live.stop()))
            try:
                torch.autograd.backward(output, grad_tensors=torch.empty_like(output))
            except _Measured:  # the layers below would only repeat it
                pass
            except (RuntimeError, NotImplementedError, TypeError):  # an op the meta device cannot run backward
                return None
            return done[0] if done else live.stop()
    finally:
        for hook in hooks:
            hook.remove()

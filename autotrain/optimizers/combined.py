"""One optimizer object that sends large matrices to CAME8Bit and everything else to FusedAdam."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from autotrain.optimizers.came_8bit import CAME8Bit
from autotrain.optimizers.common import check_arg, closure_loss
from autotrain.optimizers.fused_adam import FusedAdam


class _StateView(Mapping):
    """The inner optimizers' ``state`` as one mapping, as ``Optimizer.state_dict`` expects.

    Like torch's ``defaultdict`` state, looking up a param of the optimizer that has no state yet
    gives its (new, empty) state dict.
    """

    def __init__(self, owner: CAME8BitFusedAdam) -> None:
        self._owner = owner

    def __getitem__(self, param: Tensor) -> Any:
        for opt in self._owner.optimizers:
            if param in opt.state:
                return opt.state[param]
        return self._owner.optimizer_of(param).state[param]

    def items(self) -> list[tuple[Tensor, Any]]:  # type: ignore[override]
        return [item for opt in self._owner.optimizers for item in opt.state.items()]

    def __contains__(self, param: object) -> bool:
        return any(param in opt.state for opt in self._owner.optimizers)

    def __iter__(self) -> Iterator[Tensor]:
        for opt in self._owner.optimizers:
            yield from opt.state

    def __len__(self) -> int:
        return sum(len(opt.state) for opt in self._owner.optimizers)


class CAME8BitFusedAdam(Optimizer):
    """CAME8Bit for large matrices, FusedAdam for the rest, behind one ``torch.optim.Optimizer``.

    A param goes to :class:`CAME8Bit` when CAME factors it (``ndim >= 2``) and it has at least
    ``min_factored_size`` elements; biases, norms, other 1-D and small tensors go to
    :class:`FusedAdam`. This pays when big 2-D weights dominate the parameter count (transformer
    blocks): they get CAME's factored second moment plus an 8-bit first moment (~1 byte of state
    per parameter instead of AdamW's 8), while CAME would save nothing on 1-D or small tensors
    (it keeps a full fp32 second moment for them), where Adam is as cheap and well understood.
    Embedding matrices are 2-D and large, so they take the CAME path unless the caller passes
    them in a separate group or raises ``min_factored_size``.

    Every input param group is split into a CAME8Bit group and a FusedAdam group with the same
    extra keys (``weight_decay``, ``lr``, ...). ``param_groups`` is the list of the inner
    optimizers' group dicts themselves, so an LR scheduler writing ``group["lr"]`` drives both;
    ``state``, ``state_dict()``, ``load_state_dict()`` and ``zero_grad()`` cover both.

    Args:
        params: parameters or param groups (as the transformers Trainer passes them).
        lr: learning rate for both (per-group ``lr`` overrides).
        weight_decay: decoupled weight decay for both (per-group ``weight_decay`` overrides).
        came: extra :class:`CAME8Bit` arguments (eps, clip_threshold, betas, block_size, ...).
        adam: extra :class:`FusedAdam` arguments (betas, eps, bias_correction, ...).
        min_factored_size: fewest elements for a 2-D+ param to take the CAME8Bit path.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        came: dict[str, Any] | None = None,
        adam: dict[str, Any] | None = None,
        min_factored_size: int = 16384,
    ) -> None:
        check_arg(lr >= 0.0, "learning rate", lr)
        check_arg(weight_decay >= 0.0, "weight_decay value", weight_decay)
        check_arg(min_factored_size >= 0, "min_factored_size value", min_factored_size)
        self.min_factored_size = min_factored_size
        self._came_kwargs = dict(came or {})
        self._adam_kwargs = dict(adam or {})
        self.came: CAME8Bit | None = None
        self.adam: FusedAdam | None = None
        # Optimizer.__init__ feeds every group through add_param_group below, which builds the
        # inner optimizers; it also sets up the hooks LR schedulers and the Trainer rely on.
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay))
        self.state = _StateView(self)  # type: ignore[assignment]

    @property
    def optimizers(self) -> list[Optimizer]:
        return [opt for opt in (self.came, self.adam) if opt is not None]

    @property
    def skipped_tensors(self) -> int:
        """Updates CAME8Bit skipped for a non-finite gradient (see CAME); FusedAdam does not check."""
        return 0 if self.came is None else self.came.skipped_tensors

    @property
    def compile_choices(self) -> list[dict]:
        """CAME8Bit's record of a failed compilation, if any (see CAME)."""
        return [] if self.came is None else self.came.compile_choices

    def optimizer_of(self, param: Tensor) -> Optimizer:
        """The inner optimizer that steps `param` (KeyError for a param it does not hold)."""
        for opt in self.optimizers:
            if any(param is p for group in opt.param_groups for p in group["params"]):
                return opt
        raise KeyError("parameter not optimized by this optimizer")

    def _takes_came_path(self, p: Tensor) -> bool:
        return p.ndim >= 2 and p.numel() >= self.min_factored_size

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        options = {k: v for k, v in param_group.items() if k != "params"}
        for key in ("lr", "weight_decay"):
            options.setdefault(key, self.defaults[key])
        for name, cls, kwargs, came_path in (
            ("came", CAME8Bit, self._came_kwargs, True),
            ("adam", FusedAdam, self._adam_kwargs, False),
        ):
            group = {**options, "params": [p for p in params if self._takes_came_path(p) == came_path]}
            if not group["params"]:
                continue
            if getattr(self, name) is None:
                setattr(self, name, cls([group], **{"lr": options["lr"], **kwargs}))
            else:
                getattr(self, name).add_param_group(group)
        self._sync_param_groups()

    def _sync_param_groups(self) -> None:
        # In place, so references to the list (schedulers, the Trainer) stay valid.
        self.param_groups[:] = [g for opt in self.optimizers for g in opt.param_groups]

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Perform one optimization step of both inner optimizers; the closure runs once."""
        loss = closure_loss(closure)
        for opt in self.optimizers:
            opt.step()
        return loss

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """Reset gradients; by default FusedAdam follows its ``set_grad_none``, CAME8Bit sets None."""
        if self.came is not None:
            self.came.zero_grad(set_to_none=True if set_to_none is None else set_to_none)
        if self.adam is not None:
            self.adam.zero_grad(set_to_none=set_to_none)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a dict from :meth:`state_dict` (standard layout: CAME8Bit groups first)."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        start = 0
        for opt in self.optimizers:
            groups = saved_groups[start : start + len(opt.param_groups)]
            start += len(opt.param_groups)
            ids = {i for g in groups for i in g["params"]}
            state = {i: s for i, s in state_dict["state"].items() if i in ids}
            opt.load_state_dict({"state": state, "param_groups": groups})
        self._sync_param_groups()

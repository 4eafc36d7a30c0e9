"""Apex-compatible FusedAdam on torch's fused multi-tensor Adam/AdamW kernels."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.adam import adam
from torch.optim.adamw import adamw

from autotrain.compat.torch import foreach_add_, foreach_copy_
from autotrain.optimizers.common import HALF, check_arg, closure_loss, restore_saved_dtypes
from autotrain.optimizers.sharding import local

# beta**step underflows to exactly 0 for any beta < 1, so the kernel's bias corrections
# (1 - beta**step) become exactly 1: this is how bias_correction=False reaches the fused kernel.
_NO_BIAS_CORRECTION_STEP = 1e30


class _Bucket:
    """Tensors of one (device, dtype) for one multi-tensor kernel call."""

    def __init__(self) -> None:
        self.params: list[Tensor] = []
        self.grads: list[Tensor] = []
        self.exp_avgs: list[Tensor] = []
        self.exp_avg_sqs: list[Tensor] = []
        self.steps: list[Tensor] = []
        self.model_params: list[Tensor] = []  # half params to refresh from their fp32 masters


def adam_multi_tensor_(
    bucket: _Bucket,
    *,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    adam_w_mode: bool,
    bias_correction: bool,
    no_bias_step: Tensor,
) -> None:
    """One fused Adam(W) step over a bucket, through torch's functional Adam(W) with `fused=True`: it adds
    one to each step count, then runs torch's fused multi-tensor kernel (the one `AdamW(fused=True)` runs)."""
    if not bias_correction:  # the kernel is handed the 1e30 step; the real counts still count
        foreach_add_(bucket.steps, 1)
    (adamw if adam_w_mode else adam)(
        bucket.params,
        bucket.grads,
        bucket.exp_avgs,
        bucket.exp_avg_sqs,
        [],
        bucket.steps if bias_correction else [no_bias_step] * len(bucket.steps),
        fused=True,
        amsgrad=False,
        beta1=betas[0],
        beta2=betas[1],
        lr=lr,
        weight_decay=weight_decay,
        eps=eps,
        maximize=False,
    )
    if bucket.model_params:
        foreach_copy_(bucket.model_params, bucket.params)


class FusedAdam(Optimizer):
    r"""Drop-in replacement for ``apex.optimizers.FusedAdam`` (same constructor and state names).

    Per parameter, with :math:`t` the step, :math:`\lambda` = ``weight_decay``:

    * ``adam_w_mode=False`` (Adam, L2): :math:`g \leftarrow g + \lambda p`
    * :math:`m \leftarrow \beta_1 m + (1-\beta_1) g`, :math:`v \leftarrow \beta_2 v + (1-\beta_2) g^2`
    * ``bias_correction``: :math:`\hat m = m / (1-\beta_1^t)`, :math:`\hat v = v / (1-\beta_2^t)`
      (otherwise :math:`\hat m = m`, :math:`\hat v = v`)
    * ``adam_w_mode=True`` (AdamW): :math:`p \leftarrow p - \eta\lambda p`
    * :math:`p \leftarrow p - \eta\, \hat m / (\sqrt{\hat v} + \epsilon)`

    Params are bucketed by (device, dtype) and each bucket is one call of torch's functional
    ``adamw`` / ``adam`` with ``fused=True``: torch's fused multi-tensor kernel (CPU and CUDA), the
    same one ``torch.optim.AdamW(fused=True)`` runs. How each Apex flag maps onto it:

    * ``bias_correction=False``: the kernel always corrects, so it is handed a step of 1e30
      (adding one leaves it there), where :math:`\beta^t` is exactly 0 and both corrections exactly
      1 (``state["step"]`` still counts real steps).
    * ``master_weights=True`` (the default here; Apex's is False): fp16/bf16 params get an fp32
      copy (``state["master_param"]``, 4 bytes per parameter) and fp32 moments; the kernel updates
      the copy from the grad cast to fp32, and the param is refreshed from it. With False, moments
      are kept in the param dtype (the kernel needs one dtype per call) and each update is rounded
      into the param: in bf16 any update below half an ulp of its weight (``lr=1e-5`` on a weight of
      0.01) is lost.
    * ``capturable=True`` is refused: the learning rate reaches the kernel as a Python float read
      at each step, so a captured CUDA graph would replay the first one and an LR schedule would
      silently stop working. For graph capture use ``torch.optim.AdamW(fused=True,
      capturable=True)``, which keeps lr on the device. ``capturable=False`` (Apex's default) is
      accepted.
    * ``set_grad_none``: the default of ``zero_grad()``.
    * ``amsgrad=True`` and sparse gradients are rejected (neither has a fused path).

    State: per param ``step`` (a 0-d tensor on the param's device), ``exp_avg``, ``exp_avg_sq``
    and, with master weights, ``master_param``. :meth:`load_state_dict` also takes Apex's layout,
    where ``step`` is kept once per param group and the moments are fp32: each param gets its
    group's step, and the moments are cast to the dtype this optimizer keeps them in.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        adam_w_mode: bool = True,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        set_grad_none: bool = True,
        capturable: bool = False,
        master_weights: bool = True,
    ) -> None:
        if amsgrad:
            raise ValueError("FusedAdam does not support amsgrad=True (no fused amsgrad path)")
        if capturable:
            raise ValueError(
                "FusedAdam does not support capturable=True: lr is read as a Python float at each step, "
                "so a captured CUDA graph would keep the first one; use torch.optim.AdamW(fused=True, "
                "capturable=True) for graph capture"
            )
        check_arg(lr >= 0.0, "learning rate", lr)
        check_arg(eps >= 0.0, "epsilon value", eps)
        check_arg(len(betas) == 2 and all(0.0 <= b < 1.0 for b in betas), "beta parameters", betas)
        check_arg(weight_decay >= 0.0, "weight_decay value", weight_decay)
        defaults = dict(
            lr=lr,
            bias_correction=bias_correction,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
        )
        super().__init__(params, defaults)
        self.adam_w_mode = adam_w_mode
        self.set_grad_none = set_grad_none
        self.capturable = capturable
        self.master_weights = master_weights
        self._no_bias_steps: dict[torch.device, Tensor] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Optimizer pickles only defaults/state/param_groups; keep the Apex-level flags too.
        flags = ("adam_w_mode", "set_grad_none", "capturable", "master_weights")
        return {**super().__getstate__(), **{k: getattr(self, k) for k in flags}, "_no_bias_steps": {}}

    def _init_group(self, group: dict[str, Any]) -> dict[tuple[torch.device, torch.dtype], _Bucket]:
        buckets: dict[tuple[torch.device, torch.dtype], _Bucket] = defaultdict(_Bucket)
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("FusedAdam does not support sparse gradients")
            state = self.state[p]
            use_master = self.master_weights and p.dtype in HALF
            if len(state) == 0:
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                if use_master:
                    state["master_param"] = p.detach().float()
                buffer_like = state.get("master_param", p)
                state["exp_avg"] = torch.zeros_like(buffer_like, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(buffer_like, memory_format=torch.preserve_format)
            elif use_master and "master_param" not in state:  # loaded from a state without master weights
                state["master_param"] = p.detach().float()
            # Adam is element-wise: an FSDP2 (DTensor) param steps on this rank's shards alone, while its
            # state, built by zeros_like, stays a DTensor laid out like the param for checkpoints.
            target = local(state["master_param"] if use_master else p)
            bucket = buckets[(p.device, target.dtype)]
            bucket.params.append(target)
            bucket.grads.append(local(p.grad).to(target.dtype))
            bucket.exp_avgs.append(local(state["exp_avg"]))
            bucket.exp_avg_sqs.append(local(state["exp_avg_sq"]))
            bucket.steps.append(state["step"])
            if use_master:
                bucket.model_params.append(local(p))
        return buckets

    def _no_bias_step(self, device: torch.device) -> Tensor:
        if device not in self._no_bias_steps:
            self._no_bias_steps[device] = torch.tensor(_NO_BIAS_CORRECTION_STEP, device=device)
        return self._no_bias_steps[device]

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = closure_loss(closure)
        for group in self.param_groups:
            for (device, _), bucket in self._init_group(group).items():
                adam_multi_tensor_(
                    bucket,
                    lr=group["lr"],
                    betas=group["betas"],
                    eps=group["eps"],
                    weight_decay=group["weight_decay"],
                    adam_w_mode=self.adam_w_mode,
                    bias_correction=group["bias_correction"],
                    no_bias_step=self._no_bias_step(device),
                )
        return loss

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """Reset gradients; ``set_to_none`` defaults to the constructor's ``set_grad_none``."""
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a dict from :meth:`state_dict`, or one in Apex's layout (``step`` per param group)."""
        state_dict = _per_param_steps(state_dict)
        super().load_state_dict(state_dict)
        restore_saved_dtypes(self, state_dict)
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state.get(p, {})
                moment_dtype = torch.float32 if self.master_weights and p.dtype in HALF else p.dtype
                for key in ("exp_avg", "exp_avg_sq"):  # Apex keeps fp32 moments; the kernel needs one dtype
                    if key in state and state[key].dtype != moment_dtype:
                        state[key] = state[key].to(moment_dtype)


def _per_param_steps(state_dict: dict[str, Any]) -> dict[str, Any]:
    """Apex's layout (``step`` in each param group, none per param) as this optimizer's; else as it is."""
    groups = state_dict["param_groups"]
    if not any("step" in g for g in groups):
        return state_dict
    state = {key: dict(value) for key, value in state_dict["state"].items()}
    for group in groups:
        step = group.get("step", 0)
        step = step.detach().float().cpu() if isinstance(step, Tensor) else torch.tensor(float(step))
        for index in group["params"]:
            if index in state and "step" not in state[index]:
                state[index]["step"] = step.clone().reshape(())
    return {"state": state, "param_groups": [{k: v for k, v in g.items() if k != "step"} for g in groups]}

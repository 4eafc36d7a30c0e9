"""CAME: Confidence-guided Adaptive Memory Efficient Optimization (Luo et al., ACL 2023)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

_HALF_DTYPES = (torch.float16, torch.bfloat16)


def _rms(tensor: Tensor) -> Tensor:
    return torch.linalg.vector_norm(tensor) / (tensor.numel() ** 0.5)


def _factored_rsqrt(row: Tensor, col: Tensor) -> tuple[Tensor, Tensor]:
    """Row and column factors whose outer product is rsqrt of the factored second moment."""
    row_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
    return row_factor, col.rsqrt().unsqueeze(-2)


def came_update_(
    param: Tensor,
    grad: Tensor,
    exp_avg: Tensor,
    state: dict[str, Any],
    *,
    lr: float,
    betas: tuple[float, float, float],
    eps: tuple[float, float],
    clip_threshold: float,
    weight_decay: float,
    out: Tensor | None = None,
) -> None:
    """One CAME step for one parameter; updates ``param``, ``exp_avg`` and ``state`` in place.

    ``grad`` and ``exp_avg`` are fp32 (``exp_avg`` may be a dequantized copy owned by the caller).
    ``out``, an fp32 buffer shaped like ``grad``, holds a factored param's update instead of a
    fresh allocation; its content afterwards is undefined.
    """
    beta1, beta2, beta3 = betas
    eps1, eps2 = eps

    # Clipping divides by a 0-d tensor (no host synchronisation).
    if grad.ndim >= 2:
        # One full-size buffer serves in turn as G^2, the update, the instability and the step.
        grad_sq = torch.mul(grad, grad, out=out)
        row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
        row.mul_(beta2).add_(grad_sq.mean(dim=-1).add_(eps1), alpha=1.0 - beta2)
        col.mul_(beta2).add_(grad_sq.mean(dim=-2).add_(eps1), alpha=1.0 - beta2)
        row_factor, col_factor = _factored_rsqrt(row, col)
        # RMS(u) of u = G * r * c without materialising u: mean(r^2 * (G^2 @ c^2)). It only sets
        # the clipping scale, so TF32 matmul precision on GPUs is harmless here.
        mean_sq = (grad_sq @ col_factor.square().mT).mul_(row_factor.square()).sum() / grad.numel()
        row_factor.div_((mean_sq.sqrt() / clip_threshold).clamp_(min=1.0))
        update = torch.mul(grad, row_factor, out=grad_sq).mul_(col_factor)
    else:
        exp_avg_sq = state["exp_avg_sq"]
        exp_avg_sq.mul_(beta2).add_(grad.square().add_(eps1), alpha=1.0 - beta2)
        update = exp_avg_sq.rsqrt().mul_(grad)
        update.div_((_rms(update) / clip_threshold).clamp_(min=1.0))

    exp_avg.lerp_(update, 1.0 - beta1)

    # Half-precision params are updated through an fp32 copy and rounded once.
    target = param.float() if param.dtype in _HALF_DTYPES else param
    state["RMS"] = _rms(target)
    if weight_decay != 0:
        target.add_(target, alpha=-weight_decay * lr)

    if grad.ndim >= 2:
        residual = update.sub_(exp_avg).square_()
        res_row, res_col = state["exp_avg_res_row"], state["exp_avg_res_col"]
        res_row.mul_(beta3).add_(residual.mean(dim=-1).add_(eps2), alpha=1.0 - beta3)
        res_col.mul_(beta3).add_(residual.mean(dim=-2).add_(eps2), alpha=1.0 - beta3)
        row_factor, col_factor = _factored_rsqrt(res_row, res_col)
        # p -= lr * (m * r * c), the column factor applied on the fly.
        target.addcmul_(torch.mul(exp_avg, row_factor, out=residual), col_factor, value=-lr)
    else:
        target.add_(exp_avg, alpha=-lr)
    if target is not param:
        param.copy_(target)


def load_state_dict_keeping_dtypes(optimizer: Optimizer, state_dict: dict[str, Any]) -> None:
    """Undo ``Optimizer.load_state_dict``'s cast of every floating state tensor to the param dtype.

    fp32 statistics (and integer codes) kept for bf16/fp16 params must come back exactly as saved.
    """
    saved_ids = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
    params = chain.from_iterable(g["params"] for g in optimizer.param_groups)
    for saved_id, param in zip(saved_ids, params, strict=True):
        for key, value in state_dict["state"].get(saved_id, {}).items():
            if isinstance(value, Tensor):
                optimizer.state[param][key] = value.to(device=param.device)


class CAME(Optimizer):
    r"""CAME optimizer, matching the authors' ``came-pytorch`` implementation.

    For a gradient :math:`G` (fp32) and :math:`Q = G^2 + \epsilon_1`:

    * factored params (``ndim >= 2``, over the last two dims):
      :math:`r \leftarrow \beta_2 r + (1-\beta_2)\,\mathrm{mean}_{-1}(Q)`,
      :math:`c \leftarrow \beta_2 c + (1-\beta_2)\,\mathrm{mean}_{-2}(Q)`,
      :math:`u = G \cdot \mathrm{rsqrt}(r / \mathrm{mean}(r)) \otimes \mathrm{rsqrt}(c)`;
      1-D params: :math:`v \leftarrow \beta_2 v + (1-\beta_2) Q`, :math:`u = G / \sqrt{v}`
    * :math:`u \leftarrow u / \max(1, \mathrm{RMS}(u) / d)` with ``d = clip_threshold``
    * :math:`m \leftarrow \beta_1 m + (1-\beta_1) u`
    * factored params: instability :math:`U = (u - m)^2 + \epsilon_2`, its row/column means
      EMA'd with :math:`\beta_3` into :math:`R, C`, and the step
      :math:`s = m \cdot \mathrm{rsqrt}(R / \mathrm{mean}(R)) \otimes \mathrm{rsqrt}(C)`;
      1-D params: :math:`s = m`
    * :math:`p \leftarrow p - \eta\lambda p`, then :math:`p \leftarrow p - \eta s`

    There is no bias correction: with zero-initialised statistics the first factored steps are
    about 10x ``lr`` in size, so use a learning-rate warmup. ``state["RMS"]`` holds the RMS of
    the weights before the step, for monitoring. Statistics are fp32 for any param dtype;
    fp16/bf16 params are updated through an fp32 copy.

    Args:
        params: parameters or param groups.
        lr: learning rate.
        eps: (eps1, eps2) regularising the squared gradient and the instability.
        clip_threshold: RMS threshold of the update.
        betas: (beta1, beta2, beta3) for the update, squared gradient and instability EMAs.
        weight_decay: decoupled weight decay.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float,
        eps: tuple[float, float] = (1e-30, 1e-16),
        clip_threshold: float = 1.0,
        betas: tuple[float, float, float] = (0.9, 0.999, 0.9999),
        weight_decay: float = 0.0,
    ) -> None:
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if len(eps) != 2 or not all(e > 0.0 for e in eps):
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not clip_threshold > 0.0:
            raise ValueError(f"Invalid clip_threshold value: {clip_threshold}")
        if len(betas) != 3 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Invalid beta parameters: {betas}")
        if not weight_decay >= 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(
            lr=lr,
            eps=tuple(eps),
            clip_threshold=clip_threshold,
            betas=tuple(betas),
            weight_decay=weight_decay,
        )
        super().__init__(params, defaults)

    def _init_state(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        shape = p.shape
        fp32 = dict(dtype=torch.float32, device=p.device)
        state["step"] = 0
        state["RMS"] = torch.zeros((), **fp32)
        if p.ndim >= 2:
            state["exp_avg_sq_row"] = torch.zeros(shape[:-1], **fp32)
            state["exp_avg_sq_col"] = torch.zeros(shape[:-2] + shape[-1:], **fp32)
            state["exp_avg_res_row"] = torch.zeros(shape[:-1], **fp32)
            state["exp_avg_res_col"] = torch.zeros(shape[:-2] + shape[-1:], **fp32)
        else:
            state["exp_avg_sq"] = torch.zeros(shape, **fp32)
        self._init_exp_avg(p, group, state)

    def _init_exp_avg(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        state["exp_avg"] = torch.zeros(p.shape, dtype=torch.float32, device=p.device)

    def _init_group(self, group: dict[str, Any]) -> list[tuple[Tensor, Tensor, dict[str, Any]]]:
        """(param, fp32 grad, state) for each param of ``group`` that has a gradient."""
        work = []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
            state = self.state[p]
            if len(state) == 0:
                self._init_state(p, group, state)
            work.append((p, p.grad.float(), state))
        return work

    def _step_param(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        came_update_(
            p,
            grad,
            state["exp_avg"],
            state,
            lr=group["lr"],
            betas=group["betas"],
            eps=group["eps"],
            clip_threshold=group["clip_threshold"],
            weight_decay=group["weight_decay"],
        )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p, grad, state in self._init_group(group):
                state["step"] += 1
                self._step_param(p, grad, state, group)
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        load_state_dict_keeping_dtypes(self, state_dict)

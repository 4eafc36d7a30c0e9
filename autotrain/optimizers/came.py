"""CAME: Confidence-guided Adaptive Memory Efficient Optimization (Luo et al., ACL 2023)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain
from math import prod
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from autotrain.optimizers import came_fused
from autotrain.optimizers.sharding import Shards, local, shards_of

_HALF_DTYPES = (torch.float16, torch.bfloat16)
# Second-moment and instability statistics, as came_update_ reads them from the state.
_STATISTICS = ("exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_res_row", "exp_avg_res_col", "exp_avg_sq")


def _sum_sq(tensor: Tensor) -> Tensor:
    # A norm, not tensor.square().sum(): no full-size temporary.
    return torch.linalg.vector_norm(tensor).square()


def came_update_(
    param: Tensor,
    grad: Tensor,
    exp_avg: Tensor,
    stats: dict[str, Tensor],
    *,
    lr: float,
    betas: tuple[float, float, float],
    eps: tuple[float, float],
    clip_threshold: float,
    weight_decay: float,
    shards: Shards | None = None,
    out: Tensor | None = None,
) -> Tensor:
    """One CAME step for one parameter; updates ``param``, ``exp_avg`` and ``stats`` in place.

    Returns the RMS of the weights before the step. ``grad`` and ``exp_avg`` are fp32 (``exp_avg``
    may be a dequantized copy owned by the caller); ``stats`` holds the fp32 second-moment and
    instability statistics. When ``shards`` says ``param`` is one dim-0 shard of a larger tensor,
    every tensor here is this rank's shard, and the reductions over the whole tensor are summed over
    the shards (the factored-or-not choice follows the global shape). ``out``, an fp32 buffer
    shaped like ``grad``, holds a factored param's update instead of a fresh allocation; its
    content afterwards is undefined.
    """
    beta1, beta2, beta3 = betas
    eps1, eps2 = eps
    shards = shards or Shards(param.shape)
    numel = prod(shards.shape)
    # Half-precision params are updated through an fp32 copy and rounded once.
    target = param.float() if param.dtype in _HALF_DTYPES else param
    param_sq = _sum_sq(target)
    keep, neg_lr = came_fused.step_scalars(lr, weight_decay, param.device)

    if len(shards.shape) < 2:
        exp_avg_sq = stats["exp_avg_sq"]
        exp_avg_sq.mul_(beta2).add_(grad.square().add_(eps1), alpha=1.0 - beta2)
        update = exp_avg_sq.rsqrt().mul_(grad)
        update_sq, param_sq = shards.all_sum(_sum_sq(update), param_sq)
        # Clipping divides by a 0-d tensor (no host synchronisation).
        update.div_((update_sq.div_(numel).sqrt_() / clip_threshold).clamp_(min=1.0))
        exp_avg.lerp_(update, 1.0 - beta1)
        if keep is not None:
            target.mul_(keep)
        target.add_(exp_avg, alpha=-lr)
    else:
        _factored_update_(target, grad, exp_avg, stats, shards, param_sq, keep, neg_lr, out, betas, eps, clip_threshold)
    if target is not param:
        param.copy_(target)
    return param_sq.div_(numel).sqrt_()


def _factored_update_(
    target: Tensor,
    grad: Tensor,
    exp_avg: Tensor,
    stats: dict[str, Tensor],
    shards: Shards,
    param_sq: Tensor,
    keep: Tensor | None,
    neg_lr: Tensor,
    out: Tensor | None,
    betas: tuple[float, float, float],
    eps: tuple[float, float],
    clip_threshold: float,
) -> None:
    """came_update_ of a factored param: the operations of came_fused's three passes, in their order and
    with their sums (so that on the CPU the compiled step computes this m, and these 8-bit codes, bit for
    bit), in place on one full-size buffer that holds in turn G^2, G^2 / row, the change of m, the
    instability and the step."""
    beta1, beta2, beta3 = betas
    shape = target.shape
    lead = (prod(shape[:-2]), shape[-2], shape[-1])  # factored within each slice of the leading dims
    grad, m = grad.reshape(lead), exp_avg.view(lead)
    buffer = (torch.empty_like(grad) if out is None else out).view(lead)
    row, col = stats["exp_avg_sq_row"].view(lead[:2]), stats["exp_avg_sq_col"].view(lead[0], lead[2])
    res_row, res_col = stats["exp_avg_res_row"].view(lead[:2]), stats["exp_avg_res_col"].view(lead[0], lead[2])

    chunk = came_fused.row_chunk(lead[1], target.device)
    sq = torch.mul(grad, grad, out=buffer)
    came_fused.ema_(row, came_fused.row_sums(sq), lead[2], beta2, eps[0])
    sums = [came_fused.col_sums(sq, chunk), came_fused.row_sums(row, keepdim=True)]
    sums += [came_fused.col_sums(sq.div_(row.unsqueeze(-1)), chunk), param_sq]
    group = dict(betas=betas, eps=eps, clip_threshold=clip_threshold)
    rf, cf, param_sq_total = came_fused.update_factors(sums, row, col, shards, group)
    param_sq.copy_(param_sq_total)

    # step = (G * r * c - m) * (1 - beta1); m <- m + step; instability = (step * beta1 / (1 - beta1))^2
    step = torch.mul(grad, rf, out=buffer).mul_(cf).sub_(m).mul_(1.0 - beta1)
    m.add_(step)
    residual = step.mul_(beta1 / (1.0 - beta1))
    residual.mul_(residual)
    came_fused.ema_(res_row, residual.sum(-1), lead[2], beta3, eps[1])
    res_sums = [residual.sum(-2), res_row.sum(-1, keepdim=True)]
    if shards.splits_columns:
        res_sums = shards.all_sum(*res_sums)
    res_rf, res_cf, _, _ = came_fused.factors(res_row, res_col, res_sums, beta3, eps[1], shards)

    target = target.view(lead)
    if keep is not None:
        target.mul_(keep)
    target.add_(torch.mul(m, res_rf, out=buffer).mul_(res_cf).mul_(neg_lr))


def _zeros(shape: torch.Size, like: Tensor) -> Tensor:
    return torch.zeros(shape, dtype=torch.float32, device=like.device)


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

    Under FSDP2 (``fully_shard``) params are DTensors split on dim 0, and each rank steps its own
    shard with the same result as one process stepping the whole tensor: whether a param is
    factored follows its global shape, means divide by global counts, and what spans the shards
    (a matrix's column statistics, the mean of its row statistics, the update RMS, the weight RMS)
    is summed in one all-reduce of a few scalars and at most one row of column sums per reduction
    point, over the param's mesh group. No rank ever holds a whole param. The state is laid out
    like the param (DTensors, split on dim 0; a matrix's column statistics, small, on every rank),
    so ``torch.distributed.checkpoint`` and ``get/set_optimizer_state_dict`` save and load it.

    Compiled step: a matrix's step can run as three fused passes over it (``came_fused``) instead of
    the eager step's dozen, with no full-size temporaries, each pass compiled by ``torch.compile``
    once per shape and dtype (C++ on CPU, Triton on CUDA). The all-reduces of a sharded param stay
    outside the compiled code. ``compile=None`` (auto) compiles matrices of at least 2**20 elements
    on the CPU, where the time saved soon outweighs a few seconds of compilation per shape, and none
    on a GPU: there a model's step is bound by the host launching kernels, and the three compiled
    passes plus the small math between them launch more than the eager step does (on an H200, a
    0.83B-parameter Llama: 251 ms compiled against 158 ms eager). ``True`` compiles every matrix,
    ``False`` none; 1-D params always take the eager step. If compiling fails, one
    line on stderr says so and the eager step runs. On the CPU the two paths compute the same first
    moment bit for bit (CAME8Bit: the same codes) and parameters within a few fp32 roundings (under
    1e-7 relative after 100 steps); on CUDA they agree up to rounding.

    Args:
        params: parameters or param groups.
        lr: learning rate.
        eps: (eps1, eps2) regularising the squared gradient and the instability.
        clip_threshold: RMS threshold of the update.
        betas: (beta1, beta2, beta3) for the update, squared gradient and instability EMAs.
        weight_decay: decoupled weight decay.
        compile: compile the step of matrices (None: those of at least 2**20 elements, on the CPU).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float,
        eps: tuple[float, float] = (1e-30, 1e-16),
        clip_threshold: float = 1.0,
        betas: tuple[float, float, float] = (0.9, 0.999, 0.9999),
        weight_decay: float = 0.0,
        compile: bool | None = None,
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
        if compile not in (None, True, False):
            raise ValueError(f"Invalid compile value: {compile}")
        self.compile = compile
        super().__init__(params, defaults)

    def __getstate__(self) -> dict[str, Any]:
        # Optimizer pickles only defaults/state/param_groups.
        return {**super().__getstate__(), "compile": self.compile}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # load_state_dict() goes through here too, without "compile"
        if not hasattr(self, "compile"):  # pickled before the switch existed
            self.compile = None

    def _init_state(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        # p.shape is global for a DTensor: every rank factors the same params, and the statistics
        # are shards of global-shaped state (see Shards.state), like the param itself.
        shards, shape, local_shape = shards_of(p), p.shape, local(p).shape
        state["step"] = 0
        state["RMS"] = torch.zeros((), dtype=torch.float32, device=p.device)  # global: same on every rank
        if p.ndim >= 2:
            for name in ("exp_avg_sq", "exp_avg_res"):
                state[f"{name}_row"] = shards.state(_zeros(local_shape[:-1], p), shape[:-1])
                # A sharded matrix's columns run through every shard, so each rank keeps all of their
                # (small) statistics; a 3-D+ param is factored within each dim-0 slice.
                col, local_col = shape[:-2] + shape[-1:], local_shape[:-2] + local_shape[-1:]
                state[f"{name}_col"] = shards.state(_zeros(local_col, p), col, sharded=p.ndim > 2)
        else:
            state["exp_avg_sq"] = shards.state(_zeros(local_shape, p), shape)
        self._init_exp_avg(p, group, state)

    def _init_exp_avg(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        state["exp_avg"] = shards_of(p).state(_zeros(local(p).shape, p), p.shape)

    def _init_group(self, group: dict[str, Any]) -> list[tuple[Tensor, Tensor, dict[str, Any]]]:
        """(param, local grad, state) for each param of ``group`` that has a gradient."""
        work = []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
            state = self.state[p]
            if len(state) == 0:
                self._init_state(p, group, state)
            work.append((p, local(p.grad), state))
        return work

    def _compiles(self, p: Tensor) -> bool:
        """Whether ``p`` (global shape) takes the compiled step; the same answer on every rank."""
        if p.ndim < 2 or self.compile is False or came_fused.COMPILER.failure is not None:
            return False
        if self.compile:
            return True
        return p.device.type == "cpu" and p.numel() >= came_fused.AUTO_COMPILE_MIN_NUMEL

    def _fused_update(
        self, p: Tensor, grad: Tensor, moment: tuple[Tensor, ...], state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        """fused_came_update_ on this rank's shards of ``p`` and its state."""
        stats = {k: local(state[k]) for k in _STATISTICS if k in state}
        state["RMS"] = came_fused.fused_came_update_(local(p), grad, stats, moment, group, shards_of(p))

    def _update(
        self, p: Tensor, grad: Tensor, exp_avg: Tensor, state: dict[str, Any], group: dict[str, Any], **kw: Any
    ) -> None:
        """came_update_ on this rank's shards of ``p`` and its state; ``kw`` goes to came_update_."""
        stats = {k: local(state[k]) for k in _STATISTICS if k in state}
        state["RMS"] = came_update_(
            local(p),
            grad,
            exp_avg,
            stats,
            lr=group["lr"],
            betas=group["betas"],
            eps=group["eps"],
            clip_threshold=group["clip_threshold"],
            weight_decay=group["weight_decay"],
            shards=shards_of(p),
            **kw,
        )

    def _step_param(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        if self._compiles(p):
            self._fused_update(p, grad, (local(state["exp_avg"]),), state, group)
        else:
            self._update(p, grad.float(), local(state["exp_avg"]), state, group)

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

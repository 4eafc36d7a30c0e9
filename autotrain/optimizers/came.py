"""CAME: Confidence-guided Adaptive Memory Efficient Optimization (Luo et al., ACL 2023)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from autotrain.optimizers import came_groups, came_math
from autotrain.optimizers.came_compile import Compiler, mode
from autotrain.optimizers.common import HALF, check_arg, closure_loss, restore_saved_dtypes, saved_states
from autotrain.optimizers.sharding import local, shards_of


def _zeros(shape: torch.Size, like: Tensor) -> Tensor:
    return torch.zeros(shape, dtype=torch.float32, device=like.device)


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

    No bias correction: the first factored steps are about 10x ``lr``, so warm the learning rate up. The state
    is fp32 whatever the params' dtype; ``state["RMS"]`` is the weights' RMS after the step, for monitoring. A
    param with a non-finite gradient (or one above ~1.8e19) is left untouched for the step and counted in
    ``skipped_tensors``; the step never synchronises with the host.

    A step: same-shaped params of a param group step together on stacked state, chunk by chunk
    (``came_groups``), through the maths stated once (``came_math``), eagerly or through ``torch.compile``
    (``came_compile``, this optimizer's own compiler). Compiling or a chunk's first compiled step that fails
    gives way to the eager step from the state before it, recorded in ``compile_choices``. Under FSDP2 each
    rank steps its dim-0 shard as one process steps the whole tensor (all-reduces between the phases), and the
    state is laid out like the params (DTensors). Details and figures: docs/came.md.

    Args:
        params: parameters or param groups.
        lr: learning rate.
        eps: (eps1, eps2) regularising the squared gradient and the instability.
        clip_threshold: RMS threshold of the update.
        betas: (beta1, beta2, beta3) for the update, squared gradient and instability EMAs.
        weight_decay: decoupled weight decay.
        compile: None (auto): compile the groups where that pays back within ``total_steps``
            (``came_compile.compiles``), on a thread while their first steps run eagerly (with several
            processes, before the first step, so that replicas take the same steps); True: every group before
            its first step; False: never. 3-D+ params always take the eager step (torch 2.8's compiler
            factors their slices wrong).
        capturable: keep the step free of host synchronisation so that it can be captured in a CUDA graph (it
            always is; this also lets ``lr`` be a tensor, read on the device each step).
        total_steps: the run's length in steps, if known: what auto weighs compiling against.
        master_weights: fp16/bf16 params keep fp32 master weights (``state["master_param"]``, 4 bytes per
            parameter); without them any update below half an ulp of its weight is lost.
    """

    # Settings kept beside ``defaults`` (Optimizer pickles only defaults, state and param groups).
    _FLAGS = {"compile": None, "capturable": False, "total_steps": None, "master_weights": True}

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float | Tensor,
        eps: tuple[float, float] = (1e-30, 1e-16),
        clip_threshold: float = 1.0,
        betas: tuple[float, float, float] = (0.9, 0.999, 0.9999),
        weight_decay: float = 0.0,
        compile: bool | None = None,
        capturable: bool = False,
        total_steps: int | None = None,
        master_weights: bool = True,
    ) -> None:
        check_arg(lr >= 0.0, "learning rate", lr)
        check_arg(len(eps) == 2 and all(e > 0.0 for e in eps), "epsilon value", eps)
        check_arg(clip_threshold > 0.0, "clip_threshold value", clip_threshold)
        check_arg(len(betas) == 3 and all(0.0 <= b < 1.0 for b in betas), "beta parameters", betas)
        check_arg(weight_decay >= 0.0, "weight_decay value", weight_decay)
        check_arg(compile in (None, True, False), "compile value", compile)
        steps_ok = total_steps is None or (isinstance(total_steps, int) and total_steps >= 1)
        check_arg(steps_ok, "total_steps value", total_steps)
        defaults = dict(
            lr=lr, eps=tuple(eps), clip_threshold=clip_threshold, betas=tuple(betas), weight_decay=weight_decay
        )
        self.compile = compile
        self.capturable = capturable
        self.total_steps = total_steps
        self.master_weights = master_weights
        super().__init__(params, defaults)
        self._compiler = Compiler()
        self._reset_groups()

    def _reset_groups(self) -> None:
        self._groups: dict[int, tuple[list[int], list[came_groups.Group]]] = {}  # param ids, groups: by param group
        self._hyper: dict[tuple[int, torch.device], tuple[tuple, Tensor]] = {}
        self._skipped: dict[torch.device, Tensor] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), **{key: getattr(self, key) for key in self._FLAGS}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # load_state_dict() goes through here too, without the flags
        for key, default in self._FLAGS.items():
            self.__dict__.setdefault(key, default)  # or pickled before the flag existed
        self.__dict__.setdefault("_compiler", Compiler())  # an unpickled optimizer (load_state_dict keeps its own)
        self._reset_groups()

    @property
    def skipped_tensors(self) -> int:
        """How many (param, step) updates were skipped for a non-finite gradient (reading it synchronises)."""
        return int(sum(int(count) for count in self._skipped.values()))

    @property
    def compile_choices(self) -> list[dict[str, Any]]:
        """Where compiling failed (then every step is eager), one record: the group's local ``shape``, its
        ``params``, ``kept`` ("eager") and the ``failure``; [] otherwise (what the run records)."""
        return [] if self._compiler.failure is None else [self._compiler.failure]

    def _compiler_for(self, group: came_groups.Group, hp: Tensor, skipped: Tensor) -> Compiler | None:
        """The compiler that steps ``group`` now, or None: the eager step (see ``compile``)."""
        numel = sum(p.numel() for p in group.params)
        kind = mode(self.compile, group.params[0].device.type, numel, self.total_steps, self.capturable)
        if kind == "eager" or group.slices > 1 or self._compiler.failure is not None:
            return None
        if kind == "background" and not came_groups.warm_up(group, hp, skipped, self._compiler):
            return None
        return self._compiler

    def _moment_keys(self, p: Tensor) -> tuple[str, ...]:
        """The state keys of ``p``'s first moment (CAME8Bit: 8-bit codes for large matrices)."""
        return ("exp_avg",)

    def _init_state(self, p: Tensor, state: dict[str, Any]) -> None:
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
        self._init_exp_avg(p, state)

    def _init_exp_avg(self, p: Tensor, state: dict[str, Any]) -> None:
        state["exp_avg"] = shards_of(p).state(_zeros(local(p).shape, p), p.shape)

    def _active(self, group: dict[str, Any]) -> list[Tensor]:
        """The params of ``group`` that have a gradient and elements, their state initialised."""
        active = []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
            state = self.state[p]
            if not state:
                self._init_state(p, state)
            if not (self.master_weights and p.dtype in HALF):
                state.pop("master_param", None)
            elif "master_param" not in state:  # new, or loaded from a state without master weights
                state["master_param"] = shards_of(p).state(local(p).detach().float(), p.shape)
            state["step"] += 1
            if p.numel():  # a 0-element param has nothing to step
                active.append(p)
        return active

    def _shape_groups(self, index: int, params: list[Tensor]) -> list[came_groups.Group]:
        """The groups of ``params``, built again when the params or their state changed."""
        ids, cached = self._groups.get(index, ([], []))
        if ids == [id(p) for p in params] and cached and all(g.still_valid(self.state) for g in cached):
            return cached
        groups = came_groups.groups_of(params, self.state, self._moment_keys)
        self._groups[index] = ([id(p) for p in params], groups)
        return groups

    def _hyper_tensor(self, index: int, group: dict[str, Any], device: torch.device) -> Tensor:
        """The group's hyper-parameters as one fp32 tensor on ``device`` (came_math.HP), refilled when
        they change; an ``lr`` tensor is copied on the device every step (capturable)."""
        lr = group["lr"]
        args = (group["betas"], group["eps"], group["clip_threshold"], group["weight_decay"])
        values = came_math.hyper_values(0.0 if isinstance(lr, Tensor) else float(lr), *args)
        cached = self._hyper.get((index, device))
        if cached is None or cached[0] != values:
            hp = cached[1] if cached is not None else torch.empty(len(came_math.HP), device=device)
            hp.copy_(torch.tensor(values, dtype=torch.float32), non_blocking=True)
            self._hyper[(index, device)] = cached = (values, hp)
        if isinstance(lr, Tensor):  # read on the device: a captured step follows it
            cached[1][came_math.LR].copy_(lr)
            cached[1][came_math.DECAY].copy_(1.0 - lr * group["weight_decay"])
        return cached[1]

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = closure_loss(closure)
        scratch = came_groups.Scratch()  # buffers the step's chunks share, freed when it ends
        for index, param_group in enumerate(self.param_groups):
            for group in self._shape_groups(index, self._active(param_group)):
                device = group.params[0].device
                if device not in self._skipped:
                    self._skipped[device] = torch.zeros((), dtype=torch.int64, device=device)
                hp = self._hyper_tensor(index, param_group, device)
                compiler = self._compiler_for(group, hp, self._skipped[device])
                came_groups.step_group(group, hp, self._skipped[device], scratch, compiler)
        self._compiler.start()  # what the step queued compiles while training goes on
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict, refusing one whose first moments another CAME variant (or other blocks) wrote."""
        for p, saved in saved_states(self, state_dict):
            self._check_saved(p, saved)
        super().load_state_dict(state_dict)
        restore_saved_dtypes(self, state_dict)
        self._reset_groups()

    def _check_saved(self, p: Tensor, saved: dict[str, Any]) -> None:
        expected = self._moment_keys(p)
        if saved and not all(key in saved for key in expected):
            writer = "CAME8Bit (8-bit first moment)" if "exp_avg_codes" in saved else "CAME (fp32 first moment)"
            raise ValueError(
                f"This optimizer state was written by {writer} and cannot be loaded into "
                f"{type(self).__name__} with these settings (a {tuple(p.shape)} parameter needs "
                f"{', '.join(expected)}); resume with the optimizer and settings that wrote it"
            )

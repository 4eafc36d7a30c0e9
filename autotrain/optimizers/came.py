"""CAME: Confidence-guided Adaptive Memory Efficient Optimization (Luo et al., ACL 2023)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from autotrain.optimizers import came_auto, came_compile, came_groups, came_math
from autotrain.optimizers.sharding import local, shards_of

# A step gathers a chunk of same-shaped params at a time, of at most an eighth of all params (or half the
# largest one): its scratch memory stays a few such chunks in fp32, and the number of chunks stays within
# the number of groups plus eight whatever the model's depth.
CHUNKS = 8
# On the CPU a step takes chunks of at most 2**17 elements: a matrix larger than that steps alone, in place
# (no copy into a stack and back: 24 bytes per element, nearly an AdamW step's worth of memory traffic),
# and a chunk's several passes find it in cache. Smaller params (norms, biases) still stack. The number of
# calls then follows the model's depth, which costs the CPU tens of microseconds per call; a GPU keeps the
# few large chunks (its launches stay fixed with depth). SmolLM2-135M's list, compiled: 0.18 s a step
# against 0.26 s with chunks of 2**21.
CPU_CHUNK = 1 << 17


HALF = (torch.float16, torch.bfloat16)


def _replicated() -> bool:
    """Whether this process is one of several of a distributed run."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


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
    the weights after the step, for monitoring; the update does not use it (came-pytorch records it
    before its update: its value is ours one step later). Statistics are fp32 for any param dtype.
    fp16/bf16 params keep fp32 master weights (``state["master_param"]``, 4 bytes per parameter), which the
    step updates and then rounds into the params: an update below half a bf16 ulp of a weight (about
    ``|w| / 256``; ``lr=1e-5`` on a weight of 0.01) would otherwise be lost. ``master_weights=False`` rounds
    each step's result into the params instead (no extra memory; such updates are lost).

    Multi-tensor step: params of a param group with the same (local) shape, device and kind step
    together (``came_groups``): their state is stacked, so row and column statistics are batched
    reductions and each group takes a fixed number of operations per step, whatever its size. The
    maths is stated once (``came_math``); the eager step runs it as it is, the compiled step compiled by
    inductor (``came_compile.StepCompiler``: one graph per group shape; hyper-parameters are a tensor input,
    so schedules and per-group settings never recompile, and fp16/bf16 params share the fp32 graphs).
    ``compile=None`` (auto) compiles where that pays back within ``total_steps`` (``came_auto.compiles``):
    groups of at least 2**20 elements on the CPU (larger ones in short runs) and every group on CUDA,
    where each then keeps whichever of the compiled and eager steps measured faster over its next steps
    (``came_auto.Background.choose``, ``compile_choices``; eager on CUDA where ``capturable``), on a
    worker thread while the first steps run eagerly (``came_auto.Background``: a run never waits for
    the compiler). In a run of several processes it compiles before the first step, and the ranks decide
    together (``came_auto.Replicas``), so that every replica takes the same step each time. ``True``
    compiles every group of whole tensors before its first step (which waits for it), ``False`` none.
    If compiling fails, one line on stderr says so and the eager step runs. Compiled and eager steps
    agree up to fp32 rounding (they sum in other orders), which CAME8Bit's codes then carry forward.

    Non-finite gradients: a param whose gradient has a non-finite element, or one above ~1.8e19 (its
    square overflows fp32), is left untouched for the step, weights and state, and counted in
    ``skipped_tensors`` (no host synchronisation in the step; reading the count synchronises).

    Under FSDP2 (``fully_shard``) params are DTensors split on dim 0, and each rank steps its own
    shard with the same result as one process stepping the whole tensor: whether a param is
    factored follows its global shape, means divide by global counts, and what spans the shards
    (a matrix's column statistics, the mean of its row statistics, the update RMS, the weight RMS)
    is summed in all-reduces between the passes, over the param's mesh group, for a whole group of
    shards at once. A shard's compiled step compiles each phase between the all-reduces (``compile=True``,
    or auto in a run of several processes). The state is laid
    out like the param (DTensors, split on dim 0; a matrix's column statistics, small, on every rank),
    so ``torch.distributed.checkpoint`` and ``get/set_optimizer_state_dict`` save and load it.

    Args:
        params: parameters or param groups.
        lr: learning rate.
        eps: (eps1, eps2) regularising the squared gradient and the instability.
        clip_threshold: RMS threshold of the update.
        betas: (beta1, beta2, beta3) for the update, squared gradient and instability EMAs.
        weight_decay: decoupled weight decay.
        compile: compile the step (None: in the background, where compiling pays back within
            ``total_steps``: on the CPU groups of at least 2**20 elements, fewer in short runs; on CUDA every
            group, each kept compiled only where measured faster; see ``came_auto.compiles``).
        capturable: keep the step free of host synchronisation so that it can be captured in a CUDA
            graph (it always is; this also lets ``lr`` be a tensor, read on the device each step).
        total_steps: the run's length in steps, if known: what auto weighs compiling against.
        master_weights: keep fp32 master weights of fp16/bf16 params.
    """

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
        if compile not in (None, True, False):
            raise ValueError(f"Invalid compile value: {compile}")
        if total_steps is not None and not (isinstance(total_steps, int) and total_steps >= 1):
            raise ValueError(f"Invalid total_steps value: {total_steps}")
        defaults = dict(
            lr=lr, eps=tuple(eps), clip_threshold=clip_threshold, betas=tuple(betas), weight_decay=weight_decay
        )
        self.compile = compile
        self.capturable = capturable
        self.total_steps = total_steps
        self.master_weights = master_weights
        super().__init__(params, defaults)
        self._reset_groups()

    def _reset_groups(self) -> None:
        self._groups: dict[int, tuple[list[Tensor], list[came_groups.Group]]] = {}  # by param group
        self._hyper: dict[tuple[int, torch.device], tuple[tuple, Tensor]] = {}
        self._skipped: dict[torch.device, Tensor] = {}
        self._replicas = came_auto.Replicas()  # auto's choice in a run of several processes

    def __getstate__(self) -> dict[str, Any]:
        # Optimizer pickles only defaults/state/param_groups.
        extra = {key: getattr(self, key) for key in ("compile", "capturable", "total_steps", "master_weights")}
        return {**super().__getstate__(), **extra}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # load_state_dict() goes through here too, without "compile"
        self.__dict__.setdefault("compile", None)  # pickled before the switch existed
        self.__dict__.setdefault("capturable", False)
        self.__dict__.setdefault("total_steps", None)
        self.__dict__.setdefault("master_weights", True)
        self._reset_groups()

    @property
    def skipped_tensors(self) -> int:
        """How many (param, step) updates were skipped for a non-finite gradient (reading it synchronises)."""
        return int(sum(int(count) for count in self._skipped.values()))

    # --- state, per parameter ---------------------------------------------------------------------

    @property
    def compile_choices(self) -> list[dict[str, Any]]:
        """Where auto measured the compiled step against the eager one (on CUDA): per group, its local
        ``shape``, ``params``, the median ``eager_ms`` and ``compiled_ms`` of its timed steps and which was
        ``kept``."""
        return [g.choice for _, groups in self._groups.values() for g in groups if g.choice is not None]

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

    # --- the grouped step -------------------------------------------------------------------------

    def _active(self, group: dict[str, Any]) -> list[Tensor]:
        """The params of ``group`` that have a gradient and elements, their state initialised."""
        active = []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
            state = self.state[p]
            if len(state) == 0:
                self._init_state(p, state)
            if self.master_weights and p.dtype in HALF and "master_param" not in state:  # also a loaded state
                state["master_param"] = shards_of(p).state(local(p).detach().to(torch.float32, copy=True), p.shape)
            elif not (self.master_weights and p.dtype in HALF):
                state.pop("master_param", None)
            state["step"] += 1
            if p.numel():  # a 0-element param has nothing to step
                active.append(p)
        return active

    def _shape_groups(self, index: int, params: list[Tensor]) -> list[came_groups.Group]:
        """The groups of ``params``, built again when the params or their state changed."""
        cached = self._groups.get(index)
        if (
            cached is not None
            and len(cached[0]) == len(params)
            and all(p is q for p, q in zip(cached[0], params, strict=True))
            and all(g.still_valid(self.state) for g in cached[1])
        ):
            return cached[1]
        buckets: dict[tuple, list[Tensor]] = {}
        # A chunk steps at most half the largest param or an eighth of them all (see came_groups): the
        # step's scratch stays a few such chunks in fp32, however many params share a shape.
        budget = max(max((p.numel() for p in params), default=0) // 2, sum(p.numel() for p in params) // CHUNKS)
        for p in params:
            moment = self._moment_keys(p)
            key = (local(p).shape, p.shape, p.device, moment, id(shards_of(p).group), "master_param" in self.state[p])
            key += tuple(local(self.state[p][k]).shape for k in moment)
            buckets.setdefault(key, []).append(p)
        groups = [
            came_groups.build(ps, self.state, self._moment_keys(ps[0]), self._budget(ps[0], budget))
            for ps in buckets.values()
        ]
        self._groups[index] = (params, groups)
        return groups

    @staticmethod
    def _budget(p: Tensor, budget: int) -> int:
        """The most elements a chunk of ``p``'s group steps at once: at most ``CPU_CHUNK`` on the CPU (see
        there), ``budget`` elsewhere."""
        return min(budget, CPU_CHUNK) if p.device.type == "cpu" else budget

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

    def _compiles(self, group: came_groups.Group) -> bool:
        """Whether ``group`` takes the compiled step; the same answer on every rank."""
        # (Not whether compiling failed, which could differ between ranks: a failed compiler runs the eager
        # step in its place, and Replicas votes for the eager step on every rank.)
        if self.compile is False:
            return False
        if group.shards.group is not None and self.compile is None and not _replicated():
            # Auto compiles shards on the training thread only (Replicas): the worker traces fakes, and a
            # shard's phases have all-reduces between them.
            return False
        if self.compile:
            return True
        device = group.params[0].device.type
        if device == "cuda" and self.capturable:
            return False
        # Where compiling would pay back within the run (on CUDA then measured against the eager step:
        # Background, Replicas).
        return came_auto.compiles(device, sum(p.numel() for p in group.params), self.total_steps)

    def _step_group(self, group: came_groups.Group, hp: Tensor, skipped: Tensor, scratch: came_groups.Scratch):
        """One step of ``group``: eager, compiled (``compile=True``: from the first step, which waits for the
        compiler) or, where auto compiles it, eager until a worker thread has compiled it (see
        ``came_auto.Background``): a run never waits for the compiler. Except in a run of several
        processes: there auto compiles before the first step, and every process takes the same step each
        time (``came_auto.Replicas``: a worker done sooner on one of them would switch it to the compiled
        step, whose rounding differs, steps before the others, and data-parallel replicas would drift apart)."""
        if not self._compiles(group):
            came_groups.step_group(group, hp, skipped, None, scratch)
        elif self.compile:
            came_groups.step_group(group, hp, skipped, came_compile.COMPILER, scratch)
        elif _replicated():
            self._replicas.step_group(group, hp, skipped, scratch)
        else:
            came_auto.BACKGROUND.step_group(group, hp, skipped, scratch)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        scratch = came_groups.Scratch()  # buffers the step's chunks share, freed when it ends
        for index, param_group in enumerate(self.param_groups):
            for group in self._shape_groups(index, self._active(param_group)):
                device = group.params[0].device
                hp = self._hyper_tensor(index, param_group, device)
                if device not in self._skipped:
                    self._skipped[device] = torch.zeros((), dtype=torch.int64, device=device)
                self._step_group(group, hp, self._skipped[device], scratch)
        came_auto.BACKGROUND.start()
        self._replicas.step_done()
        return loss

    # --- saving and loading -----------------------------------------------------------------------

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict, refusing one whose first moments another CAME variant wrote."""
        self._check_layout(state_dict)
        super().load_state_dict(state_dict)
        load_state_dict_keeping_dtypes(self, state_dict)
        self._reset_groups()

    def _check_layout(self, state_dict: dict[str, Any]) -> None:
        saved_ids = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
        params = chain.from_iterable(g["params"] for g in self.param_groups)
        for saved_id, p in zip(saved_ids, params, strict=False):
            saved = state_dict["state"].get(saved_id, {})
            expected = self._moment_keys(p)
            if saved and not all(key in saved for key in expected):
                writer = "CAME8Bit (8-bit first moment)" if "exp_avg_codes" in saved else "CAME (fp32 first moment)"
                raise ValueError(
                    f"This optimizer state was written by {writer} and cannot be loaded into "
                    f"{type(self).__name__} with these settings (a {tuple(p.shape)} parameter needs "
                    f"{', '.join(expected)}); resume with the optimizer and settings that wrote it"
                )
            self._check_moment_shape(p, saved)

    def _check_moment_shape(self, p: Tensor, saved: dict[str, Any]) -> None:
        """CAME8Bit: the saved codes must have this optimizer's blocks."""

"""A small model trained with the bundled optimizers in one process, or in two CPU processes (gloo) under
FSDP2, for test_fsdp_optimizers.py. The rank functions live in this module, not in the test file, so
the spawned processes import only what they run."""

from __future__ import annotations

import faulthandler
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from autotrain.optimizers import CAME, CAME8Bit, CAME8BitFusedAdam, came_compile
from autotrain.optimizers.sharding import local

STEPS, BATCH = 30, 16
OPTIMIZERS = ("came", "came_8bit", "came_8bit+fused_adam")
# Quantize even these small matrices. With block_size 12 CAME8Bit picks blocks that divide TinyNet's
# rows (8 for the 64-wide, 10 for the 50-wide; the 1-row head keeps 12 and one rank holds it all), so the
# blocks line up with the shard boundaries and one process and two quantize the same elements together;
# blocks that cut rows tile the shards differently from the whole tensor.
ALIGNED_BLOCKS = 12


def make_optimizer(
    name: str, groups: list[dict], block_size: int = ALIGNED_BLOCKS, quantize: bool = True, compile: bool = False
):
    """``name`` with small 8-bit blocks; ``quantize=False``: the same optimizer with an fp32 first moment;
    ``compile``: the compiled step for every matrix (otherwise the eager one: these are small)."""
    came_8bit = dict(block_size=block_size, min_8bit_size=32 if quantize else 10**9, compile=compile)
    if name == "came":
        return CAME(groups, lr=1e-3, weight_decay=0.01, compile=compile)
    if name == "came_8bit":
        return CAME8Bit(groups, lr=1e-3, weight_decay=0.01, **came_8bit)
    return CAME8BitFusedAdam(groups, lr=1e-3, weight_decay=0.01, came=came_8bit, min_factored_size=32)


class TinyNet(nn.Module):
    """Every way dim 0 splits over 2 ranks: evenly (48x64), unevenly (47x48, and the 5x4x3 kernel of a
    3-D param CAME factors per output channel), and not at all (1x47 and its bias: rank 1 gets nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 48)
        self.norm = nn.LayerNorm(48)
        self.conv = nn.Conv1d(4, 5, 3)  # (B, 4, 12) -> (B, 5, 10)
        self.fc2 = nn.Linear(50, 47)
        self.head = nn.Linear(47, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.norm(self.fc1(x)))
        h = torch.tanh(self.conv(h.view(-1, 4, 12)).flatten(1))
        return self.head(torch.tanh(self.fc2(h)))


def build(name: str, seed: int = 0, sharded: bool = False, **kw: Any) -> tuple[nn.Module, torch.optim.Optimizer]:
    """TinyNet (under FSDP2 when ``sharded``) and its optimizer; ``kw`` goes to make_optimizer."""
    torch.manual_seed(seed)
    model = TinyNet()
    if sharded:
        from torch.distributed.fsdp import fully_shard

        for layer in (model.fc1, model.conv, model.fc2, model.head):
            fully_shard(layer)
        fully_shard(model)
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and "norm" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (n.endswith("weight") and "norm" not in n)]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
    return model, make_optimizer(name, groups, **kw)


def batch(step: int, rank: int = 0, world: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s batch, or its ``rank``-th of ``world`` equal slices."""
    gen = torch.Generator().manual_seed(step)
    x = torch.randn(BATCH, 64, generator=gen)
    y = torch.sin(x[:, :8].sum(1, keepdim=True))
    rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    return x[rows], y[rows]


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: range, rank: int = 0, world: int = 1) -> None:
    # A mean loss over each slice, averaged over the ranks by FSDP2: the mean over the whole batch.
    for step in steps:
        x, y = batch(step, rank, world)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def full_params(model: nn.Module) -> dict[str, torch.Tensor]:
    """Whole parameters (all-gathered from the shards, a collective under FSDP2), for comparison."""
    return {n: (p.full_tensor() if p is not local(p) else p).detach().clone() for n, p in model.named_parameters()}


def state_bytes(opt: torch.optim.Optimizer) -> int:
    """Bytes of optimizer state this rank holds (its shards only)."""
    return sum(local(v).nbytes for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor))


def recorded_rms(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, float]:
    """What CAME's ``state["RMS"]`` holds for each param it steps (the same on every rank)."""
    return {n: local(opt.state[p]["RMS"]).item() for n, p in model.named_parameters() if "RMS" in opt.state[p]}


def single_process(name: str, steps: int = STEPS, **kw: Any) -> tuple[dict[str, torch.Tensor], int]:
    model, opt = build(name, **kw)
    train(model, opt, range(steps))
    return full_params(model), state_bytes(opt)


# --- runs in the spawned ranks ------------------------------------------------------------------------


def sharded_run(
    rank: int, world: int, out: Path, name: str, block_size: int = ALIGNED_BLOCKS, compile: bool = False
) -> dict[str, Any]:
    model, opt = build(name, sharded=True, block_size=block_size, compile=compile)
    train(model, opt, range(STEPS), rank, world)
    return {
        "params": full_params(model),
        "state_bytes": state_bytes(opt),
        "rms": recorded_rms(model, opt),
        "graphs": len(came_compile.GRAPHS),  # this rank's, one per (function, layout): compiled, or loaded saved
        "record": opt.compile_choices,
    }


def _checkpoint(model: nn.Module, opt: torch.optim.Optimizer, path: Path, full: bool, save: bool) -> None:
    """Save or load model and optimizer: sharded (torch.distributed.checkpoint), or as full tensors that
    rank 0 writes and broadcasts back (what accelerate's FULL_STATE_DICT does)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import state_dict as dsd

    options = dsd.StateDictOptions(full_state_dict=full, cpu_offload=full)
    if save:
        model_sd, optim_sd = dsd.get_state_dict(model, opt, options=options)
        if not full:
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path))
        elif dist.get_rank() == 0:
            torch.save({"model": model_sd, "optim": optim_sd}, path)
    elif full:
        saved = torch.load(path, weights_only=False) if dist.get_rank() == 0 else {"model": {}, "optim": {}}
        options = dsd.StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        # Separately: set_state_dict skips the model on ranks whose (empty) model state dict it is given.
        dsd.set_model_state_dict(model, saved["model"], options=options)
        dsd.set_optimizer_state_dict(model, opt, saved["optim"], options=options)
    else:
        model_sd, optim_sd = dsd.get_state_dict(model, opt)
        saved = {"model": model_sd, "optim": optim_sd}
        dcp.load(saved, checkpoint_id=str(path))
        dsd.set_state_dict(model, opt, model_state_dict=saved["model"], optim_state_dict=saved["optim"])


def resume_run(rank: int, world: int, out: Path, name: str, full: bool) -> dict[str, Any]:
    half = STEPS // 2
    path = out / ("full.pt" if full else "sharded")
    model, opt = build(name, sharded=True)
    train(model, opt, range(half), rank, world)
    _checkpoint(model, opt, path, full, save=True)
    dist.barrier()
    train(model, opt, range(half, STEPS), rank, world)

    resumed, resumed_opt = build(name, seed=1, sharded=True)  # other weights: the load must replace them
    _checkpoint(resumed, resumed_opt, path, full, save=False)
    dtypes = {
        key: local(value).dtype
        for state in resumed_opt.state.values()
        for key, value in state.items()
        if isinstance(value, torch.Tensor)
    }
    train(resumed, resumed_opt, range(half, STEPS), rank, world)
    return {"params": full_params(model), "resumed": full_params(resumed), "dtypes": dtypes}


def _rank_main(rank: int, world: int, port: int, fn: Callable[..., dict], args: tuple, out: Path) -> None:
    faulthandler.enable(all_threads=True)  # a native crash prints where each thread was
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = fn(rank, world, out, *args)
        torch.save(result, out / f"rank{rank}.pt.part")
        os.replace(out / f"rank{rank}.pt.part", out / f"rank{rank}.pt")
        dist.barrier()  # no rank tears gloo down while another is still in a collective
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn(fn: Callable[..., dict], *args: Any, out: Path, world: int = 2, timeout: float = 240) -> list[dict]:
    """``fn(rank, world, out, *args)`` in ``world`` fresh gloo processes; what each returns, by rank.

    A rank that raises fails the call (the others are terminated); so does running past ``timeout``. A
    rank killed by a signal is given one more run.
    """
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the ranks: 2 cores, 2 processes
    for attempt in (1, 2):
        for rank in range(world):
            (out / f"rank{rank}.pt").unlink(missing_ok=True)
        context = mp.start_processes(_rank_main, args=(world, _free_port(), fn, args, out), nprocs=world, join=False)
        deadline = time.monotonic() + timeout
        try:
            while not context.join(timeout=1.0):
                if time.monotonic() > deadline:
                    for process in context.processes:
                        process.kill()
                    raise TimeoutError(f"{fn.__name__} did not finish in {timeout} s")
            break
        except mp.ProcessExitedException as error:
            # A rank killed by a signal (not one that raised): gloo's native teardown aborts now and then
            # (about one run in a few hundred here, "terminate called without an active exception").
            # Run once more; a second crash, or any Python error, fails the test.
            if error.signal_name is None or attempt == 2:
                raise
            print(f"{fn.__name__}: rank {error.error_index} died by {error.signal_name}; running it again")
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world)]

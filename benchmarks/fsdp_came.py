"""CAME, CAME8Bit and CAME8Bit+FusedAdam under FSDP2 on the CPU: two processes (gloo), each figure against a
baseline measured in the same run.

    python benchmarks/fsdp_came.py [--steps 20] [--rounds 40] [--width 1024] [--compile]

* difference: after ``--steps`` steps, max over params of |p_fsdp - p_one| / |p_one|, where p_one comes
  from one process on the whole batch and p_fsdp from two FSDP2 ranks on half of it each. fp32 CAME
  differs only by summation order; the 8-bit variants also by codes that round the other way, so they
  are shown next to what the 8-bit first moment itself changes (the same run with an fp32 one).
* state per rank: optimizer state bytes each rank holds / the single process's.
* step overhead: a rank's sharded ``step()`` / the same optimizer stepping plain tensors shaped like that
  rank's shards, with the same gradients (the same arithmetic, without the all-reduces and the DTensor
  unwrapping). The two take turns for ``--rounds`` rounds; the figure is the median within-round ratio,
  so load that changes between rounds cancels out. Times are medians, rank 0. The overhead is about
  the all-reduces per step times the latency of one (a few scalars, measured in the same run): on a
  busy CPU that latency is scheduling, not bandwidth.
* ``--compile``, a second table: a rank's sharded step with ``compile=True`` (each phase between the
  all-reduces a compiled graph) against the same sharded step eager (``compile=False``), on two more
  sharded models with the same gradients, taking turns as above; the launch-like operations of one
  sharded step of each (counted as ``came_ops.py`` counts them: ATen operations that are not views or
  allocations, plus each compiled-region call and its kernels), and the first compiled step's seconds.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from _common import print_table  # noqa: E402

from autotrain.optimizers import CAME, CAME8Bit, CAME8BitFusedAdam  # noqa: E402
from autotrain.optimizers.sharding import local  # noqa: E402

OPTIMIZERS = ("came", "came_8bit", "came_8bit+fused_adam")
BATCH = 64


def make_optimizer(name: str, params, quantize: bool = True, compile: bool | None = None) -> torch.optim.Optimizer:
    """``name`` with its defaults; ``quantize=False``: the same optimizer with an fp32 first moment;
    ``compile``: CAME's ``compile`` (None: auto)."""
    came_8bit = {"compile": compile} if quantize else {"min_8bit_size": 2**62, "compile": compile}
    if name == "came":
        return CAME(params, lr=1e-4, weight_decay=0.01, compile=compile)
    if name == "came_8bit":
        return CAME8Bit(params, lr=1e-4, weight_decay=0.01, **came_8bit)
    return CAME8BitFusedAdam(params, lr=1e-4, weight_decay=0.01, came=came_8bit)


def build_model(width: int, sharded: bool = False) -> nn.Module:
    """An MLP block: matrices dominate; one has an odd number of rows (uneven shards), plus a LayerNorm."""
    torch.manual_seed(0)
    layers = [nn.Linear(width // 2, width), nn.LayerNorm(width), nn.Linear(width, width - 1), nn.Tanh()]
    model = nn.Sequential(*layers, nn.Linear(width - 1, width // 2))
    if sharded:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    return model


def backward(model: nn.Module, step: int, width: int, rank: int = 0, world: int = 1) -> None:
    gen = torch.Generator().manual_seed(step)
    x = torch.randn(BATCH, width // 2, generator=gen)
    rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    nn.functional.mse_loss(model(x[rows]), torch.sin(x[rows])).backward()


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int, width: int, rank: int = 0, world: int = 1):
    for step in range(steps):
        opt.zero_grad()
        backward(model, step, width, rank, world)
        opt.step()


def state_bytes(opt: torch.optim.Optimizer) -> int:
    return sum(local(v).nbytes for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor))


def step_times(opt: torch.optim.Optimizer, twin: torch.optim.Optimizer, rounds: int) -> tuple[float, float, float]:
    """Median step seconds of ``opt`` and ``twin``, and the median within-round ratio, both ranks in step."""
    for _ in range(2):  # warmup
        opt.step()
        twin.step()
    sharded, plain, ratios = [], [], []
    for r in range(rounds):
        times = {}
        for which in ("opt", "twin") if r % 2 == 0 else ("twin", "opt"):
            dist.barrier()  # both ranks start together, so one does not time waiting for the other
            start = time.perf_counter()
            (opt if which == "opt" else twin).step()
            times[which] = time.perf_counter() - start
        sharded.append(times["opt"])
        plain.append(times["twin"])
        ratios.append(times["opt"] / times["twin"])
    return statistics.median(sharded), statistics.median(plain), statistics.median(ratios)


def collectives(opt: torch.optim.Optimizer) -> dict[str, float]:
    """All-reduces in one step (count, bytes), and the median time of one that carries a few scalars."""
    calls = []
    all_reduce = dist.all_reduce

    def counting(tensor, *args, **kwargs):
        calls.append(tensor.nbytes)
        return all_reduce(tensor, *args, **kwargs)

    dist.all_reduce = counting
    try:
        opt.step()
    finally:
        dist.all_reduce = all_reduce
    scalars, times = torch.zeros(3), []
    for _ in range(100):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(scalars)
        times.append(time.perf_counter() - start)
    return {"all_reduces": len(calls), "all_reduce_bytes": sum(calls), "latency": statistics.median(times)}


def rank_main(rank: int, world: int, port: int, name: str, args: argparse.Namespace, out: Path) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = build_model(args.width, sharded=True)
    opt = make_optimizer(name, model.parameters())
    train(model, opt, args.steps, args.width, rank, world)
    params = [p.full_tensor() for p in model.parameters()]
    # The twin: plain tensors shaped like this rank's shards, holding the same gradients.
    opt.zero_grad()
    backward(model, args.steps, args.width, rank, world)
    twins = [nn.Parameter(local(p).detach().clone()) for p in model.parameters()]
    for twin, p in zip(twins, model.parameters(), strict=True):
        twin.grad = local(p.grad).clone()
    timing = step_times(opt, make_optimizer(name, twins), args.rounds)
    result = {"params": params, "state_bytes": state_bytes(opt), "timing": timing, **collectives(opt)}
    if args.compile:
        result["compiled"] = compiled_against_eager(name, args, rank, world)
    torch.save(result, out / f"rank{rank}.pt")
    dist.destroy_process_group()


def compiled_against_eager(name: str, args: argparse.Namespace, rank: int, world: int) -> dict:
    """The sharded step compiled against the same sharded step eager (see the module's docstring)."""
    from came_ops import profile_step

    opts = {}
    for kind, flag in (("compiled", True), ("eager", False)):
        model = build_model(args.width, sharded=True)
        opts[kind] = make_optimizer(name, model.parameters(), compile=flag)
        backward(model, 0, args.width, rank, world)
    dist.barrier()
    start = time.perf_counter()
    opts["compiled"].step()  # compiles each phase's graphs
    first = time.perf_counter() - start
    ops = {kind: profile_step(opt)[0] for kind, opt in opts.items()}
    return {"timing": step_times(opts["compiled"], opts["eager"], args.rounds), "ops": ops, "first_s": first}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_sharded(name: str, args: argparse.Namespace, world: int = 2, timeout: float = 900) -> list[dict]:
    os.environ["OMP_NUM_THREADS"] = "1"
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        context = mp.start_processes(rank_main, args=(world, free_port(), name, args, out), nprocs=world, join=False)
        deadline = time.monotonic() + timeout
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                raise SystemExit(f"{name}: the ranks did not finish in {timeout} s")
        return [torch.load(out / f"rank{rank}.pt") for rank in range(world)]


def single_process(name: str, args: argparse.Namespace, quantize: bool = True) -> tuple[list[torch.Tensor], int]:
    """Parameters after training in one process on the whole batch, and the optimizer's state bytes."""
    model = build_model(args.width)
    opt = make_optimizer(name, model.parameters(), quantize)
    train(model, opt, args.steps, args.width)
    return [p.detach() for p in model.parameters()], state_bytes(opt)


def relative_difference(got: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    return max(((q - p).norm() / p.norm()).item() for p, q in zip(expected, got, strict=True))


def figures(name: str, args: argparse.Namespace, compiled_rows: list) -> tuple[str, ...]:
    expected, single_bytes = single_process(name, args)
    # What the 8-bit first moment itself changes in one process: the scale of the rounding noise.
    noise = relative_difference(single_process(name, args, quantize=False)[0], expected) if "8bit" in name else 0
    ranks = run_sharded(name, args)
    sharded_s, plain_s, ratio = ranks[0]["timing"]
    if "compiled" in ranks[0]:
        compiled = ranks[0]["compiled"]
        compiled_s, eager_s, speed = compiled["timing"]
        compiled_rows.append(
            (
                name,
                f"{compiled_s * 1e3:.2f} / {eager_s * 1e3:.2f}",
                f"{speed:.3f}",
                f"{compiled['ops']['compiled']} / {compiled['ops']['eager']}",
                f"{compiled['first_s']:.1f}",
            )
        )
    return (
        name,
        f"{relative_difference(ranks[0]['params'], expected):.1e}",
        f"{noise:.1e}" if noise else "-",
        " / ".join(f"{r['state_bytes'] / single_bytes:.3f}" for r in ranks),
        f"{ranks[0]['all_reduces']} ({ranks[0]['all_reduce_bytes'] / 1024:.1f} KiB)",
        f"{sharded_s * 1e3:.2f} / {plain_s * 1e3:.2f}",
        f"{ratio:.3f}",
        f"{ranks[0]['latency'] * 1e6:.0f}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--compile", action="store_true", help="also the compiled sharded step against the eager one")
    args = parser.parse_args()
    torch.set_num_threads(1)
    compiled_rows: list[tuple[str, ...]] = []
    rows = [figures(name, args, compiled_rows) for name in OPTIMIZERS]
    n_params = sum(p.numel() for p in build_model(args.width).parameters())
    print(f"{n_params / 1e6:.1f}M params, {args.steps} steps, 2 CPU processes (gloo), 1 thread each\n")
    header = ["optimizer", "FSDP2 vs one process", "8-bit vs fp32 m, one process", "state per rank / one process"]
    header += ["all-reduces/step", "step ms: sharded / plain shards", "sharded / plain", "all-reduce latency us"]
    print_table(rows, header=header)
    if compiled_rows:
        print("\nThe sharded step compiled (compile=True) against eager (compile=False), rank 0:\n")
        header = ["optimizer", "step ms: compiled / eager", "compiled / eager", "ops per step: compiled / eager"]
        print_table(compiled_rows, header=header + ["first compiled step s"])


if __name__ == "__main__":
    main()

"""Operations one optimizer step dispatches, counted with torch's profiler, on SmolLM2-135M's parameter list.

    python benchmarks/came_ops.py [--layers 30 60] [--modes eager compiled auto adamw_foreach] [--chunks gpu cpu]

SmolLM2-135M's parameters are built from their shapes alone (random values): hidden 576, MLP 1536,
9 query and 3 key/value heads of 64, a 49152-token embedding tied to the head, 30 layers: 272 tensors
of 6 distinct shapes. ``--layers 60`` doubles the decoder (542 tensors, the same 6 shapes).

How an operation is counted, over one profiled ``step()`` after two warm-up steps (single thread):

* an ATen operation called by the step itself (not by another ATen operation), unless it only makes a
  view or allocates (``VIEW_OR_ALLOC``): what would launch a kernel on a GPU. A ``_foreach_*`` operation
  counts once, as on a GPU it launches one multi-tensor kernel per few dozen tensors;
* ``aten::item`` / ``aten::_local_scalar_dense`` are not counted but reported on their own (torch's
  AdamW reads its CPU step counters with them: free on a GPU; a read of a GPU tensor would be a sync);
* a call into a compiled region (``Torch-Compiled Region``; ``CAME compiled step`` for the graphs of the
  code before CAME compiled through ``torch.compile``) counts once, plus one per kernel inductor
  generated inside it (``cpp_fused_*`` on the CPU, with inductor's kernel profiling on) and per ATen
  operation the compiled code calls (its extern kernels and fallbacks), views and allocations aside.

The counts are deterministic (no timing): what the same code dispatches on any machine, up to the
kernels inductor chooses to generate. Also printed: the counts per distinct shape.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from autotrain.optimizers.came_groups import CPU_CHUNK  # noqa: E402

COMPILED_REGIONS = ("Torch-Compiled Region", "CAME compiled step")

VIEW_OR_ALLOC = {
    "aten::view",
    "aten::reshape",
    "aten::_reshape_alias",
    "aten::_unsafe_view",
    "aten::select",
    "aten::slice",
    "aten::narrow",
    "aten::unbind",
    "aten::split",
    "aten::split_with_sizes",
    "aten::chunk",
    "aten::as_strided",
    "aten::expand",
    "aten::expand_as",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::flatten",
    "aten::unflatten",
    "aten::t",
    "aten::transpose",
    "aten::permute",
    "aten::detach",
    "aten::detach_",
    "aten::alias",
    "aten::view_as",
    "aten::lift_fresh",
    "aten::resolve_conj",
    "aten::resolve_neg",
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::_local_scalar_dense_placeholder",
}
SYNCS = {"aten::item", "aten::_local_scalar_dense"}


def smollm2_shapes(layers: int = 30) -> list[tuple[int, ...]]:
    """SmolLM2-135M's parameter shapes, in named_parameters() order (tied embedding: listed once)."""
    hidden, mlp, kv = 576, 1536, 3 * 64
    layer = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden)]  # q, k, v, o
    layer += [(mlp, hidden), (mlp, hidden), (hidden, mlp), (hidden,), (hidden,)]  # gate, up, down, 2 norms
    return [(49152, hidden), *(layer * layers), (hidden,)]


def make_params(shapes: list[tuple[int, ...]], seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    params = []
    for shape in shapes:
        p = torch.nn.Parameter(torch.randn(shape, generator=gen) * 0.02)
        p.grad = torch.randn(shape, generator=gen) * 1e-3
        params.append(p)
    return params


def build(mode: str, params: list[torch.nn.Parameter], cls_name: str = "CAME8Bit") -> torch.optim.Optimizer:
    if mode == "adamw_foreach":
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    import autotrain.optimizers as optimizers

    cls = getattr(optimizers, cls_name)
    compile_flag = {"eager": False, "compiled": True, "auto": None}[mode]
    return cls(params, lr=1e-4, weight_decay=0.1, compile=compile_flag)


def warm_up_done() -> None:
    """Wait until ``compile: null``'s compiling thread has ended (what it had queued is compiled)."""
    import threading

    for thread in threading.enumerate():
        if thread.name == "came-compile":
            thread.join()


def _children(event) -> list:
    return list(event.cpu_children)


def _count_compiled(region) -> int:
    """The region call, the kernels inductor generated in it and the ATen operations its code calls."""
    count = 1
    stack = _children(region)
    while stack:
        event = stack.pop()
        name = event.name
        if "cpp_fused" in name or name.startswith(("triton_", "graph_")):
            count += 1
        elif name.startswith("aten::"):
            count += name not in VIEW_OR_ALLOC
        else:
            stack.extend(_children(event))
    return count


def count_ops(events) -> tuple[int, Counter]:
    """Launch-like operations among ``events`` (a profile's top-level events), and their names."""
    names: Counter = Counter()
    total = 0
    for event in events:
        name = event.name
        if name.startswith(COMPILED_REGIONS):
            n = _count_compiled(event)
            names["<compiled region + kernels>"] += n
            total += n
        elif name.startswith("aten::"):
            if name not in VIEW_OR_ALLOC and name not in SYNCS:  # syncs: reported on their own
                names[name] += 1
                total += 1
        else:  # record_function wrappers (Optimizer.step#..., cache lookups): look inside
            sub_total, sub_names = count_ops(_children(event))
            total += sub_total
            names.update(sub_names)
    return total, names


def profile_step(opt: torch.optim.Optimizer) -> tuple[int, Counter, int]:
    """(launch-like ops, their names, host synchronisations) of one step of ``opt``."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        opt.step()
    roots = [e for e in prof.events() if e.cpu_parent is None]
    total, names = count_ops(roots)
    syncs = sum(1 for e in prof.events() if e.name in SYNCS)
    return total, names, syncs


def ops_per_step(mode: str, layers: int, cls_name: str = "CAME8Bit", chunks: str = "gpu") -> tuple[int, Counter, int]:
    from autotrain.optimizers import came_groups

    # On the CPU a step takes chunks of at most came_groups.CPU_CHUNK elements (faster there), so their number
    # follows the depth; "gpu" counts with the chunks a GPU steps (what it would launch), on the CPU.
    came_groups.CPU_CHUNK = (1 << 62) if chunks == "gpu" else CPU_CHUNK
    params = make_params(smollm2_shapes(layers))
    opt = build(mode, params, cls_name)
    opt.step()
    if mode == "auto":  # auto compiles on a thread while the first steps run eagerly: count once it has
        warm_up_done()
        opt.step()  # (the step that finds the graphs ready)
    opt.step()
    return profile_step(opt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="+", default=[30, 60])
    parser.add_argument("--modes", nargs="+", default=["eager", "compiled", "auto", "adamw_foreach"])
    parser.add_argument("--chunks", nargs="+", default=["gpu", "cpu"], choices=["gpu", "cpu"])
    parser.add_argument("--optimizer", default="CAME8Bit", choices=["CAME8Bit", "CAME"])
    parser.add_argument("--verbose", action="store_true", help="also list the operations by name")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch._inductor.config.cpp.enable_kernel_profile = True  # kernels show in the profile by name
    shapes = len(set(smollm2_shapes(30)))
    print(f"torch={torch.__version__}; ops per step() on SmolLM2-135M's parameter list ({shapes} distinct shapes)")
    print("| optimizer | mode | chunks | layers | tensors | ops per step | per distinct shape | host syncs |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in args.modes:
        name = "AdamW" if mode == "adamw_foreach" else args.optimizer
        for chunks in ["-"] if mode == "adamw_foreach" else args.chunks:
            for layers in args.layers:
                total, names, syncs = ops_per_step(mode, layers, args.optimizer, chunks)
                tensors = len(smollm2_shapes(layers))
                row = (
                    f"| {name} | {mode} | {chunks} | {layers} | {tensors} | {total} | {total / shapes:.1f} | {syncs} |"
                )
                print(row, flush=True)
                if args.verbose:
                    print("   ", dict(names.most_common()))


if __name__ == "__main__":
    main()

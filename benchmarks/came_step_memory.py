"""Extra memory one CAME8Bit step takes over SmolLM2-135M's parameter list, eager and compiled, on the CPU.

    python benchmarks/came_step_memory.py

Each mode runs in a fresh process with `MALLOC_MMAP_THRESHOLD_=131072` (freed large blocks leave the resident
set, so it follows live memory): 272 random fp32 parameters of SmolLM2's shapes, random gradients, two steps
(the state exists, the compiled graphs too), then the resident high-water mark is reset through
/proc/self/clear_refs and one more step is taken. Printed: how far the high-water mark rose above the
resident set before that step, beside the parameters' own fp32 size and the memory estimate's figure for
the step's scratch (autotrain.training.memory). Mode "background": compile: null, one (eager) step, then the
rise while its thread compiles the chunks' layouts (the compiler's own memory, and the scratch tensors its
warm-up steps run on). Linux only.
"""

from __future__ import annotations

import argparse
import os
import time
from math import prod

from _common import child, child_result


def step_memory(mode: str) -> dict[str, float]:
    """How far one CAME8Bit step (mode `eager` or `compiled`), or the background compilation after a first
    eager step (`background`), raises the resident high-water mark; and its seconds. Run in a child process."""
    import torch
    from came_ops import smollm2_shapes, warm_up_done

    from autotrain.optimizers import CAME8Bit
    from autotrain.training.memory import proc_status

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in smollm2_shapes(30)]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = CAME8Bit(params, lr=1e-3, compile={"compiled": True, "eager": False}.get(mode))
    opt.step()
    if mode != "background":
        opt.step()
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # the high-water mark starts again from the resident set now
    before = proc_status()["VmHWM"]
    start = time.perf_counter()
    if mode == "background":  # compile: null after its first (eager) step: the thread compiles the layouts
        warm_up_done()
    else:
        opt.step()
    seconds = time.perf_counter() - start
    return {"extra": proc_status()["VmHWM"] - before, "seconds": seconds}


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    if not os.path.exists("/proc/self/clear_refs"):
        print("needs Linux's /proc/self/clear_refs")
        return 1
    from came_ops import smollm2_shapes

    from autotrain.training.memory import step_scratch

    numel = [prod(s) for s in smollm2_shapes(30)]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    print(f"SmolLM2-135M's list: {sum(numel) / 1e6:.1f}M parameters, {sum(numel) * 4 / 2**20:.0f} MiB in fp32")
    for mode in ("eager", "compiled", "background"):
        found = child_result(child(step_memory, mode), env=env)
        what = "while the worker compiles (compile: null)" if mode == "background" else "in a step"
        print(f"CAME8Bit {mode}: extra peak {what} {found['extra'] / 2**20:.0f} MiB ({found['seconds']:.2f} s)")

    class Shape:  # what step_scratch reads of a model's shape
        largest_param = max(numel)

    class Setup:
        device, optimizer = "cpu", "came_8bit"

    print(f"the memory estimate's step scratch for it: {step_scratch(Shape, Setup, sum(numel), 4) / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

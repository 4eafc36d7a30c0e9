"""Extra memory one CAME8Bit step takes over SmolLM2-135M's parameter list, eager and compiled, on the CPU.

    python benchmarks/came_step_memory.py

Each mode runs in a fresh process with `MALLOC_MMAP_THRESHOLD_=131072` (freed large blocks leave the resident
set, so it follows live memory): 272 random fp32 parameters of SmolLM2's shapes, random gradients, two steps
(the state exists, the compiled graphs too), then the resident high-water mark is reset through
/proc/self/clear_refs and one more step is taken. Printed: how far the high-water mark rose above the
resident set before that step, beside the parameters' own fp32 size and the memory estimate's figure for
the step's scratch (autotrain.training.memory). Mode "background": compile: null, one (eager) step, then the
rise while the worker thread compiles the layouts (it traces fake tensors: the compiler's own memory).
Linux only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from math import prod

CHILD = """
import json, sys, time, torch
sys.path.insert(0, sys.argv[2])
from came_ops import smollm2_shapes
from autotrain.optimizers import CAME8Bit
from autotrain.training.memory import _status
torch.manual_seed(0)
params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in smollm2_shapes(30)]
for p in params:
    p.grad = torch.randn_like(p) * 1e-3
mode = sys.argv[1]
opt = CAME8Bit(params, lr=1e-3, compile={"compiled": True, "eager": False}.get(mode))
opt.step()
if mode != "background":
    opt.step()
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")  # the high-water mark starts again from the resident set now
before = _status()["VmHWM"]
start = time.perf_counter()
if mode == "background":  # compile: null after its first (eager) step: the worker compiles the layouts
    from autotrain.optimizers import came_policy

    came_policy.BACKGROUND.idle()
else:
    opt.step()
seconds = time.perf_counter() - start
print(json.dumps({"extra": _status()["VmHWM"] - before, "seconds": seconds}))
"""


def main() -> int:
    if not os.path.exists("/proc/self/clear_refs"):
        print("needs Linux's /proc/self/clear_refs")
        return 1
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from came_ops import smollm2_shapes

    from autotrain.training.memory import _step_scratch

    numel = [prod(s) for s in smollm2_shapes(30)]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    print(f"SmolLM2-135M's list: {sum(numel) / 1e6:.1f}M parameters, {sum(numel) * 4 / 2**20:.0f} MiB in fp32")
    for mode in ("eager", "compiled", "background"):
        out = subprocess.run([sys.executable, "-c", CHILD, mode, here], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{mode}: failed\n{out.stderr[-2000:]}")
            return 1
        found = json.loads(out.stdout.strip().splitlines()[-1])
        what = "while the worker compiles (compile: null)" if mode == "background" else "in a step"
        print(f"CAME8Bit {mode}: extra peak {what} {found['extra'] / 2**20:.0f} MiB ({found['seconds']:.2f} s)")

    class Shape:  # what _step_scratch reads of a model's shape
        largest_param = max(numel)

    class Setup:
        device, optimizer = "cpu", "came_8bit"

    print(f"the memory estimate's step scratch for it: {_step_scratch(Shape, Setup, sum(numel), 4) / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

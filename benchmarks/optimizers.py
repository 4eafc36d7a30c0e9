"""Figures for the bundled optimizers, each as a ratio to a baseline measured in the same run.

    python benchmarks/optimizers.py --device cpu [--quick] [--threads N]

Step times: after two warmup steps, the candidates take turns step by step (rotating who goes
first) for a number of rounds; the times shown are medians, and a ratio is the median over
rounds of the within-round ratio, so load that changes between rounds cancels out.

Peak memory of a step is measured in a fresh subprocess per candidate. On CUDA:
``torch.cuda.max_memory_allocated`` minus the allocation before the step. On CPU (Linux): the
kernel's resident-set high-water mark (``VmHWM``), reset through ``/proc/self/clear_refs`` right
before the step, minus the resident set just before it; glibc is told to serve every allocation
above 64 KiB with mmap, so freed tensors go back to the kernel and the resident set tracks live
memory rather than malloc's cache (tracemalloc would not see torch's allocations at all).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from autotrain.optimizers import CAME8Bit, FusedAdam  # noqa: E402
from autotrain.optimizers.came import CAME  # noqa: E402


def make_params(shapes: list[tuple[int, ...]], device: str, seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    params = []
    for shape in shapes:
        p = torch.nn.Parameter(torch.randn(shape, generator=gen).to(device))
        p.grad = torch.randn(shape, generator=gen).to(device)
        params.append(p)
    return params


def build(name: str, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if name == "came_8bit":
        return CAME8Bit(params, lr=1e-4)
    if name == "came":
        return CAME(params, lr=1e-4)
    if name == "came_pytorch":
        from came_pytorch import CAME as ReferenceCAME

        return ReferenceCAME(params, lr=1e-4)
    if name == "fused_adam":
        return FusedAdam(params, lr=1e-4)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=False, fused=False)
    if name == "adamw_fused":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    if name == "adamw_foreach":
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if name == "bnb_adamw_8bit":
        import bitsandbytes

        return bitsandbytes.optim.AdamW8bit(params, lr=1e-4)
    raise ValueError(name)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def state_bytes_per_param(name: str, shape: tuple[int, ...], device: str) -> float:
    params = make_params([shape], device)
    opt = build(name, params)
    opt.step()
    nbytes = sum(t.nbytes for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor))
    return nbytes / params[0].numel()


def step_times(names: list[str], shapes: list[tuple[int, ...]], device: str, reps: int) -> dict:
    """Per-round step times of each candidate; rounds interleave the candidates, rotating the order."""
    opts = {name: build(name, make_params(shapes, device)) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps + 2):  # two warmup steps create the state and warm the allocator
        order = names[rep % len(names) :] + names[: rep % len(names)]  # no candidate always first
        for name in order:
            sync(device)
            start = time.perf_counter()
            opts[name].step()
            sync(device)
            if rep >= 2:
                times[name].append(time.perf_counter() - start)
    return times


def paired_ratio(times: dict[str, list[float]], name: str, baseline: str) -> float:
    """Median over rounds of the within-round ratio: load changes between rounds cancel out."""
    return statistics.median(a / b for a, b in zip(times[name], times[baseline], strict=True))


def _read_status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_extra_bytes_here(name: str, shapes: list[tuple[int, ...]], device: str) -> int:
    """Extra memory one step() allocates at its peak, measured in this (fresh) process."""
    opt = build(name, make_params(shapes, device))
    opt.step()
    opt.step()
    sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        opt.step()
        sync(device)
        return torch.cuda.max_memory_allocated() - base
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set
    base = _read_status("VmRSS")
    opt.step()
    return _read_status("VmHWM") - base


def peak_extra_bytes(name: str, shapes: list[tuple[int, ...]], device: str) -> int:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); from optimizers import peak_extra_bytes_here; "
        "print(json.dumps(peak_extra_bytes_here(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4])))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, os.path.dirname(__file__), name, json.dumps(shapes), device],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device, reps = args.device, (7 if args.quick else 25)
    rows: list[tuple[str, str, str, float, float | None]] = []  # figure, measured, baseline, ratio, max

    square = (4096, 4096)
    came_8bit = state_bytes_per_param("came_8bit", square, device)
    baselines = {name: state_bytes_per_param(name, square, device) for name in ("adamw", "came")}
    with contextlib.suppress(ImportError):  # bitsandbytes only where it is installed
        baselines["bnb_adamw_8bit"] = state_bytes_per_param("bnb_adamw_8bit", square, device)
    base_text = ", ".join(f"{k} {v:.3f}" for k, v in baselines.items())
    rows.append(("CAME8Bit state bytes/param, 4096x4096", f"{came_8bit:.4f}", base_text, came_8bit, 1.01))

    def ms(t: list[float]) -> str:
        return f"{statistics.median(t) * 1e3:.1f} ms"

    # A transformer-like mix: ~21M elements of matrices plus norms/biases.
    came_shapes = [(2048, 2048)] * 4 + [(1024, 2048)] * 2 + [(2048,)] * 32
    t = step_times(["came_8bit", "came_pytorch"], came_shapes, device, reps)
    ratio = paired_ratio(t, "came_8bit", "came_pytorch")
    rows.append(("CAME8Bit step / came-pytorch CAME step", ms(t["came_8bit"]), ms(t["came_pytorch"]), ratio, 1.15))

    adam_shapes = [(1024, 1024)] * 16
    t = step_times(["fused_adam", "adamw_fused", "adamw_foreach"], adam_shapes, device, reps)
    for base, target in (("adamw_fused", 1.05), ("adamw_foreach", 0.35)):
        figure = f"FusedAdam step / AdamW({base.split('_')[1]}=True) step"
        rows.append((figure, ms(t["fused_adam"]), ms(t[base]), paired_ratio(t, "fused_adam", base), target))

    if device == "cpu" and not os.path.exists("/proc/self/clear_refs"):
        print("peak memory: needs Linux /proc/self/clear_refs; skipped")
    else:
        for name, base, figure, target in (
            ("fused_adam", "adamw_foreach", "FusedAdam extra peak in step / foreach AdamW's", 1.0),
            ("came_8bit", "came_pytorch", "CAME8Bit extra peak in step / came-pytorch's", None),
        ):
            shapes = adam_shapes if name == "fused_adam" else came_shapes
            ours, ref = peak_extra_bytes(name, shapes, device), peak_extra_bytes(base, shapes, device)
            rows.append((figure, f"{ours / 2**20:.1f} MiB", f"{ref / 2**20:.1f} MiB", ours / max(ref, 1), target))

    print(f"\ndevice={device} threads={torch.get_num_threads()} torch={torch.__version__} rounds={reps}\n")
    print("| figure | measured | baseline | ratio | target | met |")
    print("|---|---|---|---|---|---|")
    for figure, measured, baseline, ratio, target in rows:
        verdict = "(info)" if target is None else ("yes" if ratio <= target else "NO")
        target_text = "" if target is None else f"<= {target}"
        print(f"| {figure} | {measured} | {baseline} | {ratio:.3f} | {target_text} | {verdict} |")


if __name__ == "__main__":
    main()

"""Figures for the bundled optimizers, each as a ratio to a baseline measured in the same run.

    python benchmarks/optimizers.py [--device cpu|cuda] [--quick] [--threads 2] [--rounds 25] [--smollm2] [--tiny]

``--tiny``: every shape 16x smaller in each dim, 2 rounds: checks that the script runs (no figure).

Step times, on a ~21M-element mix (one 4096x4096 and one 2048x1024 matrix, four 4096 vectors): every
candidate is built, compiled where it compiles, and stepped three times (the defaults, which compile on a
worker thread, once that thread is done); then the candidates take turns step
by step for a number of rounds, in an order shuffled each round (seeded), so that no candidate always
runs right after the same one (one that sweeps memory leaves the caches cold for the next). Times are
medians, and a ratio is the median over rounds of the within-round ratio, so load that changes between
rounds cancels out.

Also CAME8Bit against CAME alone (the two taking turns) on one 4096x4096 matrix and on SmolLM2-135M's
matrix shapes (576 wide: blocks of whole rows).

``--smollm2``: SmolLM2-135M's whole parameter list (272 tensors), each figure's two candidates taking turns
in a fresh process of their own, as a training run holds one optimizer: with all six candidates' gigabytes
of state resident in one process, the multi-pass CAME steps ran 1.5-2.5x slower than alone.

Candidates: CAME8Bit and CAME with their compiled step (``compile=True``), their eager one
(``compile=False``) and their default (auto: compiled on the CPU), the authors' ``came-pytorch`` CAME,
``torch.optim.AdamW`` (foreach and fused) and FusedAdam (which runs torch's fused AdamW kernel: its speed
is that kernel's).

Compile time: the first step of CAME8Bit (compiled) on the mix, in a fresh process with an empty inductor
cache (what a first run pays, once per group shape; later runs find the kernels and graphs in the cache).

Peak memory of a step is measured in a fresh subprocess per candidate. On CUDA:
``torch.cuda.max_memory_allocated`` minus the allocation before the step. On CPU (Linux): the
kernel's resident-set high-water mark (``VmHWM``), reset through ``/proc/self/clear_refs`` right
before the step, minus the resident set just before it; glibc is told to serve every allocation
above 64 KiB with mmap, so freed tensors go back to the kernel and the resident set tracks live
memory rather than malloc's cache (tracemalloc would not see torch's allocations at all).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from _common import child, child_result  # noqa: E402
from came_ops import smollm2_shapes, warm_up_done  # noqa: E402

from autotrain.optimizers import CAME8Bit, FusedAdam  # noqa: E402
from autotrain.optimizers.came import CAME  # noqa: E402

MIX = [(4096, 4096), (2048, 1024)] + [(4096,)] * 4
# SmolLM2-135M's matrices: the embedding and one decoder layer (576 wide, MLP 1536): widths that are not
# multiples of 2048, where CAME8Bit's blocks hold whole rows (row_aligned_block).
SMOLLM2 = [(49152, 576), (576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]


def make_params(shapes: list[tuple[int, ...]], device: str, seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    params = []
    for shape in shapes:
        p = torch.nn.Parameter(torch.randn(shape, generator=gen).to(device))
        p.grad = torch.randn(shape, generator=gen).to(device)
        params.append(p)
    return params


def build(name: str, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    builders = {
        "came_8bit": lambda: CAME8Bit(params, lr=1e-4, compile=True),
        "came_8bit_default": lambda: CAME8Bit(params, lr=1e-4),
        "came_default": lambda: CAME(params, lr=1e-4),
        "came_8bit_eager": lambda: CAME8Bit(params, lr=1e-4, compile=False),
        "came": lambda: CAME(params, lr=1e-4, compile=True),
        "came_eager": lambda: CAME(params, lr=1e-4, compile=False),
        "fused_adam": lambda: FusedAdam(params, lr=1e-4),
        "adamw": lambda: torch.optim.AdamW(params, lr=1e-4, foreach=False, fused=False),
        "adamw_fused": lambda: torch.optim.AdamW(params, lr=1e-4, fused=True),
        "adamw_foreach": lambda: torch.optim.AdamW(params, lr=1e-4, foreach=True),
    }
    if name == "came_pytorch":
        from came_pytorch import CAME as ReferenceCAME

        return ReferenceCAME(params, lr=1e-4)
    if name == "bnb_adamw_8bit":
        import bitsandbytes

        return bitsandbytes.optim.AdamW8bit(params, lr=1e-4)
    return builders[name]()


# Compiled against eager: widths of whole blocks (1024: two rows per 2048-block), of whole rows per
# block (576-wide: blocks of 1728) and a prime width (blocks cut the rows).
PARITY_SHAPES = [(1024, 1024), (1536, 576), (300, 257)]


def compiled_vs_eager(cls: type, lr: float, device: str, steps: int = 100) -> tuple[float, float, int, int]:
    """Free-running ``steps`` of ``cls`` with compile=True and compile=False from the same params and the
    same gradients, and a control: compile=False from params scaled by 1 + 1e-7. The largest relative
    difference of a parameter (||x - eager|| / ||eager||) of compiled and of the control, and how many
    8-bit codes differ between compiled and eager, of how many."""
    runs = [make_params(PARITY_SHAPES, device) for _ in range(3)]
    with torch.no_grad():
        for p in runs[2]:
            p.mul_(1 + 1e-7)
    flags = (True, False, False)
    opts = [cls(params, lr=lr, weight_decay=0.1, compile=on) for params, on in zip(runs, flags, strict=True)]
    for step in range(steps):
        gen = torch.Generator().manual_seed(1000 + step)
        grads = [torch.randn(p.shape, generator=gen).to(device) for p in runs[0]]
        for params, opt in zip(runs, opts, strict=True):
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            opt.step()
    worst, control = (
        max(((p - q).norm() / q.norm()).item() for p, q in zip(runs[i], runs[1], strict=True)) for i in (0, 2)
    )
    differ = total = 0
    for p, q in zip(runs[0], runs[1], strict=True):
        if "exp_avg_codes" in opts[0].state[p]:
            codes, eager_codes = opts[0].state[p]["exp_avg_codes"], opts[1].state[q]["exp_avg_codes"]
            differ, total = differ + int((codes != eager_codes).sum()), total + codes.numel()
    return worst, control, differ, total


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def state_bytes_per_param(name: str, shape: tuple[int, ...], device: str) -> float:
    params = make_params([shape], device)
    opt = build(name, params)
    opt.step()
    nbytes = sum(t.nbytes for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor))
    return nbytes / params[0].numel()


def step_times(names: list[str], shapes: list[tuple[int, ...]], device: str, rounds: int) -> dict:
    """Per-round step times of each candidate; rounds interleave the candidates, in a shuffled order."""
    opts = {name: build(name, make_params(shapes, device)) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    rng = random.Random(0)
    warmup = 3  # create the state, compile, and warm the allocator
    for rep in range(rounds + warmup):
        if rep == warmup - 1:  # the default (auto) candidates compile on a thread: timed once it is done
            warm_up_done()
        # A new order each round: a step that comes right after one sweeping hundreds of MB (the eager
        # ones, came-pytorch) finds the caches cold, so a candidate with a fixed predecessor (as a
        # rotation gives) would be measured cold, or warm, every time.
        order = rng.sample(names, len(names))
        for name in order:
            sync(device)
            start = time.perf_counter()
            opts[name].step()
            sync(device)
            if rep >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def pair_times_here(pair: str, shapes: list[tuple[int, ...]], device: str) -> dict:
    """``step_times`` of the two candidates of ``pair`` ("name,baseline,rounds") in this (fresh) process:
    the pair alone, as in a training run, with no other candidate's state resident (six SmolLM2-135M
    candidates in one process made the multi-pass CAME steps 1.5-2.5x slower than alone, AdamW's less)."""
    name, base, rounds = pair.split(",")
    return step_times([name, base], [tuple(s) for s in shapes], device, int(rounds))


def paired_ratio(times: dict[str, list[float]], name: str, baseline: str) -> float:
    """Median over rounds of the within-round ratio: load changes between rounds cancel out."""
    return statistics.median(a / b for a, b in zip(times[name], times[baseline], strict=True))


def first_step_seconds_here(name: str, shapes: list[tuple[int, ...]], device: str) -> dict:
    """First and second step of ``name`` in this (fresh) process: the first one compiles."""
    opt = build(name, make_params(shapes, device))
    seconds = []
    for _ in range(2):
        sync(device)
        start = time.perf_counter()
        opt.step()
        sync(device)
        seconds.append(time.perf_counter() - start)
    return {"first": seconds[0], "second": seconds[1]}


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


def measure_here(function: str, name: str, shapes: str, device: str, threads: str):
    """``function(name, shapes, device)`` of this module with `threads` intra-op threads: what a child runs."""
    torch.set_num_threads(int(threads))
    return globals()[function](name, json.loads(shapes), device)


def in_subprocess(function: str, name: str, shapes: list, device: str, threads: int, env: dict | None = None):
    """``function(name, shapes, device)`` of this module, run in a fresh interpreter; its JSON result."""
    argv = child(measure_here, function, name, json.dumps(shapes), device, threads)
    return child_result(argv, env=dict(os.environ, **(env or {})))


def _memory_rows(device: str, threads: int) -> list[tuple]:
    if device == "cpu" and not os.path.exists("/proc/self/clear_refs"):
        print("peak memory: needs Linux /proc/self/clear_refs; skipped")
        return []
    env = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    peak = {
        name: in_subprocess("peak_extra_bytes_here", name, MIX, device, threads, env)
        for name in ("came_8bit", "came_8bit_eager", "came_pytorch", "fused_adam", "adamw_foreach")
    }
    mib = {name: f"{value / 2**20:.1f} MiB" for name, value in peak.items()}
    return [
        ("CAME8Bit compiled, extra peak in step / eager's", mib["came_8bit"], mib["came_8bit_eager"], None, None),
        ("CAME8Bit compiled, extra peak in step / came-pytorch's", mib["came_8bit"], mib["came_pytorch"], None, None),
        ("FusedAdam extra peak in step / foreach AdamW's", mib["fused_adam"], mib["adamw_foreach"], None, None),
    ]


SMOLLM2_FIGURES = [
    ("CAME8Bit default / AdamW(fused=True)", "came_8bit_default", "adamw_fused", 2.0),
    ("CAME8Bit default / CAME default (fp32 m)", "came_8bit_default", "came_default", 1.1),
    ("CAME8Bit default / AdamW(foreach=True)", "came_8bit_default", "adamw_foreach", None),
    ("CAME8Bit compiled / AdamW(fused=True)", "came_8bit", "adamw_fused", 2.0),
    ("CAME8Bit compiled / CAME compiled", "came_8bit", "came", 1.1),
]


def _smollm2_rows(device: str, threads: int, rounds: int, layers: int = 30) -> list[tuple]:
    """Step-time ratios on SmolLM2-135M's 272 tensors, and CAME8Bit's first step (compiled) in a fresh
    process, cold (an empty inductor cache) and with the cache the previous process left."""
    shapes = smollm2_shapes(layers)
    rows = []
    for figure, name, base, target in SMOLLM2_FIGURES:
        times = in_subprocess("pair_times_here", f"{name},{base},{rounds}", shapes, device, threads)
        ms = [f"{statistics.median(times[n]) * 1e3:.1f} ms" for n in (name, base)]
        rows.append((f"SmolLM2-135M list: {figure}", *ms, paired_ratio(times, name, base), target))
    with tempfile.TemporaryDirectory(prefix="autotrain-inductor-") as cache:
        empty = {"TORCHINDUCTOR_CACHE_DIR": cache}
        cold = in_subprocess("first_step_seconds_here", "came_8bit", shapes, device, threads, empty)
        cached = in_subprocess("first_step_seconds_here", "came_8bit", shapes, device, threads, empty)
    for label, run, target in (("cold", cold, None), ("cached, fresh process", cached, 5.0)):
        figure = f"SmolLM2-135M list: CAME8Bit compiled, first step {label} (s) / second step"
        rows.append((figure, f"{run['first']:.1f} s", f"{run['second'] * 1e3:.0f} ms", run["first"], target))
    return rows


# figure, candidate, baseline, target (None: information only)
TIME_FIGURES = [
    ("CAME8Bit compiled / CAME compiled", "came_8bit", "came", 1.10),
    ("CAME8Bit compiled / CAME eager", "came_8bit", "came_eager", None),
    ("CAME8Bit eager / CAME eager", "came_8bit_eager", "came_eager", None),
    ("CAME compiled / CAME eager", "came", "came_eager", None),
    ("CAME8Bit compiled / came-pytorch CAME", "came_8bit", "came_pytorch", None),
    ("CAME8Bit compiled / AdamW(foreach=True)", "came_8bit", "adamw_foreach", 1.0),
    ("CAME8Bit compiled / AdamW(fused=True)", "came_8bit", "adamw_fused", None),
    ("FusedAdam / AdamW(fused=True) (the same torch kernel)", "fused_adam", "adamw_fused", 1.05),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--quick", action="store_true", help="7 rounds, no memory figures")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--smollm2", action="store_true", help="also SmolLM2-135M's whole parameter list")
    parser.add_argument("--layers", type=int, default=30, help="SmolLM2's decoder layers (--smollm2; default 30)")
    parser.add_argument("--tiny", action="store_true", help="shapes 16x smaller, 2 rounds: only checks it runs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device, rounds = args.device, (7 if args.quick else args.rounds)
    if args.tiny:
        global MIX, SMOLLM2, PARITY_SHAPES
        MIX, SMOLLM2, PARITY_SHAPES = (
            [tuple(max(1, d // 16) for d in s) for s in shapes] for shapes in (MIX, SMOLLM2, PARITY_SHAPES)
        )
        rounds, args.layers = 2, 1
    rows: list[tuple] = []  # figure, measured, baseline, ratio, target

    square = MIX[0]
    ours = state_bytes_per_param("came_8bit", square, device)
    baselines = {name: state_bytes_per_param(name, square, device) for name in ("adamw", "came")}
    base_text = ", ".join(f"{k} {v:.3f}" for k, v in baselines.items())
    rows.append((f"CAME8Bit state bytes/param, {square[0]}x{square[1]}", f"{ours:.4f}", base_text, ours, 1.01))

    with tempfile.TemporaryDirectory(prefix="autotrain-inductor-") as cache:
        empty = {"TORCHINDUCTOR_CACHE_DIR": cache}
        cold = in_subprocess("first_step_seconds_here", "came_8bit", MIX, device, args.threads, empty)
    rows.append(
        (
            "CAME8Bit compiled, first step (one graph per group shape: 3 on the mix; empty cache) / second step",
            f"{cold['first']:.1f} s",
            f"{cold['second'] * 1e3:.0f} ms",
            cold["first"] / cold["second"],
            None,
        )
    )

    auto = in_subprocess("first_step_seconds_here", "came_8bit_default", MIX, device, args.threads)
    figure = "CAME8Bit default (compile: null), first step (eager: compiling waits on a thread) / second step"
    rows.append(
        (
            figure,
            f"{auto['first'] * 1e3:.0f} ms",
            f"{auto['second'] * 1e3:.0f} ms",
            auto["first"] / auto["second"],
            None,
        )
    )
    names = [c for _, c, _, _ in TIME_FIGURES] + [b for _, _, b, _ in TIME_FIGURES]
    times = step_times(list(dict.fromkeys(names)), MIX, device, rounds)

    def ms(name: str) -> str:
        return f"{statistics.median(times[name]) * 1e3:.1f} ms"

    for figure, name, base, target in TIME_FIGURES:
        rows.append((figure, ms(name), ms(base), paired_ratio(times, name, base), target))
    for label, shapes in (
        (f"one {square[0]}x{square[1]} matrix", [square]),
        ("SmolLM2-135M's embedding + one layer", SMOLLM2),
    ):
        pair = step_times(["came_8bit", "came"], shapes, device, rounds)
        pair_ms = {name: f"{statistics.median(pair[name]) * 1e3:.1f} ms" for name in pair}
        figure = f"CAME8Bit compiled / CAME compiled, {label} (the two taking turns)"
        rows.append((figure, pair_ms["came_8bit"], pair_ms["came"], paired_ratio(pair, "came_8bit", "came"), None))
    for cls in (CAME8Bit, CAME):
        for lr in (1e-2, 1e-3):
            worst, control, differ, total = compiled_vs_eager(cls, lr, device)
            codes = f" ({differ} of {total:,} codes differ)" if total else ""
            figure = (
                f"{cls.__name__} compiled vs eager, 100 free-running steps, lr {lr:g}, wd 0.1 "
                f"({', '.join('x'.join(map(str, s)) for s in PARITY_SHAPES)}): max relative param difference, "
                "against eager from weights 1e-7 apart"
            )
            rows.append((figure, f"{worst:.1e}{codes}", f"{control:.1e}", worst / max(control, 1e-30), None))
    if args.smollm2:
        rows += _smollm2_rows(device, args.threads, rounds, args.layers)
    if not args.quick:
        rows += _memory_rows(device, args.threads)

    print(f"\ndevice={device} threads={torch.get_num_threads()} torch={torch.__version__} rounds={rounds}")
    print(f"load average before/after: {LOAD_BEFORE} / {os.getloadavg()}\n")
    print("| figure | measured | baseline | ratio | target | met |")
    print("|---|---|---|---|---|---|")
    for figure, measured, baseline, ratio, target in rows:
        verdict = "(info)" if target is None else ("yes" if ratio <= target else "NO")
        target_text = "" if target is None else f"<= {target}"
        ratio_text = "" if ratio is None else (f"{ratio:.3f}" if ratio == 0 or ratio >= 1e-3 else f"{ratio:.1e}")
        print(f"| {figure} | {measured} | {baseline} | {ratio_text} | {target_text} | {verdict} |")


LOAD_BEFORE = os.getloadavg()

if __name__ == "__main__":
    main()

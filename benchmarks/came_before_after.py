"""CAME8Bit's step time before and after a change, in one process: the two trees' optimizers take turns.

    python benchmarks/came_before_after.py --before REV [--rounds 30] [--layers 30] [--modes ...] [--first-step N]
                                            [--smoke]

The tree at git revision REV (`git archive`) is imported as the package `autotrain_before`, beside this tree's
`autotrain`. For each mode (the default, auto; `compile=True`; `compile=False`), in a fresh process, both build
CAME8Bit (lr 1e-4) on SmolLM2-135M's parameter list (272 tensors, `optimizers.smollm2_shapes`). Each steps four
times on its own first, its default's compile thread waited for, so that the two trees never compile at once (a
failure to compile of this tree's, which makes its step eager, is printed); then they step in turns for `--rounds`
rounds, in an order shuffled each round. The figure is the median over rounds of the round's after / before: load
that changes between rounds cancels out, which runs of the two trees one after the other (`optimizers.py` in each)
do not give (their step times moved by about 10% between runs here). Run it on an otherwise idle machine.

`--first-step N`: also CAME8Bit's first step with `compile=True` (every graph compiled before it runs) on the same
list, in a fresh process per run, N times per tree in turns: cold (an empty inductor cache of the tree's own,
what a first run on a machine pays) and cached (the next fresh process, on the cache the cold one left).

Mode `direct` (not run by default) tells where a compiled step's time goes: this tree's compiled step with each
compiled call made through the before tree's own compiler instead of `torch.compile` (REV must have one:
`came_compile.StepCompiler`, which traces came_math's functions on fake tensors and calls inductor's graphs
directly), against the before tree's compiled step.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import child, child_result, package_at

MODES = {"default": None, "compiled": True, "eager": False, "direct": True}


def before_tree(revision: str, into: Path) -> Path:
    """The tree at `revision` as the package `autotrain_before` under `into`."""
    package_at(revision, into)
    package = into / "autotrain_before"
    (into / "autotrain").rename(package)
    for path in package.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        path.write_text(re.sub(r"\bautotrain(?=[.\s])", "autotrain_before", text), encoding="utf-8")
    return into


def paired_here(before_root: str, mode: str, rounds: str, layers: str) -> dict:
    """Step times (s) of both trees' CAME8Bit in this process, taking turns."""
    import random

    import optimizers
    import torch

    sys.path.insert(0, before_root)
    from autotrain_before.optimizers import CAME8Bit as Before

    from autotrain.optimizers import CAME8Bit as After

    if mode == "direct":
        direct_calls(sys.modules["autotrain_before.optimizers.came_compile"])
    torch.set_num_threads(2)
    shapes = optimizers.smollm2_shapes(int(layers))
    settings = {"lr": 1e-4} if MODES[mode] is None else {"lr": 1e-4, "compile": MODES[mode]}
    opts = {
        "after": After(optimizers.make_params(shapes, "cpu"), **settings),
        "before": Before(optimizers.make_params(shapes, "cpu"), **settings),
    }
    for opt in opts.values():  # one after the other: the two trees never compile at once
        for _ in range(3):
            opt.step()
        for thread in threading.enumerate():  # the default's compile thread
            if thread is not threading.main_thread() and "compile" in thread.name:
                thread.join()
        opt.step()
    times: dict[str, list[float]] = {name: [] for name in opts}
    rng = random.Random(0)
    for _ in range(int(rounds)):
        for name in rng.sample(list(opts), len(opts)):
            start = time.perf_counter()
            opts[name].step()
            times[name].append(time.perf_counter() - start)
    return {**times, "after_failures": opts["after"].compile_choices}


def first_step_here(before_root: str, tree: str, layers: str) -> float:
    """Seconds of the first step of one tree's CAME8Bit (``compile=True``) in this fresh process."""
    import optimizers
    import torch

    sys.path.insert(0, before_root)
    if tree == "after":
        from autotrain.optimizers import CAME8Bit
    else:
        from autotrain_before.optimizers import CAME8Bit
    torch.set_num_threads(2)
    opt = CAME8Bit(optimizers.make_params(optimizers.smollm2_shapes(int(layers)), "cpu"), lr=1e-4, compile=True)
    start = time.perf_counter()
    opt.step()
    seconds = time.perf_counter() - start
    if opt.compile_choices:
        raise SystemExit(f"{tree}: the compiled step failed: {opt.compile_choices}")
    return seconds


def first_steps(root: Path, before: str, reps: int, layers: str) -> None:
    """Each tree's first compiled step, cold then cached, ``reps`` times in turns; the medians printed."""
    seconds: dict[tuple[str, str], list[float]] = {}
    for _ in range(reps):
        for tree in ("after", "before"):
            with tempfile.TemporaryDirectory(prefix=f"autotrain-inductor-{tree}-") as cache:
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
                for state in ("cold", "cached"):
                    run = child_result(child(first_step_here, str(root), tree, layers), env)
                    seconds.setdefault((tree, state), []).append(run)
    for state in ("cold", "cached"):
        after, then = (statistics.median(seconds[tree, state]) for tree in ("after", "before"))
        print(f"  first compiled step, {state}: after {after:.1f} s, before ({before}) {then:.1f} s, after / before "
              f"{after / then:.2f} (median of {reps})")  # fmt: skip


def direct_calls(before_compile) -> None:
    """Make this tree's compiled calls through the before tree's compiler (inductor's graphs called directly)."""
    from autotrain.optimizers import came_compile

    if not hasattr(before_compile, "StepCompiler"):
        raise SystemExit("--modes direct: the --before tree has no came_compile.StepCompiler to call graphs with")
    compiler = before_compile.StepCompiler()

    def call(self, site, fn, *args):
        return compiler(fn, *args, site=site)

    came_compile.Compiler.__call__ = call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="HEAD", help="The git revision to compare with (default HEAD).")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--layers", type=int, default=30, help="SmolLM2's decoder layers (default 30: all).")
    parser.add_argument("--modes", default="default,compiled,eager")
    parser.add_argument("--first-step", type=int, default=0, metavar="N", help="Also the first compiled step, N runs.")
    parser.add_argument("--smoke", action="store_true", help="1 layer, 2 rounds, eager, against HEAD: checks nothing.")
    args = parser.parse_args()
    if args.smoke:
        args.before, args.layers, args.rounds, args.modes = "HEAD", 1, 2, "eager"
    with tempfile.TemporaryDirectory(prefix="autotrain-before-") as name:
        root = before_tree(args.before, Path(name))
        print(f"CAME8Bit step, SmolLM2-135M's parameter list ({args.layers} layers), {args.rounds} rounds in turns")
        for mode in args.modes.split(","):
            times = child_result(child(paired_here, str(root), mode, str(args.rounds), str(args.layers)))
            ratio = statistics.median(a / b for a, b in zip(times["after"], times["before"], strict=True))
            after, before = (statistics.median(times[k]) * 1e3 for k in ("after", "before"))
            print(f"  {mode}: after {after:.1f} ms, before ({args.before}) {before:.1f} ms, after / before {ratio:.3f}")
            if times["after_failures"]:
                print(f"    after: the compiled step failed: {times['after_failures']}")
        if args.first_step:
            first_steps(root, args.before, args.first_step, str(args.layers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

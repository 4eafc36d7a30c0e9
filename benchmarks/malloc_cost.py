"""What a CPU run's malloc setting costs in time: seconds per training step of `autotrain llm` (full fine-tune
of SmolLM2-135M, batch 2 x 128 tokens) with autotrain's setting (`returning`: the mmap threshold fixed at
128 KiB, raised while an optimizer steps; see autotrain/training/allocator.py) against glibc's default
(`AUTOTRAIN_MALLOC=system`), for adamw_torch and came_8bit.

    python benchmarks/malloc_cost.py [--reps 2] [--steps 8]

Each run is a new process of 10 steps (CAME's eager step: too short a run for it to compile on the CPU), stopped
after step ``--steps``; the figure is the mean of steps 2 to ``--steps`` (step 1 creates the optimizer's state),
the median over the reps, which alternate between the settings. The peak memory each setting gives is
`python benchmarks/memory_estimate.py [--malloc system]`. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from _common import print_table, smollm2_folder, step_times
from first_step import write_config

MODES = ("returning", "system")
OPTIMIZERS = ("adamw_torch", "came_8bit")


def seconds_per_step(config: Path, mode: str, last: int) -> float:
    env = {**os.environ, "AUTOTRAIN_MALLOC": mode, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("MALLOC_MMAP_THRESHOLD_", None)  # malloc's own variables would override both settings
    env.pop("GLIBC_TUNABLES", None)
    marks = step_times(config, env, last)
    return (marks[last] - marks[1]) / (last - 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8, help="the last step timed (at most 10)")
    args = parser.parse_args()
    model = smollm2_folder()
    seconds: dict[tuple[str, str], list[float]] = {(o, m): [] for o in OPTIMIZERS for m in MODES}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for _ in range(args.reps):
            for optimizer in OPTIMIZERS:
                for mode in MODES:
                    config = write_config(tmp, model, optimizer, 10)
                    seconds[(optimizer, mode)].append(seconds_per_step(config, mode, args.steps))
                    print(f"{optimizer} {mode}: {seconds[(optimizer, mode)][-1]:.2f} s/step", flush=True)
    rows = []
    for optimizer in OPTIMIZERS:
        ours, system = (statistics.median(seconds[(optimizer, m)]) for m in MODES)
        rows.append((optimizer, f"{ours:.2f}", f"{system:.2f}", f"{ours / system:.2f}x"))
    print_table(rows, ("optimizer", "returning s/step", "system s/step", "returning / system"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

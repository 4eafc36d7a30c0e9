"""Time to the first training step of `autotrain llm` (full fine-tune of SmolLM2-135M on the CPU) with
`optimizer: came_8bit` against the same run with `adamw_torch`, on a machine with no inductor cache.

    python benchmarks/first_step.py [--reps 2] [--steps 300] [--before REV]

Each run is a new process with an empty inductor cache folder of its own (TORCHINDUCTOR_CACHE_DIR) and
`max_steps` long enough that CAME's auto compiles every group of SmolLM2-135M's (`came_compile.compiles`: at 300
steps, each of them pays back its compilation);
the clock stops when the progress line of step 1 is printed (the first optimizer step is done), and the
run is then stopped. The candidates alternate (adamw, came, adamw, came, ...). Target: came_8bit <= 1.2x
adamw_torch. `--before REV`: the `autotrain` package of git revision REV (`git archive`) runs too, each of its runs
right after this tree's of the same optimizer, and each optimizer's median now / before is printed. Run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from _common import package_at, smollm2_folder, step_times, write_sft_config


def write_config(tmp: Path, model: Path, optimizer: str, steps: int) -> Path:
    text = " ".join(["a quick brown fox jumps over the lazy dog"] * 40)
    training = {"batch_size": 2, "max_length": 128, "max_steps": steps, "optimizer": optimizer,
                "mixed_precision": "no", "logging_steps": 1, "save_steps": 100000, "lr": 1e-5}  # fmt: skip
    rows = [{"text": text}] * 64
    return write_sft_config(tmp / f"{optimizer}.yml", model, rows, training, chat_template="none")


def time_to_first_step(config: Path, cache: Path, tree: Path | None = None) -> float:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    return step_times(config, env, 1, tree)[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300, help="max_steps of the runs (300: CAME compiles every group)")
    parser.add_argument("--before", help="Also run the package of this git revision, each run right after this tree's.")
    args = parser.parse_args()
    model = smollm2_folder()
    trees = ["now", *(["before"] if args.before else [])]
    seconds = {(tree, opt): [] for opt in ("adamw_torch", "came_8bit") for tree in trees}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        folders = {"now": None, "before": package_at(args.before, tmp / "before") if args.before else None}
        for rep in range(args.reps):
            for tree, optimizer in seconds:
                cache = tmp / f"inductor-{tree}-{optimizer}-{rep}"
                config = write_config(tmp, model, optimizer, args.steps)
                elapsed = time_to_first_step(config, cache, folders[tree])
                seconds[tree, optimizer].append(elapsed)
                print(f"{tree} {optimizer}: first step after {elapsed:.1f} s (empty inductor cache)", flush=True)
    for tree in trees:
        adamw, came = (statistics.median(seconds[tree, k]) for k in ("adamw_torch", "came_8bit"))
        verdict = "met" if came / adamw <= 1.2 else "missed"
        label = f"{tree} ({args.before})" if tree == "before" else tree
        ratio = f"came_8bit {came:.1f} s / adamw_torch {adamw:.1f} s = {came / adamw:.2f}x"
        print(f"{label}: time to first step, SmolLM2-135M full fine-tune, max_steps {args.steps}: {ratio} "
              f"(target <= 1.2x: {verdict})")  # fmt: skip
    if args.before:
        for optimizer in ("came_8bit", "adamw_torch"):
            now, then = (statistics.median(seconds[tree, optimizer]) for tree in trees)
            print(f"{optimizer}: now / before = {now:.1f} / {then:.1f} s = {now / then:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

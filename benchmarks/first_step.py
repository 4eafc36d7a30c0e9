"""Time to the first training step of `autotrain llm` (full fine-tune of SmolLM2-135M on the CPU) with
`optimizer: came_8bit` against the same run with `adamw_torch`, on a machine with no inductor cache.

    python benchmarks/first_step.py [--reps 2] [--steps 300]

Each run is a new process with an empty inductor cache folder of its own (TORCHINDUCTOR_CACHE_DIR) and
`max_steps` long enough that CAME's auto compiles every group of SmolLM2-135M's (`came_compile.compiles`: at 300
steps, each of them pays back its compilation);
the clock stops when the progress line of step 1 is printed (the first optimizer step is done), and the
run is then stopped. The candidates alternate (adamw, came, adamw, came, ...). Target: came_8bit <= 1.2x
adamw_torch. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from _common import smollm2_folder, step_times, write_sft_config


def write_config(tmp: Path, model: Path, optimizer: str, steps: int) -> Path:
    text = " ".join(["a quick brown fox jumps over the lazy dog"] * 40)
    training = {"batch_size": 2, "max_length": 128, "max_steps": steps, "optimizer": optimizer,
                "mixed_precision": "no", "logging_steps": 1, "save_steps": 100000, "lr": 1e-5}  # fmt: skip
    rows = [{"text": text}] * 64
    return write_sft_config(tmp / f"{optimizer}.yml", model, rows, training, chat_template="none")


def time_to_first_step(config: Path, cache: Path) -> float:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    return step_times(config, env, 1)[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300, help="max_steps of the runs (300: CAME compiles every group)")
    args = parser.parse_args()
    model = smollm2_folder()
    seconds: dict[str, list[float]] = {"adamw_torch": [], "came_8bit": []}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for rep in range(args.reps):
            for optimizer in seconds:
                cache = tmp / f"inductor-{optimizer}-{rep}"
                elapsed = time_to_first_step(write_config(tmp, model, optimizer, args.steps), cache)
                seconds[optimizer].append(elapsed)
                print(f"{optimizer}: first step after {elapsed:.1f} s (empty inductor cache)", flush=True)
    adamw, came = (statistics.median(seconds[k]) for k in ("adamw_torch", "came_8bit"))
    verdict = "met" if came / adamw <= 1.2 else "missed"
    print(f"time to first step, SmolLM2-135M full fine-tune, max_steps {args.steps}: came_8bit {came:.1f} s / "
          f"adamw_torch {adamw:.1f} s = {came / adamw:.2f}x (target <= 1.2x: {verdict})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

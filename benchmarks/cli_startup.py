"""CLI start-up: `autotrain --help` and `autotrain validate` against a bare `python -c pass`, in one run.

    python benchmarks/cli_startup.py [--repeat 30] [--smoke]

Each repetition runs the three commands once, in turn, so load on the machine affects them alike. Two
ratios per command against bare Python: median wall time, and median CPU time (user + system of the child),
which a busy machine disturbs less. Targets, as ratios of the wall time: `--help` at most 10x, `validate`
at most 12x; the exit status is 1 when one is missed (`--smoke`: two runs each, no verdict).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

from _common import AUTOTRAIN, ROOT

CONFIG = "configs/llm/llama3-orpo.yml"
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "autotrain --help": [*AUTOTRAIN, "--help"],
    f"autotrain validate {CONFIG}": [*AUTOTRAIN, "validate", CONFIG],
}
BASELINE = "python -c pass"
RATIO_TARGETS = {"autotrain --help": 10.0, f"autotrain validate {CONFIG}": 12.0}


def time_once(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of `argv`; a failure stops the benchmark."""
    before = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr.decode()}")
    return wall, _children_cpu() - before


def _children_cpu() -> float:
    """User + system seconds of the children that have ended (microseconds, where os.times counts 10 ms ticks)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def measure(repeat: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds of each command over `repeat` interleaved rounds, after one warm-up round."""
    for argv in COMMANDS.values():  # warm the file cache and .pyc files; not counted
        time_once(argv)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    for _ in range(repeat):
        for name, argv in COMMANDS.items():
            runs[name].append(time_once(argv))
    return {name: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r)) for name, r in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30, help="Runs of each command (default 30).")
    parser.add_argument("--smoke", action="store_true", help="Two runs each, to check the script works; no verdict.")
    args = parser.parse_args()
    repeat = 2 if args.smoke else args.repeat

    medians = measure(repeat)
    wall0, cpu0 = medians[BASELINE]
    print(f"{'command':<50} {'wall s':>7} {'x python':>9} {'cpu s':>7} {'x python':>9} {'target':>7}")
    missed = []
    for name, (wall, cpu) in medians.items():
        target = RATIO_TARGETS.get(name)
        shown = f"{target:g}x" if target else ""
        print(f"{name:<50} {wall:>7.3f} {wall / wall0:>9.1f} {cpu:>7.3f} {cpu / cpu0:>9.1f} {shown:>7}")
        if target and wall / wall0 > target:
            missed.append(name)
    print(f"({repeat} runs each, interleaved, medians; python {sys.version.split()[0]})")
    if args.smoke:
        return 0
    if missed:
        print("missed target: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

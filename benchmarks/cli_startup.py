"""CLI start-up time: median wall time of `autotrain --help` and `autotrain validate`, against bare python.

    python benchmarks/cli_startup.py [--repeat 30]

Each repetition runs the three commands once, in turn, so load on the machine affects them alike. Targets:
`--help` median under 0.3 s, `validate` under 0.4 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The installed console script next to this interpreter; else the same entry point run by it.
SCRIPT = Path(sys.executable).with_name("autotrain")
AUTOTRAIN = (
    [str(SCRIPT)]
    if SCRIPT.exists()
    else [
        sys.executable,
        "-c",
        "import sys; from autotrain.cli.main import main; sys.argv[0] = 'autotrain'; main()",
    ]
)
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "autotrain --help": [*AUTOTRAIN, "--help"],
    "autotrain validate configs/llm/llama3-orpo.yml": [*AUTOTRAIN, "validate", "configs/llm/llama3-orpo.yml"],
}
TARGETS = {"autotrain --help": 0.3, "autotrain validate configs/llm/llama3-orpo.yml": 0.4}


def time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr.decode()}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30, help="Runs of each command (default 30).")
    args = parser.parse_args()

    for argv in COMMANDS.values():  # warm the file cache and .pyc files; not counted
        time_once(argv)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeat):
        for name, argv in COMMANDS.items():
            times[name].append(time_once(argv))

    medians = {name: statistics.median(values) for name, values in times.items()}
    baseline = medians["python -c pass"]
    print(f"{'command':<48} {'median s':>9} {'x python':>9} {'target s':>9}")
    missed = []
    for name, median in medians.items():
        target = TARGETS.get(name)
        print(f"{name:<48} {median:>9.3f} {median / baseline:>9.1f} {target if target else '':>9}")
        if target and median >= target:
            missed.append(name)
    print(f"({args.repeat} runs each, interleaved; python {sys.version.split()[0]})")
    if missed:
        print("missed target: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

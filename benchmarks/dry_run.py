"""Wall time of `autotrain llm --config F --dry-run` (plan, memory estimate and data preview) on SmolLM2-135M
from a local folder: no weights are loaded, only its config.json and tokenizer.

    python benchmarks/dry_run.py [--repeat 5] [--tiny] [--smoke]

Each repetition is a new process, run one after another; the median is printed with the target (< 5 s on
an idle 2-core machine) and bare `python -c pass` for scale. Run it on an otherwise idle machine. `--smoke`:
one run on the tiny Llama, to check the script works.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from _common import AUTOTRAIN, ROOT, run_timed, smollm2_folder, write_sft_config


def write_config(tmp: Path, model: Path) -> Path:
    rows = [{"messages": [{"role": "user", "content": f"question {i}?"}, {"role": "assistant", "content": "answer"}]}
            for i in range(200)]  # fmt: skip
    training = {"batch_size": 2, "max_length": 512, "mixed_precision": "no", "max_steps": 10}
    return write_sft_config(tmp / "config.yml", model, rows, training)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="the tests' tiny Llama instead of SmolLM2-135M")
    parser.add_argument("--smoke", action="store_true", help="--tiny --repeat 1: checks the script works")
    args = parser.parse_args()
    if args.smoke:
        args.tiny, args.repeat = True, 1
    model = ROOT / "tests" / "assets" / "tiny-llama" if args.tiny else smollm2_folder()
    with tempfile.TemporaryDirectory() as name:
        path = write_config(Path(name), model)
        argv = [*AUTOTRAIN, "llm", "--config", str(path), "--dry-run"]
        run_timed(argv)  # warm the file cache
        times = [run_timed(argv) for _ in range(args.repeat)]
    bare = statistics.median(run_timed([sys.executable, "-c", "pass"]) for _ in range(args.repeat))
    median = statistics.median(times)
    print(f"dry run ({'tiny Llama' if args.tiny else 'SmolLM2-135M'}, local folder): median {median:.2f} s over "
          f"{args.repeat} ({', '.join(f'{t:.2f}' for t in times)}); bare python {bare:.2f} s; target < 5 s: "
          f"{'met' if median < 5 else 'missed'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

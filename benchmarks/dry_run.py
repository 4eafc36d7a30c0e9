"""Wall time of `autotrain llm --config F --dry-run` (plan, memory estimate and data preview) on SmolLM2-135M
from a local folder: no weights are loaded, only its config.json and tokenizer.

    python benchmarks/dry_run.py [--repeat 5] [--tiny] [--hub-data] [--smoke]

Each repetition is a new process, run one after another; the median is printed with the target (< 5 s on
an idle 2-core machine) and bare `python -c pass` for scale. Run it on an otherwise idle machine. `--smoke`:
one run on the tiny Llama, to check the script works. `--hub-data`: the data named by a hub id (never
fetched: the hub check is skipped), so the dry run shows no data preview and needs no `datasets`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _common import AUTOTRAIN, ROOT, run_timed, smollm2_folder, write_sft_config


def write_config(tmp: Path, model: Path, hub_data: bool = False) -> Path:
    rows = [{"messages": [{"role": "user", "content": f"question {i}?"}, {"role": "assistant", "content": "answer"}]}
            for i in range(200)]  # fmt: skip
    training = {"batch_size": 2, "max_length": 512, "mixed_precision": "no", "max_steps": 10}
    path = write_sft_config(tmp / "config.yml", model, rows, training)
    if hub_data:
        path.write_text(path.read_text().replace(str(path.with_suffix(".jsonl")), "someone/chat-data"))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="the tests' tiny Llama instead of SmolLM2-135M")
    parser.add_argument("--hub-data", action="store_true", help="data named by a hub id: no data preview")
    parser.add_argument("--smoke", action="store_true", help="--tiny --repeat 1: checks the script works")
    args = parser.parse_args()
    if args.smoke:
        args.tiny, args.repeat = True, 1
    model = ROOT / "tests" / "assets" / "tiny-llama" if args.tiny else smollm2_folder()
    with tempfile.TemporaryDirectory() as name:
        path = write_config(Path(name), model, args.hub_data)
        argv = [*AUTOTRAIN, "llm", "--config", str(path), "--dry-run"]
        env = {**os.environ, "AUTOTRAIN_SKIP_HUB_CHECK": "1"} if args.hub_data else None
        run_timed(argv, env=env)  # warm the file cache
        times = [run_timed(argv, env=env) for _ in range(args.repeat)]
    bare = statistics.median(run_timed([sys.executable, "-c", "pass"]) for _ in range(args.repeat))
    median = statistics.median(times)
    what = f"{'tiny Llama' if args.tiny else 'SmolLM2-135M'}, local folder, {'hub' if args.hub_data else 'local'} data"
    print(f"dry run ({what}): median {median:.2f} s over "
          f"{args.repeat} ({', '.join(f'{t:.2f}' for t in times)}); bare python {bare:.2f} s; target < 5 s: "
          f"{'met' if median < 5 else 'missed'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

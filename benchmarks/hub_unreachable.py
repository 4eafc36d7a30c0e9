"""Seconds from start to the first clear error when the Hugging Face Hub cannot be reached.

    python benchmarks/hub_unreachable.py

`autotrain llm --config configs/llm/sft.yml` (a hub model and a hub dataset) with the hub endpoint pointed
at a closed local port, as on a machine without network: the run and `--dry-run` with the hub check,
against the same run with the check skipped (AUTOTRAIN_SKIP_HUB_CHECK=1), where transformers' own
retries decide when it fails. Each figure is process start to exit; the error line is printed too.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import AUTOTRAIN, ROOT, print_table

SFT = ROOT / "configs" / "llm" / "sft.yml"
ENV = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "OMP_NUM_THREADS": "1"}
for name in ("AUTOTRAIN_DEBUG", "AUTOTRAIN_SKIP_HUB_CHECK", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    ENV.pop(name, None)


def attempt(tmp: Path, *extra: str, skip_check: bool = False) -> tuple[float, int, str]:
    args = [*AUTOTRAIN, "llm", "--config", str(SFT), "--set", "log=none", "--set", "peft.quantization=null"]
    args += ["--set", f"project_name={tmp / 'run'}", *extra]
    env = {**ENV, "AUTOTRAIN_SKIP_HUB_CHECK": "1"} if skip_check else ENV
    began = time.perf_counter()
    done = subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return time.perf_counter() - began, done.returncode, errors[0] if errors else done.stderr.strip()[-300:]


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    with tempfile.TemporaryDirectory(prefix="autotrain-hub-") as name:
        tmp = Path(name)
        dry = attempt(tmp, "--dry-run")
        run = attempt(tmp)
        baseline = attempt(tmp, skip_check=True)
    rows = [
        ["--dry-run", f"{dry[0]:.1f}", f"{baseline[0]:.1f}", f"{dry[0] / baseline[0]:.2f}", str(dry[1])],
        ["run", f"{run[0]:.1f}", f"{baseline[0]:.1f}", f"{run[0] / baseline[0]:.2f}", str(run[1])],
    ]
    print_table(rows, ["command", "s to the error", "a run without the check, s", "ratio", "exit code"])
    print(f"with the check:    {run[2]}")
    print(f"without the check: {baseline[2]}")
    return 0 if dry[1] == run[1] == 2 else 1


if __name__ == "__main__":
    sys.exit(main())

"""Helpers the benchmark scripts share: timing a subprocess and printing a figures table."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# The installed console script next to this interpreter; else the same entry point run by it.
_SCRIPT = Path(sys.executable).with_name("autotrain")
AUTOTRAIN = (
    [str(_SCRIPT)]
    if _SCRIPT.exists()
    else [
        sys.executable,
        "-c",
        "import sys; from autotrain.cli.main import main; sys.argv[0] = 'autotrain'; main()",
    ]
)


def write_sft_config(path: Path, model: Path, rows: list[dict], training: dict, **data) -> Path:
    """An `autotrain llm` SFT config at ``path`` (its data, ``rows``, beside it as JSON lines), logging off,
    its project folder beside it; ``data``: more data fields."""
    rows_path = path.with_suffix(".jsonl")
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(model),
        "project_name": str(path.parent / f"run-{path.stem}-{time.monotonic_ns()}"),
        "log": "none",
        "data": {"path": str(rows_path), **data},
        "training_args": training,
    }
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def run_timed(argv: Sequence[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> float:
    """Wall time in seconds of one subprocess, from start to exit; a failure stops the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        tail = done.stdout.decode(errors="replace")[-4000:]
        raise SystemExit(f"{' '.join(map(str, argv))} exited {done.returncode}:\n{tail}")
    return elapsed


def print_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> None:
    """A Markdown table, columns padded so it also reads well in a terminal."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))

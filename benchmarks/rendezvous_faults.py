"""Time from start to the named error for each multi-node fault, two "machines" on loopback, CPU (gloo).

    python benchmarks/rendezvous_faults.py [--timeout 60]

Each fault starts real `autotrain llm` processes and times each one from its start to its exit with code 2;
the baseline, measured in the same run, is a healthy pair's time from start to "all machines checked in".
The target is under 60 s with the default `distributed.rendezvous_timeout` (60 s, counted from each
machine's start).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _common import print_table

ASSETS = Path(__file__).resolve().parents[1] / "tests" / "assets"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config(folder: Path, port: int, timeout: int, processes: int = 1, num_machines: int = 2) -> Path:
    data = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(ASSETS / "tiny-llama"),
        "project_name": str(folder / "run"),
        "data": {"path": str(ASSETS / "data" / "text.jsonl")},
        "training_args": {"max_steps": 2, "batch_size": 2, "max_length": 32, "mixed_precision": "no"},
        "distributed": {
            "num_processes": processes,
            "num_machines": num_machines,
            "main_process_ip": "127.0.0.1",
            "main_process_port": port,
            "rendezvous_timeout": timeout,
        },
    }
    path = folder / "config.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def start(path: Path, sets: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "AUTOTRAIN_LAUNCHED")}
    env.update(CUDA_VISIBLE_DEVICES="", **(extra_env or {}))
    argv = [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(path)]
    for item in sets:
        argv += ["--set", item]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def timed(machines: list[list[str]], timeout: int, env=None, hold_port=False, **kw) -> list[tuple[float, int, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        path = config(Path(tmp), port, timeout, **kw)
        holder = socket.socket()
        if hold_port:
            holder.bind(("0.0.0.0", port))
            holder.listen()
        began = time.monotonic()
        running = [start(path, [s.format(other=free_port()) for s in sets], env) for sets in machines]
        out = []
        for process in running:
            _, err = process.communicate(timeout=900)
            line = next((x for x in err.splitlines() if x.startswith("error:")), err.strip().splitlines()[-1:])
            out.append((time.monotonic() - began, process.returncode, str(line)[:150]))
        holder.close()
        return out


def checked_in(timeout: int) -> float:
    """Baseline: a healthy pair, from start to machine 0's "all machines checked in" line."""
    with tempfile.TemporaryDirectory() as tmp:
        path = config(Path(tmp), free_port(), timeout)
        began = time.monotonic()
        running = [start(path, [f"distributed.machine_rank={r}"]) for r in (0, 1)]
        for line in running[0].stdout:
            if line.startswith("rendezvous: all"):
                seconds = time.monotonic() - began
                break
        for process in running:
            process.kill()
            process.communicate()
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=int, default=60)
    t = parser.parse_args().timeout
    r0, r1 = ["distributed.machine_rank=0"], ["distributed.machine_rank=1"]
    faults = {
        "machine 1 missing": timed([r0], t),
        "wrong port on machine 1": timed([r0, [*r1, "distributed.main_process_port={other}"]], t),
        "machine 1 says num_machines 3": timed([r0, [*r1, "distributed.num_machines=3"]], t),
        "port in use on machine 0": timed([r0], t, hold_port=True),
        "GLOO_SOCKET_IFNAME wrong (1 machine, 2 ranks)": timed(
            [[]], t, {"GLOO_SOCKET_IFNAME": "nosuch0"}, processes=2, num_machines=1
        ),
    }
    baseline = checked_in(t)
    rows = [["healthy pair: start -> all checked in (baseline)", "0", f"{baseline:.1f}", "-", ""]]
    for name, results in faults.items():
        for machine, (seconds, code, line) in enumerate(results):
            rows.append([name, str(machine), f"{seconds:.1f}", f"{seconds / baseline:.1f}x", f"exit {code}: {line}"])
    print(f"rendezvous_timeout {t} s")
    print_table(rows, ["fault", "machine", "seconds to exit", "vs baseline", "what it said"])


if __name__ == "__main__":
    main()

"""Which process a record names, and whether it still runs (no torch).

A pid alone is not enough to tell: pids are reused, so a record holds the pid with the process's start time
and the host it runs on. `run.json` records the run's process this way; whoever reads it later (the app
after a restart, a `--resume`) can tell a live run from one whose process was killed, and signal only the
process that really is the run's.
"""

from __future__ import annotations

import json
import os
import socket

ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"
# Start times are read back from the kernel's tick count: the same process reads the same to well within this.
_SAME_START = 0.5


def identity(pid: int | None = None) -> dict:
    """{"pid", "started", "host"} of process `pid` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "started": _start_time(pid), "host": socket.gethostname()}


def _start_time(pid: int) -> float | None:
    import psutil

    try:
        return round(psutil.Process(pid).create_time(), 2)
    except (psutil.Error, OSError, ValueError):
        return None


def state(record: object) -> str:
    """ALIVE, GONE, or UNKNOWN (no usable record, or a process of another machine)."""
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int) or record["pid"] <= 0:
        return UNKNOWN
    if record.get("host") != socket.gethostname():
        return UNKNOWN
    started = _start_time(record["pid"])
    if started is None:
        return GONE
    recorded = record.get("started")
    if not isinstance(recorded, (int, float)):
        return ALIVE  # the pid is in use; without a start time, a reused pid cannot be told apart
    return ALIVE if abs(started - recorded) < _SAME_START else GONE


def send(record: object, signum: int) -> bool:
    """Send `signum` to the recorded process if it is still that process; True if sent."""
    if state(record) != ALIVE:
        return False
    try:
        os.kill(record["pid"], signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists (a reused pid counts: callers only leave its files alone then)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def to_env(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"))


def from_env(value: str | None) -> dict | None:
    """A record passed in the environment (`to_env`), or None."""
    try:
        record = json.loads(value) if value else None
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("pid"), int) else None
